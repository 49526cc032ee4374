"""The protocol as a JSON Schema, built from the wire types: `python -m coven_ls.protocol.schema`
writes schema.json beside this file (checked in; a test fails when it is stale). The VS Code
client's TypeScript types are generated from that file.

Field docstrings in types.py and events.py become the schema's descriptions, so they read the
same in Python, in the schema and in the generated TypeScript.
"""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
import json
import sys
from pathlib import Path
from typing import Any, get_args

import msgspec

from . import cluster, doctor, events, types, wire
from .errors import ErrorCode
from .methods import DELTA, EVENT, REQUESTS, SERVER_REQUESTS

SCHEMA_PATH = Path(__file__).with_name("schema.json")

# Enumerations that are named types of their own in the schema (and in TypeScript).
_ENUMS: dict[str, Any] = {
    "Status": types.Status,
    "FinalStatus": types.FinalStatus,
    "SettledStatus": types.SettledStatus,
    "BusyStatus": types.BusyStatus,
    "ForkMode": types.ForkMode,
    "PermissionMode": types.PermissionMode,
    "Origin": types.Origin,
    "ForkSource": types.ForkSource,
    "ForkState": types.ForkState,
}
_ENUM_DOCS = {
    "Status": "A session's status (protocol.md, Statuses).",
    "FinalStatus": "A session in one of these takes no more messages.",
    "SettledStatus": "A fork child in one of these has stopped working on its task.",
    "BusyStatus": "A session in one of these when the server stopped comes back `interrupted`.",
    "Origin": "Who wrote a turn's message.",
    "ForkState": "A fork's state (protocol.md, Fork states); the fork events and "
    "`SessionInfo.lastFork` carry it.",
}


