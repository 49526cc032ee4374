"""The contract in one place: the checked-in schema matches the Python types, protocol.md documents
everything the schema has, and the core never imports a front end."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import msgspec
import pytest

from coven_ls.protocol import ErrorCode, docs, events, methods, schema, types

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL_MD = (ROOT / "protocol.md").read_text(encoding="utf-8")


def test_checked_in_schema_is_current() -> None:
    # Fails after a change to coven_ls/protocol until `python -m coven_ls.protocol.schema` runs
    # (and the VS Code client's types are generated again from the new file).
    assert schema.SCHEMA_PATH.read_text(encoding="utf-8") == schema.render(), (
        "coven_ls/protocol/schema.json is stale: run `python -m coven_ls.protocol.schema`"
    )


def test_schema_has_every_method_kind_and_code() -> None:
    defs = json.loads(schema.SCHEMA_PATH.read_text(encoding="utf-8"))["$defs"]
    assert set(defs["Requests"]["properties"]) == set(methods.REQUESTS)
    assert set(defs["ServerRequests"]["properties"]) == set(methods.SERVER_REQUESTS)
    assert defs["EventKind"]["enum"] == list(events.KINDS)
    assert defs["ErrorCode"]["enum"] == [c.value for c in ErrorCode]
    for payload in events.PAYLOADS:
        event = defs[payload.__name__ + "Event"]
        assert event["properties"]["kind"] == {"const": events.kind_of(payload)}
        assert {"sessionId", "seq", "kind", "time"} <= set(event["required"])


@pytest.mark.parametrize("name", sorted(methods.REQUESTS) + sorted(methods.SERVER_REQUESTS))
def test_protocol_md_documents_every_method(name: str) -> None:
    assert f"### `{name}`" in PROTOCOL_MD, f"protocol.md has no section for {name}"


@pytest.mark.parametrize("kind", events.KINDS)
def test_protocol_md_documents_every_event_kind(kind: str) -> None:
    row = rf"^\| (`{kind}`|\[`{kind}`\]\(#[\w-]+\)) \|"
    assert re.search(row, PROTOCOL_MD, re.M), f"no row for event kind {kind!r}"


@pytest.mark.parametrize("code", list(ErrorCode))
def test_protocol_md_documents_every_error_code(code: ErrorCode) -> None:
    assert re.search(rf"^\| `{code.value}` \| {code.name} \|", PROTOCOL_MD, re.M), (
        f"the error table has no row for {code.value} {code.name}"
    )


@pytest.mark.parametrize("status", types.STATUSES)
def test_protocol_md_documents_every_status(status: str) -> None:
    assert re.search(rf"^\| `{status}` \|", PROTOCOL_MD, re.M), f"no row for status {status!r}"


def test_documented_option_defaults_are_the_schemas() -> None:
    """The options table in protocol.md states the same defaults as InitializationOptions."""
    for field in msgspec.structs.fields(types.InitializationOptions):
        if field.default is msgspec.NODEFAULT or field.default is None:
            continue
        cell = r"((?:[^|\\]|\\.)*)"  # a table cell, where `\|` is a literal bar
        row = re.search(rf"^\| `{field.name}` \|{cell}\|{cell}\|", PROTOCOL_MD, re.M)
        assert row is not None, f"no row for initializationOptions.{field.name}"
        shown = json.dumps(field.default).replace(".0", "")
        assert f"`{shown}`" in row.group(2), (field.name, row.group(2), shown)


def test_every_payload_field_is_required_or_absent_when_unset() -> None:
    """Optional event fields are left out rather than sent as null (protocol.md's convention),
    which only works when their default is None: a default of False would be dropped too."""
    for payload in events.PAYLOADS:
        for field in msgspec.structs.fields(payload):
            assert field.required or field.default is None, (payload.__name__, field.name)


# --- import boundaries ---------------------------------------------------------------------------

PACKAGE = ROOT / "coven_ls"
# Who may import whom. The core is used by every front end and uses none; the protocol uses
# nothing of coven-ls at all; the terminal client talks to the server only over LSP; the LSP and
# ACP front ends (and doctor) are adapters over the core, each unaware of the others.
ALLOWED = {
    "protocol": {"protocol"},
    "core": {"protocol", "core"},
    "lsp": {"protocol", "core", "lsp"},
    "acp": {"protocol", "core", "acp"},
    "doctor": {"protocol", "core", "doctor"},
    "term": {"protocol", "term", "testing"},
    "testing": {"testing"},
}
FORBIDDEN_THIRD_PARTY = {
    "core": {"pygls", "lsprotocol", "acp"},
    "protocol": {"pygls", "lsprotocol", "acp"},
    "acp": {"pygls", "lsprotocol"},
}


def _imports(path: Path) -> list[str]:
    """Absolute module names a file imports (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
                names = [f"{module}.{a.name}" for a in node.names] if not node.module else []
                found += names or [module]
            else:
                found.append(node.module or "")
    return found


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_import_boundaries(layer: str) -> None:
    files = sorted((PACKAGE / layer).rglob("*.py"))
    assert files, layer
    wrong = []
    for path in files:
        for module in _imports(path):
            parts = module.split(".")
            if parts[0] == "coven_ls" and len(parts) > 1 and parts[1] in ALLOWED:
                if parts[1] not in ALLOWED[layer]:
                    wrong.append(f"{path.relative_to(ROOT)} imports {module}")
            elif parts[0] in FORBIDDEN_THIRD_PARTY.get(layer, set()):
                wrong.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not wrong, "\n".join(wrong)


def test_every_event_example_in_protocol_md_matches_the_schema() -> None:
    """protocol.md's example events are what the server sends: each one checked, strictly."""
    decoder = json.JSONDecoder()
    examples = []
    for match in re.finditer(r'\{"sessionId": "s-[^"]*", "seq"', PROTOCOL_MD):
        event, _end = decoder.raw_decode(PROTOCOL_MD, match.start())
        examples.append(event)
    assert len(examples) >= 20
    kinds = set()
    for event in examples:
        events.check_event(event)
        kinds.add(event["kind"])
    assert set(events.KINDS) == kinds, f"kinds with no example: {set(events.KINDS) - kinds}"


# --- the generated tables ------------------------------------------------------------------------


@pytest.mark.parametrize("name", docs.DOC_FILES)
def test_generated_tables_are_current(name: str) -> None:
    # Fails after a docstring in coven_ls/protocol changes until `python -m coven_ls.protocol.docs`
    # runs (scripts/test.sh runs its --check too).
    text = (ROOT / name).read_text(encoding="utf-8")
    assert docs.render(text) == text, (
        f"{name}'s generated tables are stale: run `python -m coven_ls.protocol.docs`"
    )


def test_every_field_in_the_schema_is_described() -> None:
    """The descriptions are the docs: a field without one would be an empty cell in protocol.md."""
    defs = schema.build_schema()["$defs"]
    missing = [
        f"{name}.{key}"
        for name, definition in defs.items()
        for key, prop in definition.get("properties", {}).items()
        if key != "kind" and not prop.get("description")
    ]
    assert not missing, "add a docstring under these fields: " + ", ".join(missing)


def test_the_method_table_lists_every_method_and_notification() -> None:
    table = PROTOCOL_MD.split("<!-- generated: methods -->")[1].split("<!-- end generated -->")[0]
    names = [*methods.REQUESTS, *methods.SERVER_REQUESTS, methods.EVENT, methods.DELTA]
    for name in names:
        assert re.search(rf"^\| \[`{re.escape(name)}`\]\(#[\w-]+\) \|", table, re.M), name


def test_a_stale_table_is_rewritten_and_the_prose_kept() -> None:
    text = (
        "# T\n\n<!-- generated: contents -->\nold\n<!-- end generated -->\n\n## A heading\n\n"
        "Prose.\n\n<!-- generated: fields ForkParams -->\n| stale |\n<!-- end generated -->\n\n"
        '```json\n{"example": true}\n```\n'
    )
    out = docs.render(text)
    assert "- [A heading](#a-heading)" in out and "\nold\n" not in out and "| stale |" not in out
    assert "| `tasks` | string[] | yes | task labels: 1 to `maxChildren`" in out
    assert "Prose.\n" in out and '{"example": true}' in out
    assert docs.render(out) == out


def test_an_unknown_block_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown generated block 'tabel'"):
        docs.render("<!-- generated: tabel -->\n<!-- end generated -->\n")


def test_anchors_are_githubs() -> None:
    assert docs.anchor("Notification (server → client): `coven/event`") == (
        "notification-server--client-covenevent"
    )
    assert docs.anchor("Standard LSP, for clients that know nothing of `coven/*`") == (
        "standard-lsp-for-clients-that-know-nothing-of-coven"
    )
    found = docs.headings("## A\n```\n# not a heading\n```\n### A\n")
    assert found == [(2, "A", "a"), (3, "A", "a-1")]


MARKDOWN = [
    "README.md",
    "protocol.md",
    *(str(p.relative_to(ROOT)) for p in sorted((ROOT / "docs").glob("*.md"))),
    "client-vscode/README.md",
    "editors/nvim/README.md",
]


@pytest.mark.parametrize("name", MARKDOWN)
def test_every_link_to_a_file_or_heading_resolves(name: str) -> None:
    """Sections move between pages (ACP and doctor have their own): no link is left behind."""
    path = ROOT / name
    text = path.read_text(encoding="utf-8")
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, command:, …
        file, _, fragment = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists():
            broken.append(target)
        elif fragment and linked.suffix == ".md":
            anchors = {a for _l, _t, a in docs.headings(linked.read_text(encoding="utf-8"))}
            if fragment not in anchors:
                broken.append(target)
    assert not broken, f"{name}: links to nothing: {broken}"
