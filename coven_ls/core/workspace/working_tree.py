"""The user's working tree as the merge (`merge`) reads and writes it: each path's state on disk,
files hashed and converted as git would (eol conversion, filters such as Git LFS, ident,
encodings), `git merge-file`, and the writes themselves: through a temporary file and a rename,
new files' permissions as a checkout gives them, and what was written put back when a write
fails. Blocking: call from a worker thread."""

from __future__ import annotations

import contextlib
import itertools
import os
import stat
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .git import GitError, git, is_within, output
from .repository import read_blobs

# The attributes that make a checked-out file differ from its blob (or `git add` change it).
_CONVERSION_ATTRS = ("text", "eol", "crlf", "filter", "ident", "working-tree-encoding")

# Temporary names for files being written, unique in this process; short, so that a long file
# name does not make them too long.
_TEMP_NUMBERS = itertools.count()

StateKind = Literal["missing", "file", "link", "dir", "other", "submodule"]


@dataclass(frozen=True)
class State:
    """One path's state: in a commit, or on disk."""

    kind: StateKind
    executable: bool = False
    oid: str | None = None  # a file's blob, in git's normalised form
    target: bytes | None = None  # a link's target


MISSING = State("missing")


@dataclass
class FinalFile:
    """What the merge writes at one path."""

    kind: Literal["file", "link"]
    data: bytes  # for a file, as it goes on disk (filters applied); for a link, its target
    executable: bool = False


def stat_of(path: Path) -> tuple[int, int, int, int] | None:
    """What tells a changed file from the one that was read: its type and permissions, size,
    modification time and inode (an editor may save by renaming a new file over it). For a
    folder only that it is one: files appearing in it (the user's build) do not matter."""
    try:
        st = path.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISDIR(st.st_mode):
        return (stat.S_IFDIR, 0, 0, 0)
    return (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino)


def disk_states(
    top: Path, paths: Sequence[str], seen: dict[str, tuple[int, int, int, int] | None]
) -> dict[str, State]:
    """The working tree's state of each path, regular files hashed as `git add` would hash
    them (filters applied) in one `git hash-object`. Records what it saw in `seen`."""
    states: dict[str, State] = {}
    files: list[str] = []
    for p in paths:
        full = top / p
        seen[p] = stat_of(full)
        mode = seen[p]
        if mode is None:
            states[p] = MISSING
        elif stat.S_ISREG(mode[0]):
            states[p] = State("file", executable=bool(mode[0] & stat.S_IXUSR))
            files.append(p)
        elif stat.S_ISLNK(mode[0]):
            states[p] = State("link", target=os.readlink(os.fsencode(full)))
        elif stat.S_ISDIR(mode[0]):
            states[p] = State("dir")
        else:
            states[p] = State("other")
    for p, oid in zip(files, hash_files(top, files), strict=True):
        states[p] = State("file", executable=states[p].executable, oid=oid)
    return states


def hash_files(top: Path, paths: Sequence[str], write: bool = False) -> list[str]:
    flags = ["-w"] if write else []
    plain = [p for p in paths if "\n" not in p]
    ids: dict[str, str] = {}
    if plain:
        out = git(
            top,
            "hash-object",
            *flags,
            "--stdin-paths",
            input="".join(f"{p}\n" for p in plain).encode(errors="surrogateescape"),
            what="Reading the working tree",
        )
        ids.update(zip(plain, output(out).splitlines(), strict=True))
    for p in paths:  # --stdin-paths cannot name a path with a newline in it
        if p not in ids:
            ids[p] = output(git(top, "hash-object", *flags, "--", p))
    return [ids[p] for p in paths]


def core_config(top: Path) -> dict[str, str]:
    out = git(top, "config", "-z", "--get-regexp", r"^core\.(autocrlf|filemode)$", ok=(0, 1)).stdout
    found: dict[str, str] = {}
    for record in out.split(b"\0"):
        key, _, value = record.decode(errors="replace").partition("\n")
        if key:
            found[key.lower()] = value.strip().lower()
    return found


def filtered_paths(top: Path, paths: Sequence[str], config: Mapping[str, str]) -> set[str]:
    """The paths whose working-tree bytes may differ from their blob's (eol conversion, a
    filter such as Git LFS, ident, an encoding): they go through git both ways. The others are
    read and written as they are, without a git command per file."""
    if config.get("core.autocrlf", "false") in ("true", "input", "yes", "on", "1"):
        return set(paths)
    if not paths:
        return set()
    out = git(
        top,
        "check-attr",
        "-z",
        "--stdin",
        *_CONVERSION_ATTRS,
        input=b"".join(os.fsencode(p) + b"\0" for p in paths),
    ).stdout.split(b"\0")
    found: set[str] = set()
    for i in range(0, len(out) - 2, 3):
        if out[i + 2] not in (b"unspecified", b"unset"):
            found.add(os.fsdecode(out[i]))
    return found


