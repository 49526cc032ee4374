"""An ACP agent's permission options: the core's reading of the answer (a picked option decides
by its kind; one not offered is a denial), the wire shapes, and the terminal's numbered keys."""

from __future__ import annotations

import msgspec

from coven_ls.core.agent import Decision
from coven_ls.core.session.permission import picked
from coven_ls.protocol import events
from coven_ls.protocol.types import (
    PermissionOption,
    RequestPermissionParams,
    RequestPermissionResult,
)
from coven_ls.term import options as term_options

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
