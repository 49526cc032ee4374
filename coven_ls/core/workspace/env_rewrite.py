"""The `.worktreeinclude` copies made the child's own: where a copied environment names the
parent's checkout, the copy is rewritten to name the child's worktree instead.

A Python virtual environment is full of absolute paths: its editable installs are paths into the
checkout (`__editable__.*.pth`, setuptools' `__editable___*_finder.py` MAPPING, hatchling's and
pdm's plain `.pth` paths, `*.egg-link`, the dist's `direct_url.json`), its console scripts start
with `#!<venv>/bin/python`, `pyvenv.cfg` and the `activate` scripts name the venv. A copy left
as it was runs the parent's code: a child editing its worktree and running its tests would test
the parent's files. Node's `node_modules` may hold absolute links into the checkout (workspace
packages); relative ones already resolve in the copy.

Only paths into the parent's checkout are touched (the base interpreter, links to global
folders stay), and only where the same path exists in the child's worktree; what cannot be
rewritten is said as a notice. Nothing is reinstalled: a venv of 50 packages takes milliseconds.

The copies may be clones sharing blocks with the parent's files (FICLONE) or anything else: a
file is never written in place but replaced (a new file renamed over it), links are replaced,
and nothing whose real path is outside the child's worktree is written.

Blocking (file reads and writes): call it from a worker thread.
"""

from __future__ import annotations

import os
import re
import stat
import urllib.parse
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Bigger files in a venv's bin/ are compiled programs, not scripts naming an interpreter.
_SCRIPT_LIMIT = 1 << 20

# What cannot be part of a file name's continuation after the parent's path: where a path in a
# script, a `.pth` line, a Python literal or JSON ends.
_PATH_END = b"\0\t\n\r \"'`:;,)]}$<>|&\\"
# A byte that continues a name: the parent's path followed by one is another folder
# (`/repo` in `/repo-old`).
_NAME_BYTE = re.compile(rb"[A-Za-z0-9._+@~-]|[\x80-\xff]")


@dataclass
class RewriteReport:
    """What rewriting the copies did."""

    rewritten: list[str] = field(default_factory=list)
    """a sentence per copied environment: which of its files now name the child's worktree"""
    files: int = 0
    """files and links rewritten"""
    notices: list[str] = field(default_factory=list)
    """what still names the parent's checkout, and why"""


class _Paths:
    """The parent's checkout as files name it, and the child's worktree to name instead."""

    def __init__(self, parent: Path, child: Path) -> None:
        spellings = {str(parent.absolute()), os.path.realpath(parent)}
        # direct_url.json holds file:// URLs, whose paths are %-quoted.
        spellings |= {urllib.parse.quote(s) for s in set(spellings)}
        self.parent = [os.fsencode(s.rstrip("/")) for s in sorted(spellings, key=len, reverse=True)]
        self.child = os.fsencode(str(child.absolute()))
        self.child_real = os.path.realpath(child)
        self.parent_real = os.path.realpath(parent)
        self._within: dict[str, bool] = {}
        self.pattern = re.compile(b"|".join(re.escape(p) for p in self.parent))

    def rewrite(self, data: bytes) -> tuple[bytes, list[bytes]]:
        """`data` with each path into the parent's checkout that the child's worktree also has
        naming the child's, and the parent's paths the child does not have (left as they are)."""
        missing: list[bytes] = []
        out: list[bytes] = []
        last = 0
        for found in self.pattern.finditer(data):
            start, end = found.span()
            before = data[start - 1 : start] if start else b""
            after = data[end : end + 1]
            if (before and _NAME_BYTE.fullmatch(before)) or (after and _NAME_BYTE.fullmatch(after)):
                continue  # another folder whose name starts or ends like the parent's
            rest = end
            while rest < len(data) and data[rest] not in _PATH_END:
                rest += 1
            if not self.exists_in_child(data[end:rest]):
                missing.append(data[start:rest])
                continue
            out += [data[last:start], self.child]
            last = end
        if not out:
            return data, missing
        out.append(data[last:])
        return b"".join(out), missing

    def exists_in_child(self, tail: bytes) -> bool:
        relative = urllib.parse.unquote_to_bytes(tail).lstrip(b"/")
        return os.path.lexists(os.path.join(self.child, relative))

    def within_child(self, path: Path) -> bool:
        """Whether the folder `path`'s real path is in the child's worktree (asked of the folder
        of each file: the same few folders, each resolved once)."""
        key = str(path)
        inside = self._within.get(key)
        if inside is None:
            real = os.path.realpath(path)
            inside = real == self.child_real or real.startswith(self.child_real.rstrip("/") + "/")
            self._within[key] = inside
        return inside


def rewrite_copies(
    target: Path, entries: Sequence[str], parent: Path, links: Sequence[str] = ()
) -> RewriteReport:
    """Rewrite the copies of `entries` (`worktree_env.copy_into`'s) in the worktree `target` that
    name the parent's checkout `parent`: the copied `links` (relative to `target`) whose absolute
    targets point into it, then the Python virtual environments among the entries."""
    paths = _Paths(parent, target)
    report = RewriteReport()
    kinds: dict[str, Counter[str]] = {}
    left: dict[str, list[str]] = {}

    def done(where: str, kind: str) -> None:
        kinds.setdefault(where, Counter())[kind] += 1
        report.files += 1

    for link in links:
        where = _entry_of(link, entries)
        missing = _relink(target / link, paths)
        if missing is None:
            done(where, "link")
        elif missing:
            left.setdefault(where, []).append(f"{link} → {missing}")
    for entry in entries:
        for venv in _venvs(target / entry.rstrip("/")):
            where = venv.relative_to(target).as_posix() + "/"
            for path, kind in _venv_files(venv, paths):
                changed, missing_paths = _rewrite_file(path, paths)
                if changed:
                    done(where, kind)
                shown = path.relative_to(target).as_posix()
                left.setdefault(where, []).extend(
                    f"{shown} ({os.fsdecode(m)})" for m in missing_paths
                )
    for where, counted in kinds.items():
        what = ", ".join(_counted(kind, counted[kind]) for kind in _KIND_NAMES if kind in counted)
        report.rewritten.append(f"{where}: {what} rewritten to name the child's worktree")
    for where, names in left.items():
        if not names:
            continue
        shown = "; ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        report.notices.append(
            f"{where} still points into {parent} where it could not be made the child's (its "
            f"worktree has no such file, or the path leads there through a link): {shown}. "
            "Those paths use the parent's files."
        )
    return report


