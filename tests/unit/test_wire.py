"""Unit tests for coven_ls.protocol: parameter validation, `to_plain`, events and their envelope."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import namedtuple
from typing import Any

import attrs
import msgspec
import pytest
from lsprotocol import types as lsp
from pygls.protocol import _dict_to_object

from coven_ls import protocol
from coven_ls.protocol import (
    CovenError,
    ForkParams,
    GetEventsParams,
    NoParams,
    SendMessageParams,
    SessionIdParams,
    StartSessionParams,
    event_dict,
    events,
    now_iso,
    parse,
    to_plain,
)


def parse_error(method: str, cls: type, raw: Any) -> CovenError:
    with pytest.raises(CovenError) as info:
        parse(method, cls, raw)
    assert info.value.code == protocol.ErrorCode.InvalidParams == -32602
    assert info.value.message.startswith(f"{method}: ")
    assert str(info.value) == info.value.message
    return info.value


# --- parse: fields -------------------------------------------------------------------------------


def test_required_and_optional_fields() -> None:
    params = parse(protocol.START_SESSION, StartSessionParams, {"prompt": "hi"})
    assert params == StartSessionParams(prompt="hi")
    assert params.cwd is None and params.model is None and params.forkMode is None

    full = parse(
        protocol.START_SESSION,
        StartSessionParams,
        {
            "prompt": "hi",
            "cwd": "/tmp",
            "model": "sonnet",
            "permissionMode": "acceptEdits",
            "forkMode": "auto",
            "title": "T",
        },
    )
    assert full == StartSessionParams("hi", "/tmp", "sonnet", "acceptEdits", "auto", "T")


def test_missing_required_field_names_method_and_field() -> None:
    error = parse_error(protocol.SEND_MESSAGE, SendMessageParams, {"sessionId": "s-1"})
    assert error.message == "coven/sendMessage: missing required field 'text'"


def test_null_for_an_optional_field_means_absent() -> None:
    params = parse(
        protocol.START_SESSION,
        StartSessionParams,
        {"prompt": "p", "cwd": None, "permissionMode": None, "forkMode": None},
    )
    assert params == StartSessionParams(prompt="p")
    assert parse(protocol.GET_EVENTS, GetEventsParams, {"sessionId": "s", "afterSeq": None}) == (
        GetEventsParams(sessionId="s", afterSeq=0)
    )


def test_null_for_a_required_field_is_a_type_error() -> None:
    error = parse_error(protocol.START_SESSION, StartSessionParams, {"prompt": None})
    assert "'prompt'" in error.message
    assert "must be a string (got null)" in error.message


def test_defaults_apply() -> None:
    assert parse(protocol.GET_EVENTS, GetEventsParams, {"sessionId": "s"}).afterSeq == 0
    assert (
        parse(protocol.GET_EVENTS, GetEventsParams, {"sessionId": "s", "afterSeq": 7}).afterSeq == 7
    )


START, GET = (StartSessionParams, protocol.START_SESSION), (GetEventsParams, protocol.GET_EVENTS)


@pytest.mark.parametrize(
    ("target", "raw", "field", "expected"),
    [
        (START, {"prompt": 5}, "prompt", "a string (got a number)"),
        (START, {"prompt": ["a"]}, "prompt", "a string (got an array)"),
        (START, {"prompt": "p", "cwd": {"a": 1}}, "cwd", "a string (got an object)"),
        (START, {"prompt": "p", "title": 1.5}, "title", "a string (got a number)"),
        (
            (SessionIdParams, protocol.CANCEL),
            {"sessionId": True},
            "sessionId",
            "a string (got a boolean)",
        ),
        (GET, {"sessionId": "s", "afterSeq": "3"}, "afterSeq", "an integer (got a string)"),
        (GET, {"sessionId": "s", "afterSeq": 1.5}, "afterSeq", "an integer (got a number)"),
        (GET, {"sessionId": "s", "afterSeq": [1]}, "afterSeq", "an integer (got an array)"),
    ],
)
def test_wrong_types(target: tuple[type, str], raw: Any, field: str, expected: str) -> None:
    cls, method = target
    error = parse_error(method, cls, raw)
    assert error.message == f"{method}: '{field}' must be {expected}"


@pytest.mark.parametrize("value", [True, False])
def test_booleans_are_not_integers(value: bool) -> None:
    error = parse_error(protocol.GET_EVENTS, GetEventsParams, {"sessionId": "s", "afterSeq": value})
    assert error.message == "coven/getEvents: 'afterSeq' must be an integer (got a boolean)"


def test_literal_values_are_listed() -> None:
    error = parse_error(
        protocol.START_SESSION, StartSessionParams, {"prompt": "p", "permissionMode": "yolo"}
    )
    assert error.message == (
        "coven/startSession: 'permissionMode' must be one of 'default', 'acceptEdits', 'plan', "
        "'bypassPermissions', 'dontAsk', 'auto' (got 'yolo')"
    )
    error = parse_error(protocol.START_SESSION, StartSessionParams, {"prompt": "p", "forkMode": 1})
    assert error.message == (
        "coven/startSession: 'forkMode' must be one of 'auto', 'approve', 'off' (got 1)"
    )


def test_literal_values_are_accepted() -> None:
    for mode in ("default", "acceptEdits", "plan", "bypassPermissions", "dontAsk", "auto"):
        params = parse(
            protocol.START_SESSION, StartSessionParams, {"prompt": "p", "permissionMode": mode}
        )
        assert params.permissionMode == mode


def test_unknown_fields_are_ignored() -> None:
    params = parse(
        protocol.SEND_MESSAGE,
        SendMessageParams,
        {"sessionId": "s-1", "text": "t", "attachments": [1, 2], "futureFlag": True},
    )
    assert params == SendMessageParams(sessionId="s-1", text="t")


@pytest.mark.parametrize(
    ("raw", "shown"),
    [([1, 2], "an array"), ("text", "a string"), (3, "a number"), (True, "a boolean")],
)
def test_params_must_be_an_object(raw: Any, shown: str) -> None:
    error = parse_error(protocol.CANCEL, SessionIdParams, raw)
    assert error.message == f"coven/cancel: params must be an object (got {shown})"


@pytest.mark.parametrize("text", ["\ud800", "ok \udfff", "\U0001f600\ud83d"])
def test_unpaired_surrogates_are_refused(text: str) -> None:
    # json.loads reads "\\ud800" into a str that no UTF-8 encoder takes.
    error = parse_error(protocol.SEND_MESSAGE, SendMessageParams, {"sessionId": "s", "text": text})
    assert "'text' must be Unicode text" in error.message and error.data == {"field": "text"}
    parse_error(protocol.FORK, ForkParams, {"sessionId": "s", "tasks": ["a", text]})
    # A surrogate pair is one character: fine.
    assert (
        parse(
            protocol.SEND_MESSAGE,
            SendMessageParams,
            json.loads('{"sessionId": "s", "text": "\\ud83d\\ude00"}'),
        ).text
        == "\U0001f600"
    )


def test_missing_params_are_an_empty_object() -> None:
    assert parse(protocol.LIST_SESSIONS, NoParams, None) == NoParams()
    error = parse_error(protocol.CANCEL, SessionIdParams, None)
    assert error.message == "coven/cancel: missing required field 'sessionId'"


def test_params_decoded_by_pygls_are_accepted() -> None:
    raw = _dict_to_object({"sessionId": "s-9", "afterSeq": 4, "extra": {"nested": [1]}})
    assert isinstance(raw, tuple)
    assert parse(protocol.GET_EVENTS, GetEventsParams, raw) == GetEventsParams("s-9", 4)


def test_int_float_and_list_annotations() -> None:
    class Params(msgspec.Struct, frozen=True):
        count: int
        ratio: float | None = None
        names: list[str] | None = None

    parsed = parse("m", Params, {"count": 2, "ratio": 1, "names": ["a", "b"]})
    assert parsed == Params(2, 1.0, ["a", "b"])
    assert isinstance(parsed.ratio, float)
    assert parse_error("m", Params, {"count": 2, "ratio": True}).message == (
        "m: 'ratio' must be a number (got a boolean)"
    )
    assert parse_error("m", Params, {"count": 2, "names": ["a", 3]}).message == (
        "m: 'names[1]' must be a string (got a number)"
    )
    assert parse_error("m", Params, {"count": 2, "names": "a"}).message == (
        "m: 'names' must be an array (got a string)"
    )


def test_error_codes() -> None:
    assert (
        protocol.ErrorCode.SessionNotFound,
        protocol.ErrorCode.ClaudeUnavailable,
        protocol.ErrorCode.InvalidState,
    ) == (
        -32001,
        -32002,
        -32003,
    )
    error = CovenError(protocol.ErrorCode.InvalidState, "closed", {"sessionId": "s"})
    assert (error.code, error.message, error.data) == (-32003, "closed", {"sessionId": "s"})


# --- to_plain ------------------------------------------------------------------------------------


def test_to_plain_namedtuples_nested() -> None:
    Inner = namedtuple("Inner", ["a", "b"])
    Outer = namedtuple("Outer", ["inner", "items"])
    value = Outer(inner=Inner(1, "x"), items=[Inner(2, None), Inner(3, [Inner(4, 5)])])
    assert to_plain(value) == {
        "inner": {"a": 1, "b": "x"},
        "items": [{"a": 2, "b": None}, {"a": 3, "b": [{"a": 4, "b": 5}]}],
    }


def test_to_plain_on_what_pygls_decodes() -> None:
    original = {"sessionId": "s", "obj": {"list": [{"k": 1}, 2, "three"], "empty": {}}, "n": None}
    assert to_plain(_dict_to_object(dict(original))) == original


def test_to_plain_lists_tuples_and_scalars() -> None:
    assert to_plain([1, (2, 3), [4, {"a": (5,)}]]) == [1, [2, 3], [4, {"a": [5]}]]
    for scalar in ("s", 1, 1.5, True, None):
        assert to_plain(scalar) == scalar


def test_to_plain_attrs_objects() -> None:
    @attrs.define
    class Thing:
        name: str
        where: Any
        tags: list[Any]

    Pair = namedtuple("Pair", ["left", "right"])
    value = Thing(
        "t",
        lsp.Position(line=3, character=4),
        [Pair(lsp.MessageActionItem(title="Allow"), 1)],
    )
    assert to_plain(value) == {
        "name": "t",
        "where": {"line": 3, "character": 4},
        "tags": [{"left": {"title": "Allow"}, "right": 1}],
    }


def test_to_plain_mappings_are_copied() -> None:
    original = {"a": [1]}
    plain = to_plain(original)
    assert plain == original
    assert plain is not original and plain["a"] is not original["a"]


# --- events --------------------------------------------------------------------------------------

ISO_MS_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


def test_make_event_has_the_envelope() -> None:
    event = event_dict("s-1", 7, now_iso(), events.Text(text="hi"))
    assert list(event)[:4] == ["sessionId", "seq", "kind", "time"]
    assert event["sessionId"] == "s-1"
    assert event["seq"] == 7
    assert event["kind"] == "text"
    assert event["text"] == "hi"


def test_make_event_drops_none_but_keeps_falsy_values() -> None:
    event = event_dict(
        "s",
        1,
        now_iso(),
        events.ToolResult(toolUseId="t", parentToolUseId=None, content="", isError=False),
    )
    assert "parentToolUseId" not in event
    assert event["content"] == "" and event["isError"] is False
    cost = event_dict(
        "s", 2, now_iso(), events.TurnResult(text="", isError=False, subtype="x", costUsd=0.0)
    )
    assert cost["costUsd"] == 0.0


def test_event_time_is_iso8601_utc_with_milliseconds() -> None:
    before = dt.datetime.now(dt.timezone.utc)
    event = event_dict("s", 1, now_iso(), events.StatusChanged(status="idle"))
    after = dt.datetime.now(dt.timezone.utc)
    assert ISO_MS_Z.match(event["time"]), event["time"]
    stamp = dt.datetime.strptime(event["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=dt.timezone.utc
    )
    assert before - dt.timedelta(milliseconds=1) <= stamp <= after
    assert ISO_MS_Z.match(protocol.now_iso())


def test_statuses_and_kinds() -> None:
    assert {"running", "idle", "failed", "closed"} <= set(protocol.STATUSES)
    assert protocol.FINAL_STATUSES <= set(protocol.STATUSES)