def clean_bytes(top: Path, path: str, filtered: bool) -> bytes:
    """A working file's content as git would store it."""
    if not filtered:
        return (top / path).read_bytes()
    (oid,) = hash_files(top, [path], write=True)
    return read_blobs(top, [oid])[oid]


def to_worktree(top: Path, path: str, oid: str | None, clean: bytes, filtered: bool) -> bytes:
    """Content in git's form as a checkout of `path` would write it."""
    if not filtered:
        return clean
    if oid is None:  # stored as is: it is already in git's form
        oid = output(git(top, "hash-object", "-w", "--stdin", input=clean))
    return git(top, "cat-file", "--filters", f"--path={path}", oid).stdout


def merge_file(top: Path, texts: tuple[bytes, bytes, bytes], label: str) -> tuple[bytes, int]:
    """`git merge-file` of (ours, base, theirs): the merged text and the number of conflicting
    hunks. merge-file only takes files, so the three go through a scratch folder."""
    with tempfile.TemporaryDirectory(prefix="coven-merge-") as scratch:
        names = []
        for name, text in zip(("ours", "base", "theirs"), texts, strict=True):
            (Path(scratch) / name).write_bytes(text)
            names.append(str(Path(scratch) / name))
        done = git(
            top,
            "merge-file",
            "-p",
            "-L",
            "working tree",
            "-L",
            "fork snapshot",
            "-L",
            label,
            *names,
            ok=range(0, 128),
            what="Merging a file",
        )
    return done.stdout, done.returncode


def apply_writes(top: Path, deletes: Sequence[str], writes: Mapping[str, FinalFile]) -> None:
    """Write a merge's plan: deletions first (a file may give its name to a folder, or the other
    way), then files, each through a temporary file and a rename so that no one reads half a
    file. When a write fails, what was already changed is put back, then GitError."""
    undo: list[tuple[str, bytes | None, int | None, bool]] = []  # path, content, mode, link
    made: list[Path] = []

    def remember(p: str) -> None:
        full = top / p
        st = stat_of(full)
        if st is None:
            undo.append((p, None, None, False))
        elif stat.S_ISLNK(st[0]):
            undo.append((p, os.readlink(os.fsencode(full)), None, True))
        elif stat.S_ISREG(st[0]):
            undo.append((p, full.read_bytes(), stat.S_IMODE(st[0]), False))

    try:
        for p in deletes:
            remember(p)
            (top / p).unlink(missing_ok=True)
        for p in deletes:
            _remove_empty_parents(top, p)
        for p, item in sorted(writes.items()):
            remember(p)
            _write(top, p, item, made)
    except OSError as exc:
        for p, content, mode, link in reversed(undo):
            with contextlib.suppress(OSError):
                _restore(top / p, content, mode, link)
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise GitError(
            f"Could not write {exc.filename or 'a file'} in the working tree ({exc.strerror}); "
            "the files already written were put back. Check the folder's permissions and free "
            "space, then merge again."
        ) from exc


def _write(top: Path, path: str, item: FinalFile, made: list[Path]) -> None:
    full = top / path
    missing = [d for d in full.parents if not d.exists() and is_within(d, top)]
    for folder in reversed(missing):
        folder.mkdir()
        made.append(folder)
    temp = full.with_name(f".coven-{os.getpid()}-{next(_TEMP_NUMBERS)}.tmp")
    if item.kind == "link":
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        os.symlink(os.fsdecode(item.data), temp)
        os.replace(temp, full)
        return
    old = stat_of(full)
    # A new file gets 0666 or 0777 less the umask, as a checkout; an existing one keeps its
    # permissions, its executable bits following the merge.
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o777 if item.executable else 0o666)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(item.data)
        if old is not None and stat.S_ISREG(old[0]):
            perm = stat.S_IMODE(old[0])
            perm = perm | (perm & 0o444) >> 2 if item.executable else perm & ~0o111
            os.chmod(temp, perm)
        os.replace(temp, full)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise


def _restore(full: Path, content: bytes | None, mode: int | None, link: bool) -> None:
    if full.is_symlink() or full.is_file():
        full.unlink()
    if content is None:
        return
    if link:
        os.symlink(os.fsdecode(content), full)
        return
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_bytes(content)
    if mode is not None:
        os.chmod(full, mode)


def _remove_empty_parents(top: Path, path: str) -> None:
    """As a checkout does: a folder left empty by a deletion goes too."""
    for folder in (top / path).parents:
        if folder == top or not is_within(folder, top):
            return
        try:
            folder.rmdir()
        except OSError:
            return
