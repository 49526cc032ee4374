"""The project's environment in a child's worktree: the gitignored files the repository's
`.worktreeinclude` names (`.env`, `node_modules/`, ...), copied in before the child starts.

`git worktree add` checks out tracked files only (and the snapshot brings untracked, not-ignored
ones): a child would have no `.env` and no installed dependencies. `.worktreeinclude` at the
repository root (gitignore syntax) is the convention Claude Code, Conductor, Codex and the Copilot
app share: the gitignored files it matches are copied into each new worktree.

Copies are independent of the user's files: never a symbolic or hard link to them (a child
writing its copy must not change the parent's), links inside a copied tree copied as links,
modes kept. Where the file system can clone (FICLONE: btrfs, XFS, bcachefs), files are cloned,
which takes no time and no space until one side writes. What was copied is recorded in the
worktree's own git folder (`commits.COPIED_RECORD`) so that `commits.commit_all` keeps it out
of the child's commits even when the child edits `.gitignore`.

Blocking functions (git, file copies): call them from a worker thread.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .commits import own_git_dir, record_copied
from .git import git

INCLUDE_FILE = ".worktreeinclude"

# FICLONE from <linux/fs.h>: _IOW(0x94, 9, int).
_FICLONE = 0x40049409

# Ignored folders and files worth telling the user about when they are left out: what a child
# most likely needs to run the project (dependencies, secrets).
_NOTABLE_FOLDERS = frozenset(
    {"node_modules", ".venv", "venv", "vendor", ".bundle", "Pods", ".yarn", ".pnpm-store"}
)
_NOTABLE_FILE_PREFIX = ".env"


@dataclass
class CopyReport:
    """What copying a worktree's environment did."""

    entries: list[str] = field(default_factory=list)
    """the `.worktreeinclude` matches copied (a folder ends with `/`), relative to the top"""
    files: int = 0
    bytes: int = 0
    cloned: int = 0
    """files cloned (sharing the parent's blocks until written) rather than copied"""
    warnings: list[str] = field(default_factory=list)
    parent_links: list[str] = field(default_factory=list)
    """the copied links whose absolute targets point into the parent's folder, relative to the
    top (`env_rewrite` makes them point into the child's worktree)"""
    cannot_clone: bool = False
    """the file system refused a clone once: the rest is copied without trying"""
    reused: bool = False
    """the copies a pool's spare came with were used: nothing was copied on the fork's path"""


# --- which files --------------------------------------------------------------------------------


def included(top: Path) -> list[str]:
    """The gitignored files and folders of the repository whose work tree is `top` that its
    `.worktreeinclude` matches, relative to `top` (folders end with `/`). Empty without the
    file. Git itself does the matching, so the syntax is exactly gitignore's."""
    include = top / INCLUDE_FILE
    if not include.is_file():
        return []
    listing = git(
        top,
        "ls-files",
        "-z",
        "--others",
        "--ignored",
        "--directory",
        f"--exclude-from={include}",
        what=f"Reading {INCLUDE_FILE}",
    ).stdout
    candidates = [os.fsdecode(p) for p in listing.split(b"\0") if p]
    ignored = set(_ignored(top, candidates))
    found = [c for c in candidates if c in ignored]
    # A folder the include names whose files .gitignore ignores one by one (`config/` against
    # `config/*.json`): not ignored itself, so its ignored files are looked at one by one.
    folders = [c for c in candidates if c.endswith("/") and c not in ignored]
    if folders:
        inner = git(
            top,
            "ls-files",
            "-z",
            "--others",
            "--ignored",
            f"--exclude-from={include}",
            "--",
            *[f":(literal){f}" for f in folders],
            what=f"Reading {INCLUDE_FILE}",
        ).stdout
        files = [os.fsdecode(p) for p in inner.split(b"\0") if p]
        found += [f for f in _ignored(top, files) if f not in found]
    # A folder's contents listed beside it are already in it.
    folders_found = [f for f in found if f.endswith("/")]
    return sorted(f for f in found if not any(f != d and f.startswith(d) for d in folders_found))


