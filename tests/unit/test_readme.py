"""README.md's layout table against the tree, and its two set-up commands."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _layout() -> dict[str, str]:
    """The layout table: each row's path cell (backticked paths, comma-separated) → its text."""
    section = README.split("## Layout", 1)[1]
    rows = {}
    for line in section.splitlines():
        match = re.match(r"^\| (`[^|]+`) \| (.*) \|$", line)
        if match:
            for path in re.findall(r"`([^`]+)`", match.group(1)):
                rows[path] = match.group(2)
    return rows


def test_the_layout_names_every_top_level_module_and_folder_of_the_package() -> None:
    layout = _layout()
    package = ROOT / "coven_ls"
    entries = [
        f"coven_ls/{p.name}/" if p.is_dir() else f"coven_ls/{p.name}"
        for p in package.iterdir()
        if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py")
    ]
    missing = [e for e in entries if e not in layout and e != "coven_ls/__init__.py"]
    assert not missing, f"README.md's layout table has no row for {missing}"


def test_the_layout_names_every_top_level_folder_of_the_repository() -> None:
    layout = _layout()
    named = {p.split("/")[0] for p in layout}
    folders = {
        p.name
        for p in ROOT.iterdir()
        if p.is_dir()
        and not p.name.startswith(".")
        and p.name not in ("node_modules",)
        # build output and caches are not part of the layout
        and not p.name.endswith(".egg-info")
        and p.name not in ("build", "dist", "__pycache__")
    }
    assert folders <= named, f"no row for {sorted(folders - named)}"


def test_every_path_and_file_the_layout_names_exists() -> None:
    """A row's own paths, and each file its text names (`server.py`, `prompts/fork.md`), are
    in the tree: a renamed or removed module fails here until the table says so."""
    wrong = []
    for path, text in _layout().items():
        if "*" in path:
            matches = list(ROOT.glob(path))
            if not matches:
                wrong.append(path)
            continue
        if not (ROOT / path).exists():
            wrong.append(path)
            continue
        folder = ROOT / path if (ROOT / path).is_dir() else ROOT / path.rsplit("/", 1)[0]
        for name in re.findall(r"`([\w./-]+\.(?:py|md|ts|lua|sh))`", text):
            if not (folder / name).exists() and not (ROOT / name).exists():
                wrong.append(f"{name} (in the row of {path})")
    assert not wrong, f"README.md's layout table names what is not there: {wrong}"


def test_the_readme_has_two_set_up_commands() -> None:
    """What a newcomer pastes: install and the demo, then the tests (the quick lane is prose)."""
    before_editors = README.split("## Use it from an editor", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", before_editors, re.S)
    assert [b.strip().count("\n") for b in blocks] == [0, 0], blocks
    assert "coven-ls demo" in blocks[0] and blocks[1].strip() == "bash scripts/test.sh"
