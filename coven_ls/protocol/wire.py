"""The wire schema: every method, event kind, status, error code and parameter shape a client sees.

protocol.md documents this module; a change here without a change there is a bug. Nothing in here
imports pygls, so the session logic and the tests can use it without a language server.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import types
from collections.abc import Mapping
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

# --- methods -------------------------------------------------------------------------------------

START_SESSION = "coven/startSession"
SEND_MESSAGE = "coven/sendMessage"
CANCEL = "coven/cancel"
CLOSE_SESSION = "coven/closeSession"
LIST_SESSIONS = "coven/listSessions"
GET_EVENTS = "coven/getEvents"
FORK = "coven/fork"
DECIDE_FORK = "coven/decideFork"
RESUME_FORK = "coven/resumeFork"
ABANDON_FORK = "coven/abandonFork"
DELETE_SESSION = "coven/deleteSession"

EVENT = "coven/event"  # notification, server -> client
REQUEST_PERMISSION = "coven/requestPermission"  # request, server -> client

# --- statuses and event kinds --------------------------------------------------------------------

Status = Literal[
    "queued",
    "starting",
    "running",
    "idle",
    "awaitingApproval",
    "forking",
    "failed",
    "cancelled",
    "closed",
    "interrupted",
]
STATUSES: tuple[str, ...] = get_args(Status)
# A session in one of these takes no more messages. (`cancelled` is a fork child the user
# stopped; a cancelled top-level turn leaves its session `idle`.)
FINAL_STATUSES = frozenset({"cancelled", "closed"})

ForkMode = Literal["auto", "approve", "off"]
PermissionMode = Literal["default", "acceptEdits", "plan", "bypassPermissions", "dontAsk", "auto"]


class Kind:
    """Event kinds, as they appear in the `kind` field of `coven/event`."""

    STATUS = "status"
    PROMPT = "prompt"
    AGENT = "agent"
    TEXT = "text"
    THINKING = "thinking"
    TOOL_USE = "toolUse"
    TOOL_RESULT = "toolResult"
    PERMISSION_REQUEST = "permissionRequest"
    PERMISSION_DECISION = "permissionDecision"
    TURN_RESULT = "turnResult"
    ERROR = "error"
    FORK_PROPOSED = "forkProposed"
    FORK_REJECTED = "forkRejected"
    FORK_STARTED = "forkStarted"
    FORK_FINISHED = "forkFinished"
    FORK_ERROR = "forkError"
    FORK_INTERRUPTED = "forkInterrupted"
    FORK_RESUMED = "forkResumed"
    DELETED = "deleted"


# --- errors --------------------------------------------------------------------------------------

INVALID_PARAMS = -32602
SESSION_NOT_FOUND = -32001
CLAUDE_UNAVAILABLE = -32002
INVALID_STATE = -32003
FORK_NOT_FOUND = -32004
STORE_UNAVAILABLE = -32005


class CovenError(Exception):
    """An error a client sees as a JSON-RPC error response: a code from above and a sentence a
    person can act on."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def invalid_params(method: str, message: str) -> CovenError:
    return CovenError(INVALID_PARAMS, f"{method}: {message}")


# --- request parameters --------------------------------------------------------------------------
# Each request's params are a dataclass; `parse` checks a raw JSON object against it. Unknown
# fields are ignored so that newer clients can talk to older servers.


@dataclasses.dataclass(frozen=True)
class StartSessionParams:
    prompt: str
    cwd: str | None = None
    model: str | None = None
    permissionMode: PermissionMode | None = None
    forkMode: ForkMode | None = None
    title: str | None = None


@dataclasses.dataclass(frozen=True)
class SendMessageParams:
    sessionId: str
    text: str


@dataclasses.dataclass(frozen=True)
class SessionIdParams:
    sessionId: str


@dataclasses.dataclass(frozen=True)
class ForkParams:
    sessionId: str
    tasks: list[str]
    atMessageId: str | None = None


@dataclasses.dataclass(frozen=True)
class DecideForkParams:
    forkId: str
    approve: bool
    tasks: list[str] | None = None
    reason: str | None = None


