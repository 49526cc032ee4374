"""Git objects between this machine and a node, as git bundles of only what the other side
lacks: which commits to offer as already had (`have_candidates`), a bundle of a commit and its
history less those (`make_bundle`), and taking one in (`take_bundle`). Blocking (git): call from
a worker thread."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path

from ...core.workspace.git import GitError, git, output, revision

# How many of the most recent commits are offered one by one; older ones are offered ever more
# sparsely (a node that has a commit has its whole history).
RECENT = 16
# At most this many commits are offered in all.
MOST = 64


def have_candidates(ancestry: Sequence[str]) -> list[str]:
    """Of `ancestry` (a commit's first-parent history, newest first), the commits to ask a
    node about: the most recent one by one, then every 2nd, 4th, 8th, ... back to the root,
    which is always offered."""
    chosen = list(ancestry[:RECENT])
    step, at = 2, RECENT - 1 + 2
    while at < len(ancestry) and len(chosen) < MOST - 1:
        chosen.append(ancestry[at])
        step *= 2
        at += step
    if ancestry and ancestry[-1] not in chosen:
        chosen.append(ancestry[-1])
    return chosen


def ancestry(repo: str | os.PathLike[str], commit: str, limit: int = 4096) -> list[str]:
    """`commit`'s first-parent history, newest first (at most `limit`)."""
    done = git(
        repo,
        "rev-list",
        "--first-parent",
        f"--max-count={limit}",
        revision(commit),
        what="Reading the child's history",
    )
    return output(done).split()


def excluded(have: Sequence[str]) -> list[str]:
    """The rev-list arguments that leave out what the other side has."""
    return [f"^{revision(c)}" for c in have]


def make_bundle(
    repo: str | os.PathLike[str], tips: dict[str, str], have: Sequence[str]
) -> bytes | None:
    """A bundle of the commits `tips` (ref name → commit) and their history, less `have` and
    theirs; None when the other side has every tip. Its refs are made in `repo` for the moment
    of bundling (git bundles only refs) and removed after."""
    wanted = {ref: commit for ref, commit in tips.items() if commit not in have}
    if not wanted:
        return None
    scope = f"refs/coven-ls/ray/{uuid.uuid4().hex}"
    refs = {f"{scope}/{name}": commit for name, commit in wanted.items()}
    with tempfile.TemporaryDirectory(prefix="coven-bundle-") as scratch:
        path = Path(scratch) / "child.bundle"
        try:
            for ref, commit in refs.items():
                git(repo, "update-ref", ref, revision(commit), what="Bundling the child's commits")
            try:
                git(
                    repo,
                    "bundle",
                    "create",
                    "--quiet",
                    str(path),
                    *refs,
                    *excluded([c for c in have if c not in wanted.values()]),
                    what="Bundling the child's commits",
                )
            except GitError as exc:
                # Every tip is in the history of what the other side has (a branch moved back).
                if "empty bundle" in str(exc):
                    return None
                raise
        finally:
            for ref in refs:
                git(repo, "update-ref", "-d", ref, ok=(0, 1), what="Bundling the child's commits")
        data = path.read_bytes()
    # The other side asks for its tips by our names: the bundle's refs say `<scope>/<name>`.
    return data


def bundle_refs(data: bytes) -> dict[str, str]:
    """A bundle's refs (name → commit), read from its header."""
    refs: dict[str, str] = {}
    header = data.split(b"\n\n", 1)[0].decode(errors="replace").splitlines()
    for line in header[1:]:
        if line.startswith(("-", "@")) or " " not in line:
            continue
        commit, ref = line.split(" ", 1)
        refs[ref] = commit
    return refs


def take_bundle(repo: str | os.PathLike[str], data: bytes) -> list[str]:
    """Fetch every commit of a bundle into `repo` (objects only: no ref of ours moves) and
    return the commits it carried at its tips."""
    with tempfile.TemporaryDirectory(prefix="coven-bundle-") as scratch:
        path = Path(scratch) / "in.bundle"
        path.write_bytes(data)
        git(repo, "bundle", "verify", "--quiet", str(path), what="Checking the child's commits")
        refs = bundle_refs(data)
        # Into a ref of their own for the moment of the fetch, so that nothing prunes them
        # before the caller points its branch at them.
        scope = f"refs/coven-ls/ray-in/{uuid.uuid4().hex}"
        git(
            repo,
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            str(path),
            *[f"{ref}:{scope}/{i}" for i, ref in enumerate(refs)],
            what="Fetching the child's commits",
        )
        for i in range(len(refs)):
            git(repo, "update-ref", "-d", f"{scope}/{i}", ok=(0, 1))
    return list(refs.values())


def has_commits(repo: str | os.PathLike[str], commits: Sequence[str]) -> list[str]:
    """Those of `commits` that `repo` has, with their history (a commit whose object is there
    came by a fetch, which brings the whole history)."""
    if not commits:
        return []
    done = git(
        repo,
        "cat-file",
        "--batch-check",
        input="".join(f"{revision(c)}^{{commit}}\n" for c in commits).encode(),
        what="Listing the commits the node has",
    )
    found = []
    for commit, line in zip(commits, output(done).splitlines(), strict=False):
        if not line.endswith("missing"):
            found.append(commit)
    return found