def _ignored(top: Path, paths: Sequence[str]) -> list[str]:
    """Those of `paths` that .gitignore (and the repository's other exclude files) ignore."""
    if not paths:
        return []
    done = git(
        top,
        "check-ignore",
        "-z",
        "--stdin",
        input=b"".join(os.fsencode(p) + b"\0" for p in paths),
        ok=(0, 1),  # 1: none of them is ignored
        what="Checking which files are ignored",
    )
    return [os.fsdecode(p) for p in done.stdout.split(b"\0") if p]


def left_out(top: Path) -> list[str]:
    """Without a `.worktreeinclude`: the ignored dependency folders and `.env` files children will
    not have, as sentences for the user (with their size). Empty when there is nothing notable
    or the repository has a `.worktreeinclude` (the user chose)."""
    if (top / INCLUDE_FILE).is_file():
        return []
    listing = git(
        top,
        "ls-files",
        "-z",
        "--others",
        "--ignored",
        "--exclude-standard",
        "--directory",
        what="Listing ignored files",
    ).stdout
    notes = []
    for raw in listing.split(b"\0"):
        entry = os.fsdecode(raw)
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        folder = entry.endswith("/")
        if (folder and name in _NOTABLE_FOLDERS) or (
            not folder and name.startswith(_NOTABLE_FILE_PREFIX)
        ):
            size = tree_size(top / entry)
            notes.append(
                f"{entry} ({_human(size)}) is gitignored and not in the children's worktrees: "
                f"list it in {INCLUDE_FILE} or set a worktree setup"
            )
    return notes


def tree_size(path: Path) -> int:
    """The bytes of the files at `path` (a file, a link or a folder's whole tree); files gone
    meanwhile (or never there) count nothing."""
    if not path.is_dir() or path.is_symlink():
        try:
            return path.lstat().st_size
        except FileNotFoundError:
            return 0
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass  # gone meanwhile
    return total


