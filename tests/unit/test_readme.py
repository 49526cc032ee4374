"""README.md's layout table against the tree, its two set-up commands and its pictures."""

from __future__ import annotations

import re
import struct
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


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# A picture a page shows at once, small enough to commit (scripts/pictures.sh makes them).
MAX_PICTURE_BYTES = 400_000
SIDE_PIXELS = range(200, 2001)


def _pictures() -> list[str]:
    """The images README.md shows: Markdown's `![alt](path)` and HTML's `<img src="path">`."""
    markdown = re.findall(r"!\[[^\]]*\]\(([^)\s]+)", README)
    html = re.findall(r"<img\b[^>]*\bsrc=\"([^\"]+)\"", README)
    return markdown + html


def test_every_picture_the_readme_shows_is_a_committed_png_of_sane_size() -> None:
    pictures = _pictures()
    # The VS Code tree and the chat session (issue #32): at least those two.
    assert len(pictures) >= 2, f"README.md shows {pictures}"
    wrong = []
    for name in pictures:
        path = ROOT / name
        if name.startswith(("http:", "https:")) or not path.is_file():
            wrong.append(f"{name}: not a file in the repository")
            continue
        data = path.read_bytes()
        # The IHDR chunk comes first: its width and height follow its length and type.
        if data[:8] != PNG_SIGNATURE or data[12:16] != b"IHDR":
            wrong.append(f"{name}: not a PNG")
            continue
        width, height = struct.unpack(">II", data[16:24])
        if width not in SIDE_PIXELS or height not in SIDE_PIXELS:
            wrong.append(f"{name}: {width}×{height} pixels")
        if len(data) > MAX_PICTURE_BYTES:
            wrong.append(f"{name}: {len(data)} bytes")
    assert not wrong, f"README.md's pictures (made by scripts/pictures.sh): {wrong}"


def test_every_picture_in_docs_images_is_shown() -> None:
    """No picture is left behind in docs/images/ once README.md stops showing it."""
    shown = {(ROOT / name).resolve() for name in _pictures()}
    kept = set((ROOT / "docs" / "images").iterdir())
    assert kept <= shown, f"docs/images/ holds what README.md does not show: {sorted(kept - shown)}"
