"""protocol.md's reference tables, generated from the schema: `python -m coven_ls.protocol.docs`
rewrites every block between `<!-- generated: KEY -->` and `<!-- end generated -->` in
protocol.md and docs/doctor.md; `--check` only says which are stale (a unit test and
`scripts/test.sh` run it). Everything outside the markers (prose, JSON examples) is hand-written
and left alone.

The tables' words are the schema's descriptions, i.e. the docstrings in types.py, events.py and
methods.py: to change a table, change the docstring, then run this (after
`python -m coven_ls.protocol.schema`).

Keys:
- `contents`: the file's table of contents (its `##` and `###` headings).
- `methods`: every method, both directions and the notifications, with params and result.
- `event-kinds`: one row per event kind: its fields and when it is sent.
- `events`: the envelope, then each event kind under a heading of its own with its field table.
- `types A B …`: each named type under a heading of its own with its field table.
- `fields NAME`: one type's field table (e.g. a method's params), under the heading above it.
"""

from __future__ import annotations

import copy
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import events
from .methods import DELTA, EVENT
from .schema import build_schema, member_docs

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = ("protocol.md", "docs/doctor.md")

BLOCK = re.compile(
    r"(?P<start><!-- generated: (?P<key>[^>]*?) -->\n).*?(?P<end><!-- end generated -->)", re.S
)
_HEADING = re.compile(r"^(#{1,6}) (.+?)\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_ENVELOPE = ("sessionId", "seq", "kind", "time")
# Enumerations this long are named (with a link to where their values are explained) rather than
# spelled out in a table cell.
_MAX_INLINE_ENUM = 6
_ENUM_SECTIONS = {"Status": "Statuses"}

Schema = dict[str, Any]


def anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _walk(text: str) -> list[tuple[str, tuple[int, str, str] | None]]:
    """Each line, with (level, title, anchor) when it is a heading outside code fences (the
    anchors of duplicate titles numbered as GitHub numbers them)."""
    found: list[tuple[str, tuple[int, str, str] | None]] = []
    seen: dict[str, int] = {}
    fenced = False
    for line in text.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
        match = None if fenced else _HEADING.match(line)
        if match is None:
            found.append((line, None))
            continue
        title = match.group(2)
        base = anchor(title)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.append((line, (len(match.group(1)), title, f"{base}-{count}" if count else base)))
    return found


def headings(text: str) -> list[tuple[int, str, str]]:
    """(level, title, anchor) of every heading outside code fences."""
    return [h for _line, h in _walk(text) if h is not None]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _event_name(kind: str) -> str:
    return next(p.__name__ + "Event" for p in events.PAYLOADS if events.kind_of(p) == kind)


class Renderer:
    """Renders one file's blocks; `links` maps a type's name to the anchor of its table."""

    def __init__(self, schema: Schema, links: dict[str, str]) -> None:
        self.defs: dict[str, Schema] = schema["$defs"]
        self.links = links

    # --- types in cells -------------------------------------------------------------------------

    def type_of(self, node: Schema) -> str:
        if "$ref" in node:
            return self._named(_name(node["$ref"]))
        if "anyOf" in node:
            options = [self.type_of(o) for o in node["anyOf"] if o != {"type": "null"}]
            nullable = {"type": "null"} in node["anyOf"]
            return " \\| ".join(options + (["null"] if nullable else []))
        if "enum" in node:
            return " \\| ".join(f'`"{v}"`' for v in node["enum"])
        if "const" in node:
            return f'`"{node["const"]}"`'
        kind = node.get("type")
        if kind == "array":
            inner = self.type_of(node.get("items", {}))
            return f"({inner})[]" if "\\|" in inner else f"{inner}[]"
        if kind in ("integer", "number") and "minimum" in node:
            return f"{kind} ≥ {node['minimum']}"
        return str(kind) if kind else "any"

    def _named(self, name: str) -> str:
        target = self.defs[name]
        if "enum" in target and len(target["enum"]) <= _MAX_INLINE_ENUM:
            return self.type_of({"enum": target["enum"]})
        link = self.links.get(name)
        if name in _ENUM_SECTIONS:
            link = anchor(_ENUM_SECTIONS[name])
        if name.endswith("Event") and name != "Event":
            name = name[: -len("Event")]
        return f"[{name}](#{link})" if link else f"`{name}`"

    # --- tables ---------------------------------------------------------------------------------

    def fields(self, name: str, skip: tuple[str, ...] = ()) -> str:
        schema = self.defs[name]
        props = {k: v for k, v in schema.get("properties", {}).items() if k not in skip}
        if not props:
            return "No fields: `{}`."
        required = set(schema.get("required", ()))
        first = {"InitializationOptions": "option", "CovenClientCapabilities": "capability"}.get(
            name,
            "param"
            if name.endswith("Params")
            else "result"
            if name.endswith("Result")
            else "field",
        )
        defaults = [p.get("default") for k, p in props.items() if k not in required]
        if not required & set(props) and any(d is not None for d in defaults):
            extra: tuple[str, Callable[[str, Schema], str]] | None = ("default", _default)
        elif required >= set(props):
            extra = None
        else:
            extra = ("required", lambda key, _prop: "yes" if key in required else "no")
        head = [first, "type", *([extra[0]] if extra else []), "meaning"]
        rows = [f"| {' | '.join(head)} |", "|" + "---|" * len(head)]
        for key, prop in props.items():
            if key not in required and prop.get("default", 0) is None and "anyOf" in prop:
                # Left out and null mean the same for an optional field: say it once.
                prop = {**prop, "anyOf": [o for o in prop["anyOf"] if o != {"type": "null"}]}
            cells = [f"`{key}`", self.type_of(prop)]
            if extra:
                cells.append(extra[1](key, prop))
            cells.append(_cell(prop.get("description", "")))
            rows.append(f"| {' | '.join(cells)} |")
        return "\n".join(rows)

    def _shape(self, name: str) -> str:
        """A method's params or result in one cell: `{a, b?}`."""
        schema = self.defs[name]
        required = set(schema.get("required", ()))
        keys = [k if k in required else f"{k}?" for k in schema.get("properties", {})]
        return "`{" + ", ".join(keys) + "}`"

    def methods(self) -> str:
        rows = ["| method | direction | params | result | what it does |", "|---|---|---|---|---|"]
        for title, direction in (
            ("Requests", "client → server"),
            ("ServerRequests", "server → client"),
        ):
            for method, entry in self.defs[title]["properties"].items():
                params = _name(entry["properties"]["params"]["$ref"])
                result = _name(entry["properties"]["result"]["$ref"])
                rows.append(
                    f"| [`{method}`](#{anchor(f'`{method}`')}) | {direction} "
                    f"| {self._shape(params)} | {self._shape(result)} "
                    f"| {_cell(entry.get('description', ''))} |"
                )
        for method, node in self.defs["Notifications"]["properties"].items():
            name = _name(node["$ref"])
            shape = self._named("Event") if name == "Event" else self._shape(name)
            rows.append(
                f"| [`{method}`](#{self.links.get(method, '')}) | server → client (notification) "
                f"| {shape} | — | {_cell(node.get('description', ''))} |"
            )
        return "\n".join(rows)

    def event_kinds(self) -> str:
        rows = ["| kind | fields | when |", "|---|---|---|"]
        for kind in self.defs["EventKind"]["enum"]:
            schema = self.defs[_event_name(kind)]
            required = set(schema["required"])
            keys = [
                f"`{k}`" if k in required else f"`{k}`?"
                for k in schema["properties"]
                if k not in _ENVELOPE
            ]
            link = self.links.get(_event_name(kind))
            name = f"[`{kind}`](#{link})" if link else f"`{kind}`"
            rows.append(f"| {name} | {', '.join(keys)} | {_cell(schema.get('description', ''))} |")
        return "\n".join(rows)

    def events(self) -> str:
        first = self.defs[_event_name(events.KINDS[0])]
        envelope = {"properties": {k: first["properties"][k] for k in _ENVELOPE}}
        # The events' own `kind` is each one's constant; the envelope says what it is.
        envelope["properties"]["kind"] = {
            "type": "string",
            "description": member_docs(events.Envelope)["kind"],
        }
        self.defs["_Envelope"] = {**envelope, "required": list(_ENVELOPE)}
        parts = [
            "Every event has these fields, then those of its kind:",
            "",
            self.fields("_Envelope"),
        ]
        for kind in events.KINDS:
            name = _event_name(kind)
            parts += ["", f"#### `{kind}`", "", _cell(self.defs[name].get("description", ""))]
            parts += ["", self.fields(name, skip=_ENVELOPE)]
        return "\n".join(parts)

    def types(self, names: list[str]) -> str:
        parts: list[str] = []
        for name in names:
            description = _cell(self.defs[name].get("description", ""))
            parts += [f"#### `{name}`", "", *([description, ""] if description else [])]
            parts += [self.fields(name), ""]
        return "\n".join(parts).rstrip("\n")


def _default(_key: str, prop: Schema) -> str:
    value = prop.get("default")
    if value is None:
        return "—"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{str(value).lower() if isinstance(value, bool) else value}`"


def _contents(text: str) -> str:
    lines = []
    for level, title, target in headings(text):
        if level in (2, 3):
            lines.append(f"{'  ' * (level - 2)}- [{title}](#{target})")
    return "\n".join(lines)


def _links(text: str) -> dict[str, str]:
    """Where each type's table is in `text` (already generated once): the heading a `types` or
    `events` block gives it, or the heading above a `fields` block."""
    links: dict[str, str] = {}
    current = ""
    key, args = "", []
    kinds = {f"`{kind}`": _event_name(kind) for kind in events.KINDS}
    for line, heading in _walk(text):
        if heading is not None:
            level, title, current = heading
            for method in (EVENT, DELTA):
                if method in title and level <= 3:
                    links.setdefault(method, current)
            if key == "events" and title in kinds:
                links.setdefault(kinds[title], current)
            elif key == "types" and title.strip("`") in args:
                links.setdefault(title.strip("`"), current)
        start = re.match(r"<!-- generated: (.*?) -->", line)
        if start:
            key, *args = start.group(1).split()
            if key == "fields":
                links.setdefault(args[0], current)
            elif key == "event-kinds":
                links.setdefault("Event", current)
        elif line.startswith("<!-- end generated"):
            key, args = "", []
    return links


def render(text: str, schema: Schema | None = None) -> str:
    """`text` with every generated block rewritten."""
    schema = schema if schema is not None else build_schema()
    # Twice: the links point at headings that the first pass may have written.
    return _render(_render(text, schema, {}), schema, None)


def _render(text: str, schema: Schema, links: dict[str, str] | None) -> str:
    renderer = Renderer(copy.deepcopy(schema), _links(text) if links is None else links)

    def block(match: re.Match[str]) -> str:
        key, *args = match.group("key").split()
        if key == "contents":
            body = "<contents>"
        elif key == "methods":
            body = renderer.methods()
        elif key == "event-kinds":
            body = renderer.event_kinds()
        elif key == "events":
            body = renderer.events()
        elif key == "types":
            body = renderer.types(args)
        elif key == "fields" and len(args) == 1:
            body = renderer.fields(args[0])
        else:
            raise ValueError(f"unknown generated block {match.group('key')!r}")
        return f"{match.group('start')}\n{body}\n\n{match.group('end')}"

    text = BLOCK.sub(block, text)
    # The contents last: they list the headings the other blocks generate.
    return BLOCK.sub(
        lambda m: (
            f"{m.group('start')}\n{_contents(text)}\n\n{m.group('end')}"
            if m.group("key") == "contents"
            else m.group(0)
        ),
        text,
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--check"]):
        print("usage: python -m coven_ls.protocol.docs [--check]", file=sys.stderr)
        return 2
    schema = build_schema()
    stale = []
    for name in DOC_FILES:
        path = ROOT / name
        if not path.is_file():
            print(f"{path} not found: run this from a checkout of coven-ls", file=sys.stderr)
            return 1
        text = path.read_text(encoding="utf-8")
        new = render(text, schema)
        if new == text:
            continue
        if args:
            stale.append(name)
        else:
            path.write_text(new, encoding="utf-8")
            print(f"wrote {path}")
    if stale:
        print(
            f"{', '.join(stale)}: generated tables are stale: run python -m coven_ls.protocol.docs",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
