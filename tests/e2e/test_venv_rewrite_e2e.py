"""A copied virtual environment runs the child's code, end to end: a real project installed
editable (`pip install -e .`: setuptools' static `.pth`, setuptools' finder, hatchling, flit) in a
`.venv` that `.worktreeinclude` lists; a child's worktree gets the copy, edits the package and
runs it by `python -c`, by its console script, through `activate` and by pytest, and sees its own
edit; the parent's venv stays byte for byte as it was.

Two ways in: the copies as a fork makes them, straight on a worktree (no agent: each build style),
and a real fork child (the real `claude` CLI, the scripted model) running the same commands with
its Bash tool.

pip builds the project as users do (an isolated build, its backend from the machine's package
index, as tests/e2e/test_packaging.py does); nothing is fetched beyond that.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from coven_ls.core.workspace import env_rewrite, worktree_env, worktrees
from coven_ls.core.workspace.repository import RepoInfo, inspect
from coven_ls.core.workspace.snapshots import snapshot
from coven_ls.testing.scripted_model import ScriptedModel

from ..gitrepo import commit_all, init_repo
from ..harness import Coven, wait_until
from .test_worktree_env_e2e import fork_in, script_child, session_in, tool_output

pytestmark = pytest.mark.usefixtures("no_user_git_config")

SETUPTOOLS = (
    '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"\n'
)
HATCHLING = '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
PROJECT = '[project]\nname = "demo"\nversion = "0.1"\n[project.scripts]\ndemo = "demo:main"\n'

# Each style with the folder its package is in: setuptools names a src layout in a `.pth`, and a
# layout it cannot name by one folder (a package_dir of its own) in a finder's MAPPING.
STYLES = {
    "setuptools-pth": (SETUPTOOLS + PROJECT, "src/demo"),
    "setuptools-finder": (
        SETUPTOOLS + PROJECT + '[tool.setuptools]\npackages = ["demo"]\n'
        '[tool.setuptools.package-dir]\ndemo = "code"\n',
        "code",
    ),
    "hatchling": (
        HATCHLING + PROJECT + '[tool.hatch.build.targets.wheel]\npackages = ["src/demo"]\n',
        "src/demo",
    ),
    # As pallets' projects (itsdangerous, the issue's example) are built.
    "flit": (
        '[build-system]\nrequires = ["flit_core>=3.4"]\nbuild-backend = "flit_core.buildapi"\n'
        + PROJECT.replace('version = "0.1"\n', 'version = "0.1"\ndescription = "demo"\n'),
        "src/demo",
    ),
}

# What the child runs in its worktree, each printing who the package says it is.
CHECKS = (
    ".venv/bin/python -c 'import demo; print(\"by python:\", demo.WHO, demo.__file__)'",
    ".venv/bin/demo",
    "sh -c '. .venv/bin/activate && echo \"activated: $VIRTUAL_ENV\" && demo'",
    ".venv/bin/pytest -q -p no:cacheprovider tests",
)


def run_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # running the parent's venv must not change it either
    return env


def sh(command: str, cwd: Path) -> str:
    done = subprocess.run(
        command, shell=True, cwd=cwd, env=run_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def editable_project(repo: Path, style: str) -> Path:
    """The project at `repo` (committed), with `.venv` holding it installed editable and pytest;
    the file of its package that says who it is."""
    pyproject, package = STYLES[style]
    init_repo(repo)
    (repo / "pyproject.toml").write_text(pyproject)
    module = repo / package / "__init__.py"
    module.parent.mkdir(parents=True)
    module.write_text("WHO = 'parent'\n\ndef main():\n    print('by script:', WHO)\n")
    (repo / "tests").mkdir()
    (repo / "tests" / "test_demo.py").write_text(
        "import os\nimport demo\n\n"
        "def test_runs_the_code_of_its_own_folder():\n"
        "    assert demo.__file__.startswith(os.getcwd() + os.sep), demo.__file__\n"
        "    print('by pytest:', demo.WHO)\n"
        "    assert demo.WHO == os.environ.get('EXPECT_WHO', 'parent')\n"
    )
    (repo / ".gitignore").write_text(".venv/\n__pycache__/\n*.egg-info/\nbuild/\n")
    (repo / ".worktreeinclude").write_text(".venv/\n")
    commit_all(repo, "project")
    subprocess.run([sys.executable, "-m", "venv", str(repo / ".venv")], check=True, timeout=120)
    pip = subprocess.run(
        [str(repo / ".venv/bin/python"), "-m", "pip", "install", "-q", "-e", ".", "pytest"],
        cwd=repo,
        env=run_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    return module


def tree_digest(folder: Path) -> dict[str, str]:
    found = {}
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if path.is_symlink():
            found[name] = "-> " + os.readlink(path)
        elif path.is_file():
            found[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        info = path.lstat()
        found[name + " #"] = f"{info.st_mode} {info.st_ino} {info.st_mtime_ns}"
    return found


def edit(module: Path) -> None:
    module.write_text(module.read_text().replace("WHO = 'parent'", "WHO = 'child'"))


def assert_runs_its_own(out: str, child: Path, package: str) -> None:
    assert f"by python: child {child}/{package}/__init__.py" in out, out
    assert "by script: child" in out, out
    assert f"activated: {child}/.venv" in out, out
    assert "1 passed" in out, out


@pytest.mark.parametrize("style", list(STYLES))
def test_a_childs_copied_venv_runs_its_own_edit(tmp_path: Path, style: str) -> None:
    repo = tmp_path / "repo"
    module = editable_project(repo, style)
    package = STYLES[style][1]
    before = tree_digest(repo / ".venv")
    info = inspect(repo)
    assert isinstance(info, RepoInfo)
    made = worktrees.create(info, snapshot(info), tmp_path / "wt" / "child", "coven/f/child")
    child = Path(made.path)

    # As the fork does it: the copies (cloned where the file system can), then the rewrite.
    copies = worktree_env.copy_into(repo, child, worktree_env.included(repo))
    assert copies.entries == [".venv/"]
    done = env_rewrite.rewrite_copies(child, copies.entries, repo, copies.parent_links)
    assert done.notices == []
    assert len(done.rewritten) == 1 and done.rewritten[0].startswith(".venv/: pyvenv.cfg, ")
    assert "editable-install file" in done.rewritten[0]

    edit(child / package / "__init__.py")
    out = "".join(sh(c, child) for c in CHECKS[:3])
    out += sh("EXPECT_WHO=child " + CHECKS[3], child)
    assert_runs_its_own(out, child, package)

    assert tree_digest(repo / ".venv") == before  # the parent's venv byte for byte
    assert "WHO = 'parent'" in module.read_text()
    assert "by script: parent" in sh(".venv/bin/demo", repo)
    assert "1 passed" in sh(CHECKS[3], repo)


@pytest.mark.parametrize("start", ["cold", "warm"])
async def test_a_fork_child_runs_its_own_edit_through_its_copied_venv(
    coven_factory, model: ScriptedModel, tmp_path: Path, isolated_state: Path, start: str
) -> None:
    """cold: the server's first fork, the copies made on its path; warm: a pool's spare made
    with the copies ahead (in the pool's folder), moved to the child's place, then rewritten."""
    repo = tmp_path / "repo"
    module = editable_project(repo, "setuptools-finder")
    before = tree_digest(repo / ".venv")
    edit_it = "sed -i \"s/WHO = 'parent'/WHO = 'child'/\" code/__init__.py"
    checks = " && ".join((*CHECKS[:3], "EXPECT_WHO=child " + CHECKS[3]))
    env = "unset VIRTUAL_ENV PYTHONPATH; export PYTHONDONTWRITEBYTECODE=1"
    script_child(model, "Edit and test", f"{env}; {edit_it} && {checks}")
    model.on("You were assigned 'Warm up'", "Nothing to do.")

    options = {"worktreePool": 1} if start == "warm" else {}
    coven: Coven = await coven_factory(init_options=options)
    sid = await session_in(coven, repo)
    if start == "warm":
        await fork_in(coven, sid, ["Warm up"])
        pool = isolated_state / "coven-ls" / "pool"
        await wait_until(lambda: len(list(pool.glob("*/*.ready"))) == 1, 120, "a spare")
    _fork_id, [child], _results = await fork_in(coven, sid, ["Edit and test"])

    info = await coven.request("coven/listSessions", {})
    tree = next(s for s in info["sessions"] if s["sessionId"] == child)["worktree"]["path"]
    out = tool_output(coven, child)
    assert_runs_its_own(out, Path(tree), "code")
    [env_event] = coven.of(child, "worktreeEnv")
    assert env_event["copied"] == [".venv/"]
    assert env_event.get("copiedAhead") is (True if start == "warm" else None)
    assert env_event["rewritten"][0].startswith(".venv/: pyvenv.cfg, 3 activate scripts, ")
    assert not env_event.get("notices")

    assert tree_digest(repo / ".venv") == before
    # The child's edit came back by its merge; the parent's venv now runs it, from the parent.
    assert "WHO = 'child'" in module.read_text()
    assert "by script: child" in sh(".venv/bin/demo", repo)