def member_docs(cls: type) -> dict[str, str]:
    """Docstrings written under class attributes (`name: T` or `NAME = v` then a string)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__ in (
            types.__name__,
            cluster.__name__,
            wire.__name__,
            doctor.__name__,
            events.__name__,
            ErrorCode.__module__,
        ):
            docs.update(_module_docs(klass.__module__).get(klass.__name__, {}))
    return docs


@functools.cache
def _module_docs(module: str) -> dict[str, dict[str, str]]:
    """Each class's member docstrings in a module, its source parsed once (parsing it per class
    made the schema take seconds)."""
    tree = ast.parse(inspect.getsource(sys.modules[module]))
    found: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        docs = found.setdefault(node.name, {})
        for stmt, after in itertools.pairwise(node.body):
            target: ast.expr | None = None
            if isinstance(stmt, ast.AnnAssign):
                target = stmt.target
            elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target = stmt.targets[0]
            if (
                isinstance(target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[target.id] = " ".join(after.value.value.split())
    return found


def _describe(defs: dict[str, Any], classes: list[type[msgspec.Struct]]) -> None:
    for cls in classes:
        schema = defs.get(cls.__name__)
        if schema is None:
            continue
        if cls.__doc__ and "description" in schema:
            schema["description"] = " ".join(inspect.cleandoc(cls.__doc__).split())
        for name, doc in member_docs(cls).items():
            prop = schema.get("properties", {}).get(name)
            if prop is not None and "description" not in prop:
                prop["description"] = doc


def _wire_classes() -> list[type[msgspec.Struct]]:
    return [
        cls
        for module in (types, cluster, doctor, events)
        for cls in vars(module).values()
        if isinstance(cls, type)
        and issubclass(cls, msgspec.Struct)
        and cls.__module__ == module.__name__
    ]


def _own_fields_first(defs: dict[str, Any], classes: list[type[msgspec.Struct]]) -> None:
    """A struct that extends another with fields (a method's params that take the fork's
    choices) lists its own fields first, then the ones it shares: msgspec puts a base's fields
    first, which would read as if the shared ones were the point."""
    for cls in classes:
        schema = defs.get(cls.__name__)
        inherited = {
            name
            for base in cls.__mro__[1:]
            if isinstance(base, type) and issubclass(base, msgspec.Struct)
            for name in base.__struct_fields__
        }
        if schema is None or not inherited or "properties" not in schema:
            continue
        props = schema["properties"]
        order = [k for k in props if k not in inherited] + [k for k in props if k in inherited]
        schema["properties"] = {k: props[k] for k in order}
        if "required" in schema:
            schema["required"] = [k for k in order if k in schema["required"]]


def _event_defs(defs: dict[str, Any]) -> None:
    """Each payload becomes a whole event: the envelope's fields, then the payload's."""
    envelope = defs.pop("Envelope")
    for payload in events.PAYLOADS:
        schema = defs.pop(payload.__name__)
        name = payload.__name__ + "Event"
        props = {k: v for k, v in envelope["properties"].items() if k != "kind"}
        schema["title"] = name
        schema["properties"] = {
            **props,
            "kind": {"const": events.kind_of(payload)},
            **{k: v for k, v in schema["properties"].items() if k != "kind"},
        }
        schema["required"] = [
            *(r for r in envelope["required"] if r != "kind"),
            "kind",
            *(r for r in schema.get("required", []) if r != "kind"),
        ]
        # An optional field of an event is left out when it has no value, never null.
        for key, prop in schema["properties"].items():
            if key not in schema["required"] and prop.get("default", 0) is None:
                del prop["default"]
                options = [o for o in prop.pop("anyOf") if o != {"type": "null"}]
                prop.update(options[0] if len(options) == 1 else {"anyOf": options})
        defs[name] = schema


def _name_enums(node: Any) -> Any:
    """Inline enumerations that are one of the named ones become references to it."""
    if isinstance(node, list):
        return [_name_enums(n) for n in node]
    if not isinstance(node, dict):
        return node
    for name, literal in _ENUMS.items():
        if set(node.get("enum", ())) == set(get_args(literal)) and "title" not in node:
            rest = {k: v for k, v in node.items() if k != "enum"}
            return {**_ref(name), **rest}
    return {k: _name_enums(v) for k, v in node.items()}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/$defs/{name}"}


def _method_table(title: str, doc: str, methods: dict[str, Any]) -> dict[str, Any]:
    return {
        "title": title,
        "description": doc,
        "type": "object",
        "properties": {
            name: {
                "type": "object",
                "description": m.doc,
                "properties": {
                    "params": _ref(m.params.__name__),
                    "result": _ref(m.result.__name__),
                },
                "required": ["params", "result"],
                "additionalProperties": False,
            }
            for name, m in methods.items()
        },
        "required": list(methods),
        "additionalProperties": False,
    }


def build_schema() -> dict[str, Any]:
    structs: list[type[msgspec.Struct]] = [
        types.InitializationOptions,
        types.CovenClientCapabilities,
        types.CovenServerCapabilities,
        types.SessionInfo,
        doctor.DoctorReport,
        events.Envelope,
        events.ChildRef,
        events.TaskOutcome,
        events.Delta,
        events.PartialBlock,
        types.Usage,
        *events.PAYLOADS,
    ]
    for table in (REQUESTS, SERVER_REQUESTS):
        for m in table.values():
            structs.extend((m.params, m.result))
    structs = list(dict.fromkeys(structs))
    _, defs = msgspec.json.schema_components(structs, ref_template="#/$defs/{name}")
    # Every wire class, not only the roots: the types they hold (Worktree, Changes, …) are
    # described too.
    _describe(defs, [*structs, *_wire_classes()])
    _own_fields_first(defs, _wire_classes())
    _event_defs(defs)
    defs["GetEventsResult"]["properties"]["events"]["items"] = _ref("Event")
    kinds = [p.__name__ + "Event" for p in events.PAYLOADS]
    defs["Event"] = {
        "title": "Event",
        "description": f"A `{EVENT}` notification's params: the envelope and one kind's fields.",
        "anyOf": [_ref(k) for k in kinds],
        "discriminator": {
            "propertyName": "kind",
            "mapping": {events.kind_of(p): f"#/$defs/{p.__name__}Event" for p in events.PAYLOADS},
        },
    }
    defs["EventKind"] = {
        "title": "EventKind",
        "description": "Every event kind this version sends.",
        "enum": list(events.KINDS),
    }
    defs = _name_enums(defs)
    for name, literal in _ENUMS.items():
        defs[name] = {"title": name, "enum": list(get_args(literal))}
        if name in _ENUM_DOCS:
            defs[name]["description"] = _ENUM_DOCS[name]
    code_docs = member_docs(ErrorCode)
    defs["ErrorCode"] = {
        "title": "ErrorCode",
        "description": "JSON-RPC error codes: "
        + "; ".join(f"{c.value} {c.name}: {code_docs.get(c.name, '')}" for c in ErrorCode),
        "type": "integer",
        "enum": [c.value for c in ErrorCode],
        "tsEnumNames": [c.name for c in ErrorCode],
    }
    # A method's params and result go through the method table, which points at them; the
    # named definitions are what both sides share.
    defs["Requests"] = _method_table(
        "Requests", "Client → server requests: params and result of each.", REQUESTS
    )
    defs["ServerRequests"] = _method_table(
        "ServerRequests", "Server → client requests: params and result of each.", SERVER_REQUESTS
    )
    defs["Notifications"] = {
        "title": "Notifications",
        "description": "Server → client notifications: params of each.",
        "type": "object",
        "properties": {
            EVENT: {
                **_ref("Event"),
                "description": "Every event of every session, to every connected client",
            },
            DELTA: {
                **_ref("Delta"),
                "description": "A piece of assistant text or thinking as the model streams it",
            },
        },
        "required": [EVENT, DELTA],
        "additionalProperties": False,
    }
    roots = ["Requests", "ServerRequests", "Notifications", "Event", "EventKind", "ErrorCode"]
    roots += [*_ENUMS, "InitializationOptions", "CovenClientCapabilities"]
    roots += ["CovenServerCapabilities", "SessionInfo"]
    roots += ["DoctorReport"]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://github.com/coven-ls/coven-ls/protocol/schema.json",
        "title": "CovenProtocol",
        "description": "The coven-ls wire protocol (protocol.md). Generated from "
        "coven_ls/protocol by `python -m coven_ls.protocol.schema`; do not edit.",
        "type": "object",
        "properties": {name: _ref(name) for name in roots},
        "$defs": dict(sorted(defs.items())),
    }


def render() -> str:
    return json.dumps(build_schema(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    text = render()
    if args == ["--check"]:
        if SCHEMA_PATH.read_text(encoding="utf-8") != text:
            print(
                f"{SCHEMA_PATH} is stale: run python -m coven_ls.protocol.schema", file=sys.stderr
            )
            return 1
        return 0
    SCHEMA_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {SCHEMA_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