def _human(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    value = float(size)
    for unit in ("KB", "MB", "GB", "TB"):
        value /= 1024
        if value < 1024 or unit == "TB":
            return f"{value:.0f} {unit}" if value >= 10 else f"{value:.1f} {unit}"
    raise AssertionError  # the loop returns


# --- copying ------------------------------------------------------------------------------------


def copy_into(source: Path, target: Path, entries: Iterable[str]) -> CopyReport:
    """Copy these entries (from `included`) from the parent's work tree `source` into the
    worktree `target`, and record them there so that the child's commits leave them out. What
    is already at a target path (a copy from an interrupted earlier try) is replaced."""
    report = CopyReport()
    source_real = os.path.realpath(source)
    for entry in entries:
        relative = entry.rstrip("/")
        src, dst = source / relative, target / relative
        if not os.path.lexists(src):
            continue  # deleted since it was listed
        dst.parent.mkdir(parents=True, exist_ok=True)
        _remove(dst)
        if src.is_symlink() or not src.is_dir():
            _copy_one(src, dst, report, source_real)
        else:
            _copy_tree(src, dst, report, source_real)
        report.entries.append(entry)
    report.parent_links = [os.path.relpath(p, target) for p in report.parent_links]
    record_copied(target, [e.rstrip("/") for e in report.entries])
    return report


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _copy_tree(src: Path, dst: Path, report: CopyReport, source_real: str) -> None:
    dst.mkdir()
    folders: list[tuple[Path, Path]] = [(src, dst)]
    for folder, subfolders, files in os.walk(src):
        here = Path(folder)
        there = dst / here.relative_to(src)
        for name in subfolders:
            s, d = here / name, there / name
            if s.is_symlink():  # os.walk lists links to folders among the folders
                _copy_one(s, d, report, source_real)
            else:
                d.mkdir()
                folders.append((s, d))
        for name in files:
            _copy_one(here / name, there / name, report, source_real)
    # Folder modes last: a read-only folder would refuse the files copied into it.
    for s, d in reversed(folders):
        shutil.copystat(s, d, follow_symlinks=False)


def _copy_one(src: Path, dst: Path, report: CopyReport, source_real: str) -> None:
    info = src.lstat()
    if stat.S_ISLNK(info.st_mode):
        target = os.readlink(src)
        os.symlink(target, dst)
        if os.path.isabs(target) and _within(os.path.realpath(target), source_real):
            report.parent_links.append(str(dst))  # made relative to the top by copy_into
        return
    if not stat.S_ISREG(info.st_mode):
        return  # sockets, fifos, devices: nothing a child can use from a copy
    if copy_file(src, dst, clone=not report.cannot_clone):
        report.cloned += 1
    else:
        report.cannot_clone = True
    shutil.copystat(src, dst, follow_symlinks=False)  # mode (a .env stays 0600) and times
    report.files += 1
    report.bytes += info.st_size


def copy_file(src: Path, dst: Path, *, clone: bool = True) -> bool:
    """Copy the regular file `src` to `dst` (which must not exist) as a file of its own, never a
    link to the same inode (a child writing its copy in place must not change the parent's):
    cloned (`clone` and the file system can: blocks shared copy-on-write, no time, no space),
    else copied in the kernel (`copy_file_range`: no round trip through this process, a
    server-side copy on NFS and SMB), else read and written. True when it cloned. Contents only:
    mode and times are the caller's (`shutil.copystat`)."""
    if clone and _clone(src, dst):
        return True
    # Private (0600) until the caller copies the mode: a copied secret is never readable by all.
    private = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with open(src, "rb") as fin, open(private, "wb") as fout:
        if not _copy_in_kernel(fin.fileno(), fout.fileno()):
            fout.seek(0)
            fout.truncate()
            fin.seek(0)
            shutil.copyfileobj(fin, fout, 1 << 20)
    return False


def _copy_in_kernel(source: int, target: int) -> bool:
    """Copy all of `source` to `target` by copy_file_range; False (nothing to keep of what it
    wrote) where the kernel or file system cannot."""
    copy_range = getattr(os, "copy_file_range", None)
    if copy_range is None:
        return False
    try:
        while copy_range(source, target, 1 << 30):
            pass
    except OSError as exc:
        # Not supported here (old kernels, across file systems, some file systems): copy it.
        if exc.errno in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
            return False
        raise
    return True


def _clone(src: Path, dst: Path) -> bool:
    """Clone src to dst where the file system can (sharing blocks: no time, no space until one
    side writes). The ioctl's success is the proof it cloned; False (dst not made) otherwise."""
    if not hasattr(os, "O_CLOEXEC") or os.name != "posix":
        return False
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX
        return False
    with open(src, "rb") as fin:
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            fcntl.ioctl(fd, _FICLONE, fin.fileno())
        except OSError as exc:
            os.close(fd)
            os.unlink(dst)
            if exc.errno in (errno.EOPNOTSUPP, errno.EXDEV, errno.EINVAL, errno.ENOTTY):
                return False
            if exc.errno == errno.EBADF:  # some file systems say so for "cannot clone"
                return False
            raise
        os.close(fd)
    return True


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


# --- copies kept in the pool's spares -----------------------------------------------------------

# In a worktree's own git folder: the copies the pool made in a spare, and what they were made of.
KEPT_RECORD = "coven-kept-copies.json"

# A file changed this close to the moment it was looked at may change again within the same tick
# of the file system's clock, unseen (git's "racily clean" entries): such a tree is not trusted.
_RACY_SECONDS = 2.0


def manifest(top: Path, entries: Sequence[str], racy_before: float | None = None) -> str | None:
    """A digest of what these entries (under `top`) are: every file's, folder's and link's path,
    type and mode, size, inode, and change and modification times (nanoseconds). Writing a
    file, or replacing, adding, removing or renaming anything under them, changes its inode or
    change time (which no one can set back), so an unchanged digest proves the entries are as
    they were. None when a file changed at or after `racy_before - 2 s` (a change within one
    tick of the clock could go unseen). Blocking: an lstat per file."""
    digest = hashlib.sha256()
    limit = None if racy_before is None else int((racy_before - _RACY_SECONDS) * 1e9)
    lines: list[bytes] = []

    def note(name: str, info: os.stat_result) -> bool:
        if limit is not None and max(info.st_ctime_ns, info.st_mtime_ns) >= limit:
            return False
        lines.append(
            os.fsencode(name)
            + f"\0{info.st_mode} {info.st_size} {info.st_ino} {info.st_ctime_ns} "
            f"{info.st_mtime_ns}\n".encode()
        )
        return True

    def walk(folder: str, name: str) -> bool:
        with os.scandir(folder) as found:
            listed = sorted(found, key=lambda e: e.name)  # the same order whatever the folder's
        for entry in listed:
            inner = f"{name}/{entry.name}"
            if not note(inner, entry.stat(follow_symlinks=False)):
                return False
            if entry.is_dir(follow_symlinks=False) and not walk(entry.path, inner):
                return False
        return True

    for entry in entries:
        relative = entry.rstrip("/")
        root = os.path.join(top, relative)
        try:
            info = os.lstat(root)
        except FileNotFoundError:
            lines.append(f"{relative}\0-\n".encode())
            continue
        if not note(relative, info):
            return None
        if stat.S_ISDIR(info.st_mode) and not walk(root, relative):
            return None
        digest.update(b"".join(lines))
        lines.clear()
    digest.update(b"".join(lines))
    return digest.hexdigest()


def keep_in_spare(source: Path, spare: Path, entries: Sequence[str]) -> bool:
    """Copy the `.worktreeinclude` entries into a pool's spare worktree ahead of a fork, and
    record what the copies were made of (`KEPT_RECORD`), so that a child adopting the spare uses
    them when the parent's files have not changed since (`reuse_kept`). False (nothing kept)
    when the parent's files changed lately or while they were copied."""
    if not entries:
        return False
    started = time.time()
    before = manifest(source, entries, racy_before=started)
    if before is None:
        return False
    report = copy_into(source, spare, entries)
    if manifest(source, entries) != before:
        return False  # changed while copied: the record is not written, the fork copies anew
    record = {
        "entries": list(report.entries),
        "source": before,
        "copy": manifest(spare, report.entries),
        "files": report.files,
        "bytes": report.bytes,
        "cloned": report.cloned,
        "warnings": report.warnings,
        "parentLinks": report.parent_links,
    }
    path = own_git_dir(spare) / KEPT_RECORD
    scratch = path.with_name(path.name + ".tmp")
    scratch.write_text(json.dumps(record), encoding="utf-8")
    os.replace(scratch, path)
    return True


def prepare_copies(
    source: Path, target: Path, entries: Sequence[str], source_digest: str | None
) -> CopyReport:
    """The child's copies of these entries: those a pool's spare came with (`keep_in_spare`)
    when they are exactly what the parent holds now (the parent's files have the digest they
    had when copied, `source_digest` being theirs now, and the copies are untouched), else
    fresh ones (`copy_into`). Copies the spare came with that are not wanted now go."""
    kept_path = own_git_dir(target) / KEPT_RECORD
    try:
        kept = json.loads(kept_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        kept = None
    except (OSError, ValueError):
        kept = {}
    kept_path.unlink(missing_ok=True)  # used once: from now on the copies are the child's
    if kept is None:
        return copy_into(source, target, entries)
    wanted = list(entries)
    if (
        kept.get("entries") == wanted
        and source_digest is not None
        and kept.get("source") == source_digest
        and manifest(target, wanted) == kept.get("copy")
    ):
        record_copied(target, [e.rstrip("/") for e in wanted], replace=True)
        return CopyReport(
            entries=wanted,
            files=int(kept.get("files", 0)),
            bytes=int(kept.get("bytes", 0)),
            cloned=int(kept.get("cloned", 0)),
            warnings=list(kept.get("warnings", [])),
            parent_links=list(kept.get("parentLinks", [])),
            reused=True,
        )
    for entry in kept.get("entries", []):
        if entry not in wanted:
            _remove(target / entry.rstrip("/"))
    record_copied(target, [], replace=True)
    return copy_into(source, target, wanted)
