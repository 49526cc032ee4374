"""`coven-ls chat`'s dialogs: what it asks the user at the input line on the server's behalf (a
tool's permission, a proposed fork, a fork child's changes to apply or discard), each through
the chat's one way of asking (`Chat.ask`: the line being typed put aside, the question gone when
it is settled elsewhere), and what the answer sends back. The chat is seen through `DialogHost`,
the little of it the dialogs use."""

from __future__ import annotations

from typing import Any, Protocol

from pygls.exceptions import JsonRpcException

from .. import protocol
from ..protocol.describe import change_counts, one_line, summarize_input
from . import chat_commands as cmd
from . import options
from .client import CovenClient, PermissionAnswer
from .render import estimate_lines, file_listing
from .run import applied_line


class DialogHost(Protocol):
    """What the dialogs need of the chat (`chat.Chat`)."""

    client: CovenClient
    current: str | None
    infos: dict[str, dict[str, Any]]  # sessionId -> SessionInfo, kept current
    proposed: dict[str, str]  # sessionId -> the forkId awaiting a decision
    reviewed: set[str]  # fork children whose changes were applied or discarded

    async def ask(
        self,
        text: str,
        choices: str,
        key: tuple[str, ...] | None = None,
        default: str = "",
        gone: str = "the question was settled elsewhere",
    ) -> str | None: ...

    def say(self, text: str) -> None: ...

    async def refresh(self) -> None: ...


async def ask_permission(chat: DialogHost, request: dict[str, Any]) -> PermissionAnswer:
    info = chat.infos.get(request["sessionId"]) or {}
    name = one_line(info.get("label") or info.get("title") or request["sessionId"], 40)
    question = (
        f"Allow {request['toolName']} in '{name}': "
        f"{summarize_input(request.get('input') or {}, 120)}?"
    )
    choices = options.offered(request)
    answer = await chat.ask(
        f"{question}\n  {options.listing(choices)}" if choices else question,
        options.KEYS[: len(choices)] if choices else "yn",
        ("permission", request["sessionId"], str(request.get("toolUseId"))),
        gone="the permission request was withdrawn: its turn ended",
    )
    if choices and answer is not None:
        return options.answer(choices, answer)
    if answer == "y":
        return {"allow": True}
    if answer is None:
        return {"allow": False, "message": "Denied: the user pressed Ctrl+C."}
    return {"allow": False, "message": "Denied by the user."}


async def ask_fork(chat: DialogHost, event: dict[str, Any]) -> None:
    """y approves, n rejects, e edits the tasks (on one line, `;` between them, starting as
    they are) and asks again; gone once the fork is decided elsewhere."""
    sid, fork_id = event["sessionId"], event["forkId"]
    key = ("fork", fork_id)
    tasks: list[str] = list(event["tasks"])
    edited = False
    while True:
        listing = "\n".join(f"  {n}. {task}" for n, task in enumerate(tasks, 1))
        answer = await chat.ask(
            f"Claude proposes to fork into {len(tasks)} task{'s' if len(tasks) != 1 else ''}:"
            f"\n{listing}\n{estimate_lines(event, len(tasks))}"
            "Approve the fork? (e: edit the tasks)",
            "yne",
            key,
            gone="the fork was decided elsewhere",
        )
        if answer is None or chat.proposed.get(sid) != fork_id:
            return  # left for /approve or /reject, or decided meanwhile
        if answer == "e":
            typed = await chat.ask(
                "Tasks (; between them):",
                "",
                key,
                "; ".join(tasks),
                gone="the fork was decided elsewhere",
            )
            if typed is not None and cmd.tasks_of(typed):
                tasks, edited = cmd.tasks_of(typed), True
            continue
        params: dict[str, Any] = {"forkId": fork_id, "approve": answer == "y"}
        if answer == "y" and edited:
            params["tasks"] = tasks
        if answer == "n":
            params["reason"] = "rejected in the terminal"
        try:
            await chat.client.request(protocol.DECIDE_FORK, params)
            return
        except JsonRpcException as exc:
            chat.say(f"coven-ls: {exc.message}")
            if exc.code != protocol.ErrorCode.InvalidParams:
                return  # withdrawn or decided meanwhile; a bad task list is asked again


async def review_current(chat: DialogHost) -> None:
    await chat.refresh()
    pending = [
        s["sessionId"]
        for s in chat.infos.values()
        if s["parentId"] == chat.current and (s.get("changes") or {}).get("merge") == "pending"
    ]
    if not pending:
        chat.say("No fork child of this session has changes waiting for review.")
        return
    await review(chat, pending)


async def review(chat: DialogHost, pending: list[str]) -> None:
    for child in pending:
        found = await chat.client.request(protocol.GET_CHANGES, {"sessionId": child})
        changes, repository = found["changes"], found["worktree"]["repository"]
        if changes["merge"] != "pending":
            continue  # decided meanwhile
        info = chat.infos.get(child) or {}
        name = one_line(info.get("label") or child, 40)
        listing = "\n".join(file_listing(changes))
        answer = await chat.ask(
            f"Fork child '{name}' changed {change_counts(changes)}:\n{listing}\n"
            f"Apply the changes to {repository}? (n: discard them)",
            "yn",
            ("review", child),
            gone="the changes were applied or discarded elsewhere",
        )
        if answer is None and child in chat.reviewed:
            continue  # applied or discarded elsewhere meanwhile
        if answer is None:
            return  # the rest stay pending: /review asks again
        if answer == "y":
            done = await chat.client.request(protocol.APPLY_CHANGES, {"sessionId": child})
            chat.say(applied_line(name, done["changes"]))
        else:
            await chat.client.request(protocol.DISCARD_CHANGES, {"sessionId": child})
