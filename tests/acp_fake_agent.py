"""A scripted ACP agent on the official SDK's agent side: in-process for the adapter's unit tests
(`connector`), or its own process over stdio (`python -m tests.acp_fake_agent`).

A prompt's text picks what it does: "tool" runs a shell tool that asks permission, "plan" sends a
plan, a read tool call with its updates, and the plan again all done, "wait" streams
a little and waits for `session/cancel`, "unknown" sends an update and a request coven-ls does
not know; a prompt that holds a key of `replies` answers its value (the first that matches);
"die" (as a process) says a word and exits with code 3 mid-turn; anything else answers
"echo: <text>". Each turn ends with a `usage_update`. `fork=False`: no
session/fork. Every prompt is in `prompts` with its session, every session's cwd in `cwds`.
In-process, each connection (a session's agent process) has its own view of the one fake. As a
process: `--linger` (does not exit when its stdin closes), `--no-fork` (no session/fork),
`--old-protocol` (answers `initialize` with protocol version 0).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from acp import PROTOCOL_VERSION, RequestError, connect_to_agent, run_agent, text_block
from acp._transport import memory_transport_pair
from acp.agent.connection import AgentSideConnection
from acp.helpers import (
    plan_entry,
    start_tool_call,
    tool_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_current_mode,
    update_plan,
    update_tool_call,
)
from acp.schema import (
    AgentCapabilities,
    CloseSessionResponse,
    Cost,
    DeleteSessionRequest,
    DeleteSessionResponse,
    ForkSessionResponse,
    Implementation,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
    SessionDeleteCapabilities,
    SessionForkCapabilities,
    SessionMode,
    SessionModeState,
    SessionResumeCapabilities,
    SetSessionModeResponse,
    ToolCallLocation,
    UsageUpdate,
)

OPTIONS = [
    PermissionOption(option_id="yes-always", name="Always", kind="allow_always"),
    PermissionOption(option_id="yes", name="Allow", kind="allow_once"),
    PermissionOption(option_id="no", name="Reject", kind="reject_once"),
]


class FakeAgent:
    def __init__(
        self,
        *,
        fork: bool = True,
        resume: bool = True,
        modes: tuple[str, ...] = ("auto", "default"),
        currency: str = "USD",
        close: bool = False,
        delete: bool = False,
    ) -> None:
        self.fork, self.resume, self.modes, self.currency = fork, resume, modes, currency
        self.close, self.delete = close, delete
        self.undeletable: set[str] = set()  # session ids whose session/delete fails
        self.conn: Any = None
        self.calls: list[tuple[str, Any]] = []
        self.cancelled = asyncio.Event()
        self.answered = asyncio.Event()
        self.permission: Any = None  # the last permission answer
        self.unknown_answer: Any = None
        self.cost = 0.0
        self.sessions = 0
        self.protocol_version = PROTOCOL_VERSION
        self.replies: dict[str, str] = {}
        self.prompts: list[tuple[str, str]] = []  # (session id, text)
        self.cwds: dict[str, str] = {}  # session id -> its cwd
        self.conns: dict[str, Any] = {}  # session id -> the connection it was opened on

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    def conn_of(self, session_id: str) -> Any:
        """The connection that opened `session_id` (in-process: each session's own)."""
        return self.conns.get(session_id, self.conn)

    async def initialize(self, protocol_version: int, **_: Any) -> InitializeResponse:
        caps = SessionCapabilities(
            fork=SessionForkCapabilities() if self.fork else None,
            resume=SessionResumeCapabilities() if self.resume else None,
            close=SessionCloseCapabilities() if self.close else None,
            delete=SessionDeleteCapabilities() if self.delete else None,
        )
        return InitializeResponse(
            protocol_version=self.protocol_version,
            agent_capabilities=AgentCapabilities(load_session=True, session_capabilities=caps),
            agent_info=Implementation(name="fake-acp", version="0.0.1"),
        )

    def _modes(self) -> SessionModeState | None:
        if not self.modes:
            return None
        return SessionModeState(
            current_mode_id=self.modes[0],
            available_modes=[SessionMode(id=m, name=m) for m in self.modes],
        )

    async def new_session(self, cwd: str, **_: Any) -> NewSessionResponse:
        self.sessions += 1
        self.calls.append(("new", cwd))
        self.cwds[f"s{self.sessions}"] = cwd
        return NewSessionResponse(session_id=f"s{self.sessions}", modes=self._modes())

    async def load_session(self, cwd: str, session_id: str, **_: Any) -> LoadSessionResponse:
        self.calls.append(("load", session_id))
        # The history, replayed: not news to the client.
        await self.conn_of(session_id).session_update(
            session_id, update_agent_message_text("old answer")
        )
        return LoadSessionResponse(modes=self._modes())

    async def resume_session(self, cwd: str, session_id: str, **_: Any) -> ResumeSessionResponse:
        self.calls.append(("resume", session_id))
        return ResumeSessionResponse(modes=self._modes())

    async def fork_session(self, cwd: str, session_id: str, **_: Any) -> ForkSessionResponse:
        if not self.fork:
            raise RequestError.method_not_found("session/fork")
        self.calls.append(("fork", session_id))
        self.sessions += 1
        self.cwds[f"s{self.sessions}"] = cwd
        return ForkSessionResponse(session_id=f"s{self.sessions}", modes=self._modes())

    async def set_session_mode(
        self, mode_id: str, session_id: str, **_: Any
    ) -> SetSessionModeResponse:
        self.calls.append(("mode", mode_id))
        await self.conn_of(session_id).session_update(session_id, update_current_mode(mode_id))
        return SetSessionModeResponse()

    async def close_session(self, session_id: str, **_: Any) -> CloseSessionResponse:
        self.calls.append(("close", session_id))
        return CloseSessionResponse()

    async def delete_session(self, session_id: str, **_: Any) -> DeleteSessionResponse:
        self.calls.append(("delete", session_id))
        if session_id in self.undeletable:
            raise RequestError.internal_error({"reason": f"{session_id} is locked"})
        return DeleteSessionResponse()

    async def cancel(self, session_id: str, **_: Any) -> None:
        self.calls.append(("cancel", session_id))
        self.cancelled.set()

    async def prompt(self, prompt: list[Any], session_id: str, **_: Any) -> PromptResponse:
        text = "".join(getattr(block, "text", "") for block in prompt)
        self.calls.append(("prompt", text))
        self.prompts.append((session_id, text))
        conn = self.conn_of(session_id)
        say = conn.session_update
        reply = next((r for key, r in self.replies.items() if key in text), None)
        if text == "tool":
            await say(session_id, update_agent_thought_text("I should look."))
            await say(session_id, update_plan([plan_entry("list files", status="in_progress")]))
            await say(
                session_id,
                start_tool_call(
                    "call-1",
                    "ls -a",
                    kind="execute",
                    status="pending",
                    raw_input={"command": "ls -a"},
                    locations=[ToolCallLocation(path=cwd_of(self), line=3)],
                ),
            )
            answer = await conn.request_permission(
                session_id=session_id,
                tool_call=update_tool_call("call-1", title="ls -a", kind="execute"),
                options=OPTIONS,
            )
            self.permission = answer.outcome
            self.answered.set()
            allowed = getattr(answer.outcome, "option_id", None) in ("yes", "yes-always")
            await say(session_id, update_tool_call("call-1", status="in_progress"))
            await say(
                session_id,
                update_tool_call(
                    "call-1",
                    status="completed" if allowed else "failed",
                    content=[tool_content(text_block("a.txt" if allowed else "rejected"))],
                ),
            )
            await say(session_id, update_agent_message_text("Listed."))
        elif text.rsplit("</coven-instructions>\n\n", 1)[-1] == "plan":  # a first prompt too
            steps = ["Read the parser", "Fix it"]
            await say(
                session_id,
                update_plan(
                    [
                        plan_entry(steps[0], status="in_progress", priority="high"),
                        plan_entry(steps[1], priority="low"),
                    ]
                ),
            )
            where = os.path.join(cwd_of(self), "parser.py")
            await say(session_id, start_tool_call("call-3", "Read", kind="read", status="pending"))
            await say(
                session_id,
                update_tool_call(
                    "call-3",
                    status="in_progress",
                    title="Read parser.py",
                    content=[tool_content(text_block("def parse("))],
                    locations=[ToolCallLocation(path=where, line=7)],
                ),
            )
            await say(
                session_id,
                update_tool_call(
                    "call-3",
                    status="completed",
                    content=[tool_content(text_block("def parse(): ..."))],
                ),
            )
            await say(
                session_id,
                update_plan([plan_entry(step, status="completed") for step in steps]),
            )
            await say(session_id, update_agent_message_text("Planned."))
        elif text == "wait":
            await say(session_id, update_agent_message_text("Working"))
            await say(session_id, start_tool_call("call-2", "sleep 100", kind="execute"))
            await asyncio.wait_for(self.cancelled.wait(), 30)
            return PromptResponse(stop_reason="cancelled")
        elif text == "die":
            await say(session_id, update_agent_message_text("dying"))
            await asyncio.sleep(0.2)  # the update is on its way before the process ends
            os._exit(3)
        elif text == "unknown":
            await conn._conn.send_notification(
                "session/update",
                {"sessionId": session_id, "update": {"sessionUpdate": "brand_new_thing"}},
            )
            try:
                self.unknown_answer = await conn._conn.send_request("craft/drainMidTurnQueue", {})
            except RequestError as exc:
                self.unknown_answer = exc
            await say(session_id, update_agent_message_text("still here"))
        elif reply is not None:
            await say(session_id, update_agent_message_text(reply))
        else:
            # coven's instructions ahead of a first prompt are not echoed (they show a <fork>).
            said = text.rsplit("</coven-instructions>\n\n", 1)[-1]
            await say(session_id, update_agent_message_text("echo: "))
            await say(session_id, update_agent_message_text(said))
        self.cost += 0.25
        await say(
            session_id,
            UsageUpdate(
                session_update="usage_update",
                used=1200,
                size=200000,
                cost=Cost(amount=self.cost, currency=self.currency),
            ),
        )
        return PromptResponse(stop_reason="end_turn")


def cwd_of(agent: FakeAgent) -> str:
    return next((str(arg) for call, arg in agent.calls if call == "new"), "/")


class View:
    """One connection's view of a shared FakeAgent: the sessions it opens send their updates
    on it (several sessions' processes run at once, a fork's children)."""

    def __init__(self, fake: FakeAgent) -> None:
        self._fake = fake
        self._conn: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fake, name)

    def on_connect(self, conn: Any) -> None:
        self._conn = conn
        self._fake.on_connect(conn)

    async def new_session(self, cwd: str, **kw: Any) -> NewSessionResponse:
        answer = await self._fake.new_session(cwd, **kw)
        self._fake.conns[answer.session_id] = self._conn
        return answer

    async def fork_session(self, cwd: str, session_id: str, **kw: Any) -> ForkSessionResponse:
        answer = await self._fake.fork_session(cwd, session_id, **kw)
        self._fake.conns[answer.session_id] = self._conn
        return answer

    async def load_session(self, cwd: str, session_id: str, **kw: Any) -> LoadSessionResponse:
        self._fake.conns[session_id] = self._conn
        return await self._fake.load_session(cwd, session_id, **kw)

    async def resume_session(self, cwd: str, session_id: str, **kw: Any) -> ResumeSessionResponse:
        self._fake.conns[session_id] = self._conn
        return await self._fake.resume_session(cwd, session_id, **kw)


def connector(fake: FakeAgent) -> Any:
    """A `Connect` (coven_ls/agents/acp/process.py) to `fake`, in this process."""
    from coven_ls.agents.acp.process import Link

    async def connect(client: Any, on_exit: Any) -> Link:
        ours, theirs = memory_transport_pair()
        view = View(fake)
        side = AgentSideConnection(view, theirs, use_unstable_protocol=True)
        # The SDK's agent side (0.12) routes no session/delete: give it the fake's.
        side._conn._handler.route_request(
            "session/delete", DeleteSessionRequest, view, "delete_session", unstable=True
        )
        return Link(connect_to_agent(client, ours, use_unstable_protocol=True))

    return connect


async def _main() -> None:
    fake = FakeAgent()
    if "--no-fork" in sys.argv:
        fake.fork = False
    if "--old-protocol" in sys.argv:
        fake.protocol_version = 0
    await run_agent(fake, use_unstable_protocol=True)
    if "--linger" in sys.argv:
        await asyncio.sleep(3600)  # an agent that does not exit when its stdin closes


if __name__ == "__main__":
    asyncio.run(_main())
