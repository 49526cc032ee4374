"""A node's cache of what children are shipped, and the worktrees they run in: a bare
repository per origin repository (its objects kept across children, so a second child ships
only what is new), the `.worktreeinclude` files by their content's digest, and one worktree per
child. Where: `$COVEN_RAY_NODE_CACHE`, else `$XDG_CACHE_HOME/coven-ls/ray-node` (~/.cache).
Blocking (git, files): call from a worker thread."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from ...core.workspace.commits import add_work, copied_paths, record_copied
from ...core.workspace.git import IDENTITY, commit_tree, git, output, revision
from ...core.workspace.worktree_env import tree_size
from ...core.workspace.worktrees import temp_folder
from . import bundles
from .items import IncludedFile, Work


def cache_root() -> Path:
    explicit = os.environ.get("COVEN_RAY_NODE_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "coven-ls" / "ray-node"


def origin_repo(root: Path, origin: str) -> Path:
    """The bare repository that caches `origin`'s objects on this node (made if missing)."""
    key = hashlib.sha256(origin.encode()).hexdigest()[:24]
    repo = root / "repos" / f"{key}.git"
    if not (repo / "HEAD").is_file():
        repo.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".new-", dir=repo.parent))
        git(scratch, "init", "--quiet", "--bare", str(scratch), what="Making the node's cache")
        try:
            os.rename(scratch, repo)
        except OSError:  # another child of the same origin made it meanwhile
            shutil.rmtree(scratch, ignore_errors=True)
    return repo


def make_worktree(repo: Path, root: Path, name: str, head: str, branch: str | None) -> Path:
    """A worktree of `repo` at `head` for the child `name`, on `branch` (made or reset there)."""
    where = root / "work" / name
    if where.exists():
        git(repo, "worktree", "remove", "--force", str(where), ok=(0, 128))
        shutil.rmtree(where, ignore_errors=True)
    where.parent.mkdir(parents=True, exist_ok=True)
    git(repo, "worktree", "prune", what="Pruning the node's worktrees")
    branching = ["-B", branch] if branch else ["--detach"]
    git(
        repo,
        "worktree",
        "add",
        "--quiet",
        *branching,
        str(where),
        revision(head),
        what="Making the child's worktree on the node",
    )
    return where


def remove_worktree(repo: Path, where: Path) -> None:
    git(repo, "worktree", "remove", "--force", str(where), ok=(0, 128))
    shutil.rmtree(where, ignore_errors=True)
    shutil.rmtree(temp_folder(where), ignore_errors=True)


def _blob(root: Path, digest: str) -> Path:
    if not digest.isalnum():
        raise ValueError(f"not a digest: {digest!r}")
    return root / "blobs" / digest[:2] / digest


def missing_contents(root: Path, digests: Iterable[str]) -> list[str]:
    """Those of the digests whose contents this node has not cached."""
    return sorted({d for d in digests if not _blob(root, d).is_file()})


def store_contents(root: Path, contents: Mapping[str, bytes]) -> None:
    for digest, data in contents.items():
        if hashlib.sha256(data).hexdigest() != digest:
            raise ValueError(f"an included file's contents do not match their digest {digest}")
        path = _blob(root, digest)
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_name(f"{digest}.{os.getpid()}.tmp")
        scratch.write_bytes(data)
        os.replace(scratch, path)


def place_included(root: Path, worktree: Path, files: Iterable[IncludedFile]) -> None:
    """Write the included files into the worktree from the cache, and record them as copied
    (so that the child's commits leave them out, as they do here)."""
    placed = []
    for item in files:
        target = worktree / item.path
        if not _within(target, worktree):
            raise ValueError(f"an included file lies outside the worktree: {item.path}")
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink() or target.exists():
            target.unlink()
        if item.link is not None:
            os.symlink(item.link, target)
        elif item.digest is not None:
            blob = _blob(root, item.digest)
            os.utime(blob)  # used now: the last to be pruned
            shutil.copyfile(blob, target)
            os.chmod(target, stat.S_IMODE(item.mode))
        placed.append(item.path)
    if placed:
        record_copied(worktree, placed)


def prune(root: Path, limit: int, keep: Iterable[str] = (), keep_repo: Path | None = None) -> int:
    """Bring the cache under `limit` bytes (included contents and repositories; not the
    worktrees children run in): the least recently used contents go first (not `keep`), then
    repositories no child works in now (not `keep_repo`), least recently used first. Returns
    the bytes freed."""
    kept = set(keep)
    every = [p for p in (root / "blobs").glob("*/*") if p.is_file()]
    total = sum(p.stat().st_size for p in every) + tree_size(root / "repos")
    blobs = [p for p in every if p.name not in kept]
    repos = [
        r
        for r in (root / "repos").glob("*.git")
        if r != keep_repo and not any((r / "worktrees").glob("*"))
    ]
    freed = 0
    for blob in sorted(blobs, key=lambda p: p.stat().st_mtime):
        if total - freed <= limit:
            return freed
        size = blob.stat().st_size
        blob.unlink(missing_ok=True)
        freed += size
    for repo in sorted(repos, key=lambda r: r.stat().st_mtime):
        if total - freed <= limit:
            return freed
        size = tree_size(repo)
        shutil.rmtree(repo, ignore_errors=True)
        freed += size
    return freed


def _within(path: Path, folder: Path) -> bool:
    real, top = os.path.normpath(path), os.path.normpath(folder)
    return real.startswith(top + os.sep)


def make_work(
    worktree: Path, have: Iterable[str]
) -> tuple[str, str | None, bytes | None, tuple[str, ...]]:
    """The child's work as (head, state, bundle, refs): its HEAD; a commit of its worktree as it
    is (uncommitted changes, new files; not the included copies) on top of HEAD, made with a
    temporary index so the child's own index is untouched (None when nothing is uncommitted);
    and a bundle of those less what the server has (`have`)."""
    what = "Collecting the child's work on the node"
    head = output(git(worktree, "rev-parse", "--verify", "HEAD^{commit}", what=what))
    state: str | None = None
    known = copied_paths(worktree)
    with tempfile.TemporaryDirectory(prefix="coven-work-") as scratch:
        env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
        git(worktree, "read-tree", "HEAD", env=env, what=what)
        add_work(worktree, known, what, env=env)
        tree = output(git(worktree, "write-tree", env={**env, **IDENTITY}, what=what))
    if tree != output(git(worktree, "rev-parse", f"{head}^{{tree}}", what=what)):
        state = commit_tree(worktree, tree, head, "coven-ls: the child's uncommitted changes")
    tips = {"head": head, **({"state": state} if state else {})}
    bundle = bundles.make_bundle(worktree, tips, list(have))
    refs = tuple(bundles.bundle_refs(bundle)) if bundle is not None else ()
    return head, state, bundle, refs


def work_item(
    worktree: Path, have: Iterable[str], conversation: bytes | None, conversation_id: str | None
) -> Work:
    head, state, bundle, refs = make_work(worktree, have)
    return Work(head, state, bundle, refs, conversation, conversation_id)
