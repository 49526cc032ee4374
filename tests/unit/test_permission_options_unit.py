"""An ACP agent's permission options: the core's reading of the answer (a picked option decides
by its kind; one not offered is a denial), the wire shapes, and the terminal's numbered keys."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import msgspec
from acp.schema import FileEditToolCallContent, ToolCallLocation, ToolCallUpdate

from coven_ls.agents.acp.question import question_input
from coven_ls.core.agent import Decision
from coven_ls.core.session.permission import picked
from coven_ls.core.workspace import isolation
from coven_ls.lsp.connection import CovenServer
from coven_ls.protocol import events
from coven_ls.protocol.describe import describe_payload
from coven_ls.protocol.types import (
    PermissionOption,
    RequestPermissionParams,
    RequestPermissionResult,
    Worktree,
)
from coven_ls.term import options as term_options
from coven_ls.term.run import Runner, RunOptions, Terminal

OPTIONS = [
    PermissionOption(optionId="once", kind="allow_once", name="Allow once"),
    PermissionOption(optionId="always", kind="allow_always", name="Always allow"),
    PermissionOption(optionId="nope", kind="reject_once", name="Reject"),
]


def test_a_picked_option_decides_by_its_kind_whatever_allow_says() -> None:
    assert picked(Decision(False, "", "always"), OPTIONS) == Decision(True, "", "always")
    assert picked(Decision(True, "", "nope"), OPTIONS) == Decision(
        False, "Denied by the user.", "nope"
    )
    assert picked(Decision(False, "not now", "nope"), OPTIONS).message == "not now"
    # A bare answer stays as it is: the agent maps it by kind.
    assert picked(Decision(True, ""), OPTIONS) == Decision(True, "")


def test_an_option_the_question_did_not_offer_is_a_denial_saying_so() -> None:
    answer = picked(Decision(True, "", "yes-please"), OPTIONS)
    assert not answer.allow and answer.option_id is None
    assert "'yes-please'" in answer.message and "once, always, nope" in answer.message
    assert not picked(Decision(True, "", "once"), []).allow  # Claude's questions offer none


def test_options_are_on_the_wire_only_where_an_agent_offers_them() -> None:
    bare = RequestPermissionParams(sessionId="s", toolName="Bash", input={}, toolUseId=None)
    assert "options" not in msgspec.to_builtins(bare)
    assert msgspec.to_builtins(events.PermissionRequest(toolName="Bash", input={})) == {
        "kind": "permissionRequest",
        "toolName": "Bash",
        "input": {},
    }
    with_options = RequestPermissionParams(
        sessionId="s", toolName="Bash", input={}, toolUseId="t", options=OPTIONS
    )
    assert msgspec.to_builtins(with_options)["options"][1] == {
        "optionId": "always",
        "kind": "allow_always",
        "name": "Always allow",
    }
    answer = msgspec.json.decode(
        b'{"allow": true, "optionId": "always"}', type=RequestPermissionResult
    )
    assert answer.optionId == "always"


def test_the_terminal_numbers_the_options_and_answers_with_the_picked_one() -> None:
    request = {"options": [msgspec.to_builtins(o) for o in OPTIONS] + ["junk"]}
    choices = term_options.offered(request)
    assert len(choices) == 3
    assert term_options.listing(choices) == "1. Allow once  2. Always allow  3. Reject"
    assert term_options.answer(choices, "2") == {"allow": True, "optionId": "always"}
    assert term_options.answer(choices, "3") == {
        "allow": False,
        "message": "Denied by the user.",
        "optionId": "nope",
    }
    assert term_options.rejecting(choices) == "3"
    assert term_options.offered({"toolName": "Bash"}) == []


def test_an_acp_question_meets_the_worktree_checks_as_claudes_does(tmp_path: Path) -> None:
    repo, tree = tmp_path / "repo", tmp_path / "wt"
    worktree = Worktree(path=str(tree), branch="coven/f/1-x", base="abc", repository=str(repo))
    # opencode names an edit's file `filePath`; the diff and the locations name it too.
    edit = ToolCallUpdate(
        tool_call_id="c1",
        title="Edit a.py",
        raw_input={"filePath": f"{repo}/a.py", "oldString": "x", "newString": "y"},
        locations=[ToolCallLocation(path=f"{repo}/a.py")],
    )
    shown = question_input("Edit", edit, {})
    assert shown["file_path"] == f"{repo}/a.py" and shown["description"] == "Edit a.py"
    assert isolation.outside_write(worktree, "Edit", shown) == f"{tree}/a.py"
    two = ToolCallUpdate(
        tool_call_id="c2",
        content=[FileEditToolCallContent(type="diff", path=f"{repo}/b.py", new_text="b")],
        locations=[ToolCallLocation(path=f"{tree}/c.py")],
    )
    shown = question_input("Edit", two, {})
    assert shown["changes"] == [{"path": f"{repo}/b.py"}, {"path": f"{tree}/c.py"}]
    assert isolation.outside_write(worktree, "Edit", shown) == f"{tree}/b.py"
    # A command given as its arguments (codex-acp) is checked as one line.
    run = ToolCallUpdate(tool_call_id="c3", raw_input={"command": ["rm", "-rf", f"{repo}/build"]})
    shown = question_input("Bash", run, {})
    assert shown["command"] == f"rm -rf {repo}/build"
    assert isolation.outside_command(worktree, "Bash", shown, str(tree)) == f"{tree}/build"


def test_the_terminal_lines_of_options_modes_and_restarts() -> None:
    asked = events.PermissionRequest(toolName="Bash", input={}, options=OPTIONS)
    assert (
        describe_payload(asked) == "? Bash asks for permission (Allow once / Always allow / Reject)"
    )
    picked_one = events.PermissionDecision(toolName="Bash", allow=True, optionId="always")
    assert describe_payload(picked_one) == "  allowed Bash (always)"
    assert describe_payload(events.PermissionDecision(toolName="Bash", allow=False)) == (
        "  denied Bash"
    )
    assert describe_payload(events.ModeChanged(mode="plan")) == "◆ mode: plan"
    restarted = events.AgentRestarted(reason="It was killed.", restart=1, maxRestarts=3)
    assert describe_payload(restarted) == "↻ agent started again (1 of 3): It was killed."


class AskingProtocol:
    """CovenProtocol's `ask`, answered with `answer` and recorded (no connection)."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked: list[tuple[str, Any]] = []

    async def ask(self, method: str, params: Any) -> Any:
        self.asked.append((method, params))
        return self.answer


