"""A copied virtual environment made the child's: what copying a project's `.venv` into a child's
worktree (`.worktreeinclude`) costs, and what rewriting its paths into the parent's checkout to
the child's worktree adds (coven_ls/core/workspace/env_rewrite.py: no reinstall).

The project
    A git repository (one commit: its package in code/demo/, a .gitignore and a
    .worktreeinclude naming `.venv/`) whose `.venv` is a real venv (``python -m venv``: pip and
    setuptools) with the project installed editable as setuptools does it (a finder whose
    MAPPING names code/demo, its `.pth`, a `direct_url.json`), and ``packages`` more installed
    as pip installs a wheel: a package folder of 20 modules, a dist-info (METADATA, RECORD,
    WHEEL, INSTALLER, entry_points.txt; every tenth a `direct_url.json` naming a wheel outside
    the project) and a console script in bin/ starting with the venv's interpreter.

Each round
    A worktree of the repository (``worktrees.create``, not timed); the copy
    (``worktree_env.copy_into``, cloned where the file system can) and the rewrite
    (``env_rewrite.rewrite_copies``), each timed; checked: the child's finder names the child's
    worktree, the parent's its own. git runs with HOME, TMPDIR and its configuration in the
    bench's temp dir.

Run by bench/isolation.py (``--measure venv``, ``--venv-packages``), or alone:
python bench/venv_copy.py [--packages 50] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common  # noqa: F401  (puts the repository on sys.path: tests.gitrepo)

from coven_ls.core.workspace import env_rewrite, repository, snapshots, worktree_env, worktrees
from tests.gitrepo import git, git_env

MODULES_PER_PACKAGE = 20
MIB = 1024 * 1024


def make_project(top: Path, packages: int, env: dict[str, str]) -> None:
    (top / "code" / "demo").mkdir(parents=True)
    (top / "code" / "demo" / "__init__.py").write_text("WHO = 'parent'\n")
    (top / ".gitignore").write_text(".venv/\n__pycache__/\n")
    (top / ".worktreeinclude").write_text(".venv/\n")
    git(top, "init", "-q", "-b", "main", env=env)
    git(top, "add", "-A", env=env)
    git(top, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", "p", env=env)
    venv = top / ".venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env)
    [site] = venv.glob("lib/python*/site-packages")
    python = f"{venv}/bin/python"
    (site / "__editable__.demo-0.1.pth").write_text(
        "import __editable___demo_0_1_finder; __editable___demo_0_1_finder.install()\n"
    )
    (site / "__editable___demo_0_1_finder.py").write_text(
        f"MAPPING: dict[str, str] = {{'demo': '{top}/code/demo'}}\nNAMESPACES = {{}}\n"
    )
    info = site / "demo-0.1.dist-info"
    info.mkdir()
    (info / "direct_url.json").write_text(
        f'{{"url": "file://{top}", "dir_info": {{"editable": true}}}}'
    )
    for i in range(packages):
        name = f"package{i:03}"
        folder = site / name
        folder.mkdir()
        for m in range(MODULES_PER_PACKAGE):
            (folder / f"module{m:02}.py").write_text(f"# {name}.module{m:02}\n" + "x = 1\n" * 300)
        dist = site / f"{name}-1.0.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        (dist / "WHEEL").write_text("Wheel-Version: 1.0\nRoot-Is-Purelib: true\n")
        (dist / "INSTALLER").write_text("pip\n")
        (dist / "entry_points.txt").write_text(f"[console_scripts]\n{name} = {name}:main\n")
        (dist / "RECORD").write_text(
            "".join(f"{name}/module{m:02}.py,,\n" for m in range(MODULES_PER_PACKAGE))
        )
        if i % 10 == 0:
            (dist / "direct_url.json").write_text(
                f'{{"url": "file:///srv/wheels/{name}-1.0-py3-none-any.whl", "archive_info": {{}}}}'
            )
        script = venv / "bin" / name
        script.write_text(
            f"#!{python}\nimport re\nimport sys\nfrom {name} import main\n"
            "if __name__ == '__main__':\n    sys.exit(main())\n"
        )
        script.chmod(0o755)


def run_venv(packages: int, rounds: int) -> list[tuple[float, float]]:
    """(copy, rewrite) seconds per round, printed as they come and as medians."""
    runs: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory(prefix="venv-copy-bench-") as tmp:
        root = Path(tmp)
        env = git_env(root)
        top = root / "project"
        started = time.monotonic()
        make_project(top, packages, env)
        files = sum(len(f) for _, _, f in os.walk(top / ".venv"))
        size = sum(
            os.lstat(os.path.join(d, n)).st_size for d, _, f in os.walk(top / ".venv") for n in f
        )
        print(
            f"venv: {packages} packages and the project editable, {files:,} files, "
            f"{size / MIB:.1f} MiB, made in {time.monotonic() - started:.1f} s",
            flush=True,
        )
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(env)
        try:
            info = repository.inspect(top)
            assert isinstance(info, repository.RepoInfo), info
            base = snapshots.snapshot(info)
            for r in range(rounds):
                tree = worktrees.create(info, base, root / "wt" / f"{r}", f"coven/venv-{r}")
                child = Path(tree.path)
                began = time.perf_counter()
                copies = worktree_env.copy_into(top, child, worktree_env.included(top))
                copied = time.perf_counter() - began
                began = time.perf_counter()
                done = env_rewrite.rewrite_copies(child, copies.entries, top, copies.parent_links)
                rewritten = time.perf_counter() - began
                [site] = (child / ".venv").glob("lib/python*/site-packages")
                finder = (site / "__editable___demo_0_1_finder.py").read_text()
                assert f"'{child}/code/demo'" in finder, finder
                assert done.notices == [], done.notices
                runs.append((copied, rewritten))
                print(
                    f"round {r + 1}: copy {1000 * copied:.0f} ms ({copies.files:,} files, "
                    f"{copies.cloned:,} cloned), rewrite {1000 * rewritten:.1f} ms "
                    f"({done.files} files: {'; '.join(done.rewritten)})",
                    flush=True,
                )
                worktrees.remove(info, child, f"coven/venv-{r}")
            [parent_site] = (top / ".venv").glob("lib/python*/site-packages")
            own = (parent_site / "__editable___demo_0_1_finder.py").read_text()
            assert f"'{top}/code/demo'" in own, own
        finally:
            os.environ.clear()
            os.environ.update(saved)
    copy = statistics.median(c for c, _ in runs)
    rewrite = statistics.median(w for _, w in runs)
    print(
        f"venv medians of {rounds}: copy {1000 * copy:.0f} ms, rewrite {1000 * rewrite:.1f} ms "
        f"({100 * rewrite / copy:.1f}% of the copy)"
    )
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--packages", type=int, default=50, help="installed packages (50)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    args = parser.parse_args(argv)
    if args.packages < 0 or args.rounds < 1:
        parser.error("--packages must not be negative, --rounds at least 1")
    run_venv(args.packages, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