# In the order a sentence names them.
_KIND_NAMES = {
    "config": ("pyvenv.cfg", "pyvenv.cfg"),
    "activate": ("activate script", "activate scripts"),
    "script": ("script", "scripts"),
    "editable": ("editable-install file", "editable-install files"),
    "record": ("direct_url.json", "direct_url.json files"),
    "link": ("link", "links"),
}


def _counted(kind: str, n: int) -> str:
    one, many = _KIND_NAMES[kind]
    if kind == "config":
        return one
    return f"{n} {one if n == 1 else many}"


def _entry_of(path: str, entries: Sequence[str]) -> str:
    for entry in entries:
        if path == entry.rstrip("/") or path.startswith(entry.rstrip("/") + "/"):
            return entry
    return path


# --- links --------------------------------------------------------------------------------------


def _relink(link: Path, paths: _Paths) -> str | None:
    """None when the link was made to point into the child's worktree; "" when there is nothing
    to do (not a link into the parent's checkout, or gone); else the target the child lacks."""
    try:
        old = os.fsencode(os.readlink(link))
    except OSError:
        return ""  # not a link (or gone) since the copy
    if not os.path.isabs(old) or not paths.within_child(link.parent):
        return ""
    new, missing = paths.rewrite(old)
    if missing:
        return os.fsdecode(missing[0])
    if new == old:
        # Outside the parent's checkout; or into it by another way (a link on the way), which
        # cannot be told apart from a path outside it by its spelling.
        real = os.fsdecode(os.path.realpath(old))
        inside = real == paths.parent_real or real.startswith(paths.parent_real + "/")
        return os.fsdecode(old) if inside else ""
    scratch = link.with_name(f".{link.name}.coven-relink")
    if os.path.lexists(scratch):
        os.unlink(scratch)
    os.symlink(new, scratch)
    os.replace(scratch, link)  # the link itself, never what it points at
    return None


# --- Python virtual environments ----------------------------------------------------------------


def _venvs(root: Path) -> list[Path]:
    """The venv `root` is, or those directly in it (`envs/`)."""
    if not root.is_dir() or root.is_symlink():
        return []
    if (root / "pyvenv.cfg").is_file():
        return [root]
    try:
        return sorted(
            p for p in root.iterdir() if (p / "pyvenv.cfg").is_file() and not p.is_symlink()
        )
    except OSError:
        return []


def _venv_files(venv: Path, paths: _Paths) -> list[tuple[Path, str]]:
    """The files of a venv that may name its checkout, each with its kind."""
    found: list[tuple[Path, str]] = [(venv / "pyvenv.cfg", "config")]
    scripts = venv / "bin"
    if scripts.is_dir() and not scripts.is_symlink():
        for path in sorted(scripts.iterdir()):
            if path.name.startswith("activate"):
                found.append((path, "activate"))
            elif _is_script(path):
                found.append((path, "script"))
    seen: set[str] = set()
    for site in sorted(venv.glob("lib*/python*/site-packages")):
        real = os.path.realpath(site)
        if real in seen or not paths.within_child(site):
            continue  # lib64 -> lib; or a link out of the copy, never written through
        seen.add(real)
        for path in sorted(site.iterdir()):
            name = path.name
            if name.endswith((".pth", ".egg-link")) or (
                name.endswith(".py") and "editable" in name
            ):
                found.append((path, "editable"))
            elif name.endswith(".dist-info"):
                found.append((path / "direct_url.json", "record"))
    return found


def _is_script(path: Path) -> bool:
    try:
        info = path.lstat()
        if not stat.S_ISREG(info.st_mode) or info.st_size > _SCRIPT_LIMIT:
            return False
        with open(path, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return False


def _rewrite_file(path: Path, paths: _Paths) -> tuple[bool, list[bytes]]:
    """Whether the file was rewritten (its paths into the parent's checkout that the child's
    worktree has now name the child's), and the parent's paths it names that the child lacks
    (left as they are). Only a plain file of the copy is looked at."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return False, []
    if not stat.S_ISREG(info.st_mode) or not paths.within_child(path.parent):
        return False, []
    data = path.read_bytes()
    new, missing = paths.rewrite(data)
    if new == data:
        return False, missing
    _replace(path, new, stat.S_IMODE(info.st_mode))
    if path.suffix == ".py":
        # The finder's compiled copy may have the same size and a time in the same second.
        for compiled in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):
            compiled.unlink(missing_ok=True)
    return True, missing


def _replace(path: Path, data: bytes, mode: int) -> None:
    """A new file renamed over `path`: a copy sharing blocks or an inode with the parent's file
    is let go of, never written."""
    scratch = path.with_name(f".{path.name}.coven-rewrite")
    if os.path.lexists(scratch):
        os.unlink(scratch)
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        os.fchmod(f.fileno(), mode)
    os.replace(scratch, path)