async def test_the_lsp_front_end_asks_with_the_options_both_ways() -> None:
    server = CovenServer(cast(Any, None), lambda _code: None)
    session = cast(Any, SimpleNamespace(id="s-1", title="T", config=SimpleNamespace(agent="oc")))
    # coven/requestPermission: the options as JSON, the answer's optionId given back.
    server.custom_permissions = True
    asking = AskingProtocol({"allow": True, "optionId": "always"})
    server.protocol = cast(Any, asking)
    answer = await server.ask_permission(session, "Bash", {"command": "ls"}, "c1", OPTIONS)
    assert answer == Decision(True, "", "always")
    [(method, params)] = asking.asked
    assert method == "coven/requestPermission"
    assert params["options"][2] == {"optionId": "nope", "kind": "reject_once", "name": "Reject"}
    # Claude's question has no options on the wire.
    await server.ask_permission(session, "Bash", {"command": "ls"}, "c2")
    assert "options" not in asking.asked[-1][1]
    # window/showMessageRequest: the options' names are the actions; the title picked is its id.
    server.custom_permissions = False
    asking = AskingProtocol(SimpleNamespace(title="Reject"))
    server.protocol = cast(Any, asking)
    answer = await server.ask_permission(session, "Bash", {"command": "ls"}, "c3", OPTIONS)
    assert answer == Decision(False, "", "nope")
    [(_method, shown)] = asking.asked
    assert [a.title for a in shown.actions] == ["Allow once", "Always allow", "Reject"]
    assert shown.message.startswith("oc wants to use Bash in session 'T'")


async def test_run_asks_with_the_options_and_answers_with_the_one_typed() -> None:
    out = io.StringIO()
    terminal = Terminal(interactive=True, yes=False, out=out)
    runner = Runner(RunOptions(prompt="p", cwd="/"), out, terminal)
    request = {
        "sessionId": "s-1",
        "toolName": "Bash",
        "input": {"command": "npm test"},
        "toolUseId": "c1",
        "options": [msgspec.to_builtins(o) for o in OPTIONS],
    }
    asked: list[tuple[str, str, str]] = []

    async def typed(question: str, choices: str, default: str, **_: Any) -> str:
        asked.append((question, choices, default))
        return "2"

    terminal.ask = typed  # type: ignore[method-assign]
    assert await runner._on_permission(request) == {"allow": True, "optionId": "always"}
    [(question, choices, default)] = asked
    assert question.endswith("\n  1. Allow once  2. Always allow  3. Reject")
    assert (choices, default) == ("123", "3")  # no terminal: the option that rejects
    # --yes allows once, whatever the agent calls it.
    yes = Terminal(interactive=False, yes=True, out=out)
    runner = Runner(RunOptions(prompt="p", cwd="/"), out, yes)
    assert await runner._on_permission(request) == {"allow": True}


def test_plans_and_tool_updates_are_described_in_one_line() -> None:
    plan = events.Plan(
        entries=[
            events.PlanEntry(content="Read", status="completed", priority="high"),
            events.PlanEntry(content="Fix", status="in_progress", priority="high"),
        ]
    )
    assert describe_payload(plan) == "☰ plan 1/2 done · [>] Fix"
    assert describe_payload(events.Plan(entries=[])) == "☰ plan: empty"
    update = events.ToolUpdate(toolUseId="call_9", status="failed", title="Run tests")
    assert describe_payload(update) == "  ↳ tool call_9: failed · Run tests"
    # Output so far alone is no news worth a line (the LSP mirror logs every described event).
    assert describe_payload(events.ToolUpdate(toolUseId="call_9", content="so far")) is None
