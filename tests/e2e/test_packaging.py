"""What users install: the wheel and sdist `python -m build` makes (their contents), and
`pipx install .` and `uv tool install .` giving a `coven-ls` that runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Big dependencies (claude-agent-sdk bundles the CLI) come from the caches the test run's own
# install filled, not from the network again; everything else is the test's own.
CACHES = {
    "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR") or os.path.expanduser("~/.cache/pip"),
    "UV_CACHE_DIR": os.environ.get("UV_CACHE_DIR") or os.path.expanduser("~/.cache/uv"),
}

pytestmark = pytest.mark.slow


def run(*command: str | Path, env: dict[str, str] | None = None, cwd: Path = ROOT) -> str:
    done = subprocess.run(
        [str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{command} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--outdir", out, ".")
    return out


def test_the_wheel_has_the_package_and_its_data_and_nothing_else(dist: Path) -> None:
    [wheel] = dist.glob("coven_ls-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "coven_ls/core/fork/prompts/fork.md" in names
    assert "coven_ls/protocol/schema.json" in names
    assert "coven_ls/py.typed" in names  # PEP 561: the annotations are for others' checkers too
    modules = ("cli", "acp/agent", "doctor/checks", "lsp/server", "testing/scripted_model")
    modules += ("testing/model", "testing/server", "testing/script", "protocol/docs")
    for module in modules:
        assert f"coven_ls/{module}.py" in names
    tops = {n.split("/")[0] for n in names}
    assert tops == {"coven_ls", wheel.name.split("-py3")[0] + ".dist-info"}, tops
    entry = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt")))
    assert b"coven-ls = coven_ls.cli:main" in entry


def test_the_sdist_builds_the_package_without_tests_or_benches(dist: Path) -> None:
    [sdist] = dist.glob("coven_ls-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = [n.split("/", 1)[1] for n in tar.getnames() if "/" in n]
    for needed in ("pyproject.toml", "README.md", "protocol.md",
                   "coven_ls/core/fork/prompts/fork.md", "coven_ls/protocol/schema.json",
                   "coven_ls/py.typed", "docs/acp.md",
                   "docs/doctor.md", "docs/testing.md"):  # fmt: skip
        assert needed in names
    for left_out in ("tests", "bench", "client-vscode", "scripts"):
        assert not any(n == left_out or n.startswith(left_out + "/") for n in names), left_out


def installed_works(bin_dir: Path, home: Path) -> None:
    coven = bin_dir / "coven-ls"
    assert run(coven, "--version").startswith("coven-ls ")
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "ANTHROPIC_API_KEY": "not-used"}
    report = json.loads(run(coven, "doctor", "--json", "--root", home, env=env))
    found = {f["id"]: f["status"] for f in report["findings"]}
    assert found["claude"] == "ok" and found["packages"] == "ok" and report["ok"] is True


def tool_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, **CACHES, "HOME": str(tmp_path / "home"), **extra}


def test_pipx_install_gives_a_working_coven_ls(tmp_path: Path) -> None:
    env = tool_env(tmp_path, PIPX_HOME=str(tmp_path / "pipx"), PIPX_BIN_DIR=str(tmp_path / "bin"))
    try:
        run(sys.executable, "-m", "pipx", "install", ".", env=env)
        installed_works(tmp_path / "bin", tmp_path / "home")
    finally:
        shutil.rmtree(tmp_path / "pipx", ignore_errors=True)  # hundreds of MB: not left behind


def test_uv_tool_install_gives_a_working_coven_ls(tmp_path: Path) -> None:
    env = tool_env(
        tmp_path, UV_TOOL_DIR=str(tmp_path / "uv-tools"), UV_TOOL_BIN_DIR=str(tmp_path / "bin")
    )
    uv = Path(sys.executable).with_name("uv")
    try:
        run(uv, "tool", "install", "--python", sys.executable, ".", env=env)
        installed_works(tmp_path / "bin", tmp_path / "home")
    finally:
        shutil.rmtree(tmp_path / "uv-tools", ignore_errors=True)