@dataclasses.dataclass(frozen=True)
class ForkIdParams:
    forkId: str


@dataclasses.dataclass(frozen=True)
class DeleteSessionParams:
    sessionId: str
    purge: bool = False


@dataclasses.dataclass(frozen=True)
class ListSessionsParams:
    pass


@dataclasses.dataclass(frozen=True)
class GetEventsParams:
    sessionId: str
    afterSeq: int = 0


_JSON_TYPE_NAMES = {str: "a string", int: "an integer", bool: "a boolean", float: "a number"}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _check(method: str, name: str, value: Any, annotation: Any) -> Any:
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        options = get_args(annotation)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _check(method, name, value, option)
            except CovenError as exc:
                errors.append(exc)
        raise errors[0]
    if origin is Literal:
        allowed = get_args(annotation)
        if value not in allowed:
            shown = ", ".join(repr(a) for a in allowed)
            raise invalid_params(method, f"'{name}' must be one of {shown} (got {value!r})")
        return value
    if origin is list:
        (item_type,) = get_args(annotation)
        if not isinstance(value, list):
            raise invalid_params(method, f"'{name}' must be an array (got {_json_type(value)})")
        return [_check(method, f"{name}[{i}]", v, item_type) for i, v in enumerate(value)]
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid_params(method, f"'{name}' must be an integer (got {_json_type(value)})")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise invalid_params(method, f"'{name}' must be a number (got {_json_type(value)})")
        return float(value)
    if annotation in (str, bool):
        if not isinstance(value, annotation):
            expected = _JSON_TYPE_NAMES[annotation]
            raise invalid_params(method, f"'{name}' must be {expected} (got {_json_type(value)})")
        return value
    if annotation is Any:
        return value
    raise TypeError(f"unsupported annotation {annotation!r}")  # a bug in this module, not input


def parse(method: str, cls: type, raw: Any) -> Any:
    """Validate `raw` (a decoded JSON object) as the params of `method` and build `cls`."""
    raw = to_plain(raw)
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise invalid_params(method, f"params must be an object (got {_json_type(raw)})")
    hints = get_type_hints(cls)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        required = (
            field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        )
        if field.name not in raw or (raw[field.name] is None and not required):
            if required:
                raise invalid_params(method, f"missing required field '{field.name}'")
            continue
        values[field.name] = _check(method, field.name, raw[field.name], hints[field.name])
    return cls(**values)


def to_plain(value: Any) -> Any:
    """Turn what pygls hands a handler back into plain JSON values.

    pygls decodes the params of methods it does not know into namedtuples (and attrs objects for
    some nested shapes); the domain code wants dicts and lists.
    """
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return {k: to_plain(v) for k, v in value._asdict().items()}
    if isinstance(value, Mapping):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if hasattr(value, "__attrs_attrs__"):
        return {a.name: to_plain(getattr(value, a.name)) for a in value.__attrs_attrs__}
    return value


# --- events --------------------------------------------------------------------------------------


def now_iso() -> str:
    """Event timestamps: UTC, millisecond precision, ISO 8601 with a Z."""
    t = _dt.datetime.now(_dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def make_event(session_id: str, seq: int, kind: str, **fields: Any) -> dict[str, Any]:
    """A `coven/event` payload. Fields whose value is None are left out, so optional fields such
    as `parentToolUseId` only appear when they mean something."""
    event: dict[str, Any] = {"sessionId": session_id, "seq": seq, "kind": kind, "time": now_iso()}
    event.update({k: v for k, v in fields.items() if v is not None})
    return event


def event_body(event: dict[str, Any]) -> bytes:
    """An event as compact JSON: what the store keeps and what goes into the frame."""
    return json.dumps(event, separators=(",", ":")).encode()


def event_frame(body: bytes) -> bytes:
    """A whole `coven/event` notification with its LSP header, around an encoded event. Events
    are plain JSON already, so this skips pygls' per-message cattrs pass, and each event is
    encoded once however many clients and stores it goes to."""
    message = b'{"jsonrpc":"2.0","method":"%s","params":%s}' % (EVENT.encode(), body)
    return b"Content-Length: %d\r\n\r\n%s" % (len(message), message)
