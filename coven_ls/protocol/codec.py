"""Turning JSON into the wire types and back: checking a request's params against its type (with
errors a person can act on), and encoding events once for every client and the store."""

from __future__ import annotations

import datetime as _dt
import types
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import msgspec

from .errors import invalid_params
from .events import Delta, EventDict
from .methods import DELTA, EVENT

W = TypeVar("W", bound=msgspec.Struct)

_JSON_TYPE_NAMES = {str: "a string", int: "an integer", bool: "a boolean", float: "a number"}


def json_type(value: Any) -> str:
    """How a message names the JSON type of `value`: "a string", "an array", "null"…"""
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
    if origin is Annotated:
        inner, *metas = get_args(annotation)
        value = _check(method, name, value, inner)
        for meta in metas:
            least = getattr(meta, "ge", None)
            if least is not None and value < least:
                raise invalid_params(
                    method, f"'{name}' must be at least {least} (got {value})", name
                )
        return value
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
            except Exception as exc:
                errors.append(exc)
        raise errors[0]
    if origin is Literal:
        allowed = get_args(annotation)
        if value not in allowed:
            shown = ", ".join(repr(a) for a in allowed)
            raise invalid_params(method, f"'{name}' must be one of {shown} (got {value!r})", name)
        return value
    if origin is list:
        (item_type,) = get_args(annotation)
        if not isinstance(value, list):
            raise invalid_params(
                method, f"'{name}' must be an array (got {json_type(value)})", name
            )
        return [_check(method, f"{name}[{i}]", v, item_type) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            raise invalid_params(
                method, f"'{name}' must be an object (got {json_type(value)})", name
            )
        args = get_args(annotation)
        if len(args) == 2 and args[1] is not Any:
            return {k: _check(method, f"{name}.{k}", v, args[1]) for k, v in value.items()}
        return dict(value)
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid_params(
                method, f"'{name}' must be an integer (got {json_type(value)})", name
            )
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise invalid_params(
                method, f"'{name}' must be a number (got {json_type(value)})", name
            )
        return float(value)
    if annotation in (str, bool):
        if not isinstance(value, annotation):
            expected = _JSON_TYPE_NAMES[annotation]
            raise invalid_params(
                method, f"'{name}' must be {expected} (got {json_type(value)})", name
            )
        if isinstance(value, str) and not _is_unicode(value):
            # JSON can spell half a UTF-16 surrogate pair ("\ud800"), but no UTF-8 can: such a
            # string could be neither stored nor sent on, and the session it was for hung.
            raise invalid_params(
                method,
                f"'{name}' must be Unicode text: it holds an unpaired surrogate (a '\\uD800'"
                "-'\\uDFFF' escape without its other half)",
                name,
            )
        return value
    if annotation is Any:
        return value
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        if not isinstance(value, Mapping):
            raise invalid_params(
                method, f"'{name}' must be an object (got {json_type(value)})", name
            )
        hints = get_type_hints(annotation, include_extras=True)
        fields = {}
        for field in msgspec.structs.fields(annotation):
            inner = value.get(field.name)
            if inner is None and not field.required:
                continue
            if field.name not in value:
                raise invalid_params(method, f"missing required field '{name}.{field.name}'", name)
            fields[field.name] = _check(method, f"{name}.{field.name}", inner, hints[field.name])
        return annotation(**fields)
    raise TypeError(f"unsupported annotation {annotation!r}")  # a bug in the schema, not input


def _is_unicode(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse(method: str, cls: type[W], raw: Any) -> W:
    """Validate `raw` (decoded JSON) as the params of `method` and build `cls`. Absent params
    (or null) are an empty object; a null field is an absent one; unknown fields are ignored."""
    raw = to_plain(raw)
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise invalid_params(method, f"params must be an object (got {json_type(raw)})")
    hints = get_type_hints(cls, include_extras=True)
    values: dict[str, Any] = {}
    for field in msgspec.structs.fields(cls):
        if field.name not in raw or (raw[field.name] is None and not field.required):
            if field.required:
                raise invalid_params(method, f"missing required field '{field.name}'", field.name)
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


def to_json(value: msgspec.Struct) -> Any:
    """A wire object as plain JSON values (what a handler returns to pygls)."""
    return msgspec.to_builtins(value)


def now_iso() -> str:
    """Event timestamps: UTC, millisecond precision, ISO 8601 with a Z."""
    t = _dt.datetime.now(_dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


_encode = msgspec.json.Encoder().encode


def event_body(event: EventDict) -> bytes:
    """An event as compact JSON: what the store keeps and what goes into the frame."""
    return _encode(event)


def notification_frame(method: str, params: bytes) -> bytes:
    """A whole notification with its LSP header, around already encoded params: this skips
    pygls' per-message cattrs pass, and what goes to many clients is encoded once."""
    message = b'{"jsonrpc":"2.0","method":"%s","params":%s}' % (method.encode(), params)
    return b"Content-Length: %d\r\n\r\n%s" % (len(message), message)


def event_frame(body: bytes) -> bytes:
    """A `coven/event` notification around an encoded event (the same bytes the store keeps)."""
    return notification_frame(EVENT, body)


def delta_frame(delta: Delta) -> bytes:
    """A `coven/delta` notification."""
    return notification_frame(DELTA, _encode(delta))
