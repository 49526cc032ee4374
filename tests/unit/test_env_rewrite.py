"""The `.worktreeinclude` copies made the child's own (env_rewrite): each kind of path a copied
Python venv or node_modules holds into the parent's checkout, rewritten in the copy to the
child's worktree; what is outside the parent's checkout or missing in the child's left alone; the
parent's files never written, even when the copy shares their inode. The venvs here are made of
the files installers write (setuptools, hatchling/editables, pip, venv), byte for byte in form;
tests/e2e/test_venv_rewrite_e2e.py installs real ones."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from coven_ls.core.workspace import env_rewrite, worktree_env

SITE = ".venv/lib/python3.11/site-packages"


def digest(folder: Path) -> dict[str, str]:
    """Every file's and link's content (a link's target), by path: a tree byte for byte."""
    found = {}
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if path.is_symlink():
            found[name] = "-> " + os.readlink(path)
        elif path.is_file():
            found[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def write(path: Path, text: str, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def copy(parent: Path, child: Path, entries: list[str]) -> worktree_env.CopyReport:
    """The copies as a fork makes them (a worktree folder stands for the child's)."""
    child.mkdir(exist_ok=True)
    (child / ".git").mkdir(exist_ok=True)  # record_copied writes into the worktree's git folder
    report = worktree_env.CopyReport()
    for entry in entries:
        src, dst = parent / entry.rstrip("/"), child / entry.rstrip("/")
        if src.is_dir() and not src.is_symlink():
            worktree_env._copy_tree(src, dst, report, os.path.realpath(parent))
        else:
            worktree_env._copy_one(src, dst, report, os.path.realpath(parent))
        report.entries.append(entry)
    report.parent_links = [os.path.relpath(p, child) for p in report.parent_links]
    return report


def venv(parent: Path) -> None:
    """A venv in `parent/.venv` with `demo` (from `parent/src`) installed editable in every
    style, and a console script."""
    p = str(parent)
    (parent / "src" / "demo").mkdir(parents=True)
    write(parent / "src" / "demo" / "__init__.py", "def main():\n    print('v1')\n")
    write(
        parent / ".venv" / "pyvenv.cfg",
        "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.7\n"
        f"executable = /usr/bin/python3.11\ncommand = /usr/bin/python3 -m venv {p}/.venv\n",
    )
    bin_ = parent / ".venv" / "bin"
    bin_.mkdir()
    os.symlink("/usr/bin/python3", bin_ / "python")
    os.symlink("lib", parent / ".venv" / "lib64")
    write(bin_ / "activate", f'VIRTUAL_ENV="{p}/.venv"\nexport VIRTUAL_ENV\n')
    write(bin_ / "activate.fish", f'set -gx VIRTUAL_ENV "{p}/.venv"\n')
    write(bin_ / "activate.csh", f'setenv VIRTUAL_ENV "{p}/.venv"\n')
    script = (
        "# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom demo import main\n"
        "if __name__ == '__main__':\n    sys.exit(main())\n"
    )
    write(bin_ / "demo", f"#!{p}/.venv/bin/python\n" + script, 0o755)
    # pip's form for an interpreter path too long for a `#!` line.
    write(
        bin_ / "demo-long",
        f"#!/bin/sh\n'''exec' '{p}/.venv/bin/python' \"$0\" \"$@\"\n' '''\n" + script,
        0o755,
    )
    write(bin_ / "tool", "#!/usr/bin/env python3\nprint('not the venv')\n", 0o755)
    (bin_ / "compiled").write_bytes(b"\x7fELF" + p.encode() + b"\0" * 64)
    site = parent / SITE
    # setuptools >= 64 (PEP 660), a finder for a layout it cannot name by a folder.
    write(
        site / "__editable__.demo-0.1.pth",
        "import __editable___demo_0_1_finder; __editable___demo_0_1_finder.install()\n",
    )
    write(
        site / "__editable___demo_0_1_finder.py",
        "import sys\nMAPPING: dict[str, str] = {'demo': '" + p + "/src/demo'}\n"
        "NAMESPACES: dict[str, list[str]] = {}\nPATH_PLACEHOLDER = '__editable__.demo-0.1.finder'"
        "\n",
    )
    write(site / "__pycache__" / "__editable___demo_0_1_finder.cpython-311.pyc", "stale")
    # setuptools' lenient mode and hatchling: the folder as a plain path.
    write(site / "__editable__.other-0.1.pth", f"{p}/src\n")
    write(site / "_demo.pth", f"{p}/src\n")
    # editables (hatchling's `dev-mode-exact`).
    write(site / "_editable_impl_demo.pth", "import _editable_impl_demo\n")
    write(
        site / "_editable_impl_demo.py",
        "from editables.redirector import RedirectingFinder as F\nF.install()\n"
        f"F.map_module('demo', '{p}/src/demo/__init__.py')\n",
    )
    # `setup.py develop`.
    write(site / "demo.egg-link", f"{p}/src\n../\n")
    write(site / "easy-install.pth", f"{p}/src\n")
    url = "file://" + p
    write(
        site / "demo-0.1.dist-info" / "direct_url.json",
        json.dumps({"url": url, "dir_info": {"editable": True}}),
    )
    write(
        site / "requests-2.0.dist-info" / "direct_url.json",
        json.dumps({"url": "file:///home/me/wheels/requests-2.0.whl", "archive_info": {}}),
    )
    write(site / "requests" / "__init__.py", f"# {p}/src named in a module: not an install\n")


def test_every_kind_of_path_into_the_parent_names_the_child(tmp_path: Path) -> None:
    parent, child = tmp_path / "repo", tmp_path / "wt" / "child"
    venv(parent)
    before = digest(parent)
    child.mkdir(parents=True)
    (child / "src" / "demo").mkdir(parents=True)  # the worktree's tracked files
    (child / "src" / "demo" / "__init__.py").write_text("def main():\n    print('v2')\n")
    report = copy(parent, child, [".venv/"])
    done = env_rewrite.rewrite_copies(child, report.entries, parent, report.parent_links)

    c, p = str(child), str(parent)
    site = child / SITE
    assert done.notices == []
    assert done.rewritten == [
        ".venv/: pyvenv.cfg, 3 activate scripts, 2 scripts, 6 editable-install files, "
        "1 direct_url.json rewritten to name the child's worktree"
    ]
    assert done.files == 13
    cfg = (child / ".venv" / "pyvenv.cfg").read_text()
    assert f"command = /usr/bin/python3 -m venv {c}/.venv\n" in cfg
    assert "home = /usr/bin\n" in cfg and "executable = /usr/bin/python3.11\n" in cfg
    assert (child / ".venv/bin/activate").read_text().startswith(f'VIRTUAL_ENV="{c}/.venv"')
    assert f'"{c}/.venv"' in (child / ".venv/bin/activate.fish").read_text()
    assert f'"{c}/.venv"' in (child / ".venv/bin/activate.csh").read_text()
    demo = child / ".venv/bin/demo"
    assert demo.read_text().startswith(f"#!{c}/.venv/bin/python\n")
    assert demo.stat().st_mode & 0o777 == 0o755  # still runs
    assert f"'exec' '{c}/.venv/bin/python'" in (child / ".venv/bin/demo-long").read_text()
    assert (child / ".venv/bin/tool").read_text().startswith("#!/usr/bin/env python3\n")
    assert p.encode() in (child / ".venv/bin/compiled").read_bytes()  # a program: not read
    assert os.readlink(child / ".venv/bin/python") == "/usr/bin/python3"  # outside: left
    assert f"{{'demo': '{c}/src/demo'}}" in (site / "__editable___demo_0_1_finder.py").read_text()
    assert not (site / "__pycache__" / "__editable___demo_0_1_finder.cpython-311.pyc").exists()
    for pth in ("__editable__.other-0.1.pth", "_demo.pth", "easy-install.pth"):
        assert (site / pth).read_text() == f"{c}/src\n"
    assert f"'{c}/src/demo/__init__.py'" in (site / "_editable_impl_demo.py").read_text()
    assert (site / "demo.egg-link").read_text() == f"{c}/src\n../\n"
    record = json.loads((site / "demo-0.1.dist-info/direct_url.json").read_text())
    assert record["url"] == "file://" + c
    other = json.loads((site / "requests-2.0.dist-info/direct_url.json").read_text())
    assert other["url"] == "file:///home/me/wheels/requests-2.0.whl"
    assert p in (site / "requests/__init__.py").read_text()  # not an install file: not read
    assert digest(parent) == before  # the parent's venv byte for byte


def test_paths_the_child_lacks_stay_and_are_said(tmp_path: Path) -> None:
    parent, child = tmp_path / "repo", tmp_path / "child"
    p = str(parent)
    write(parent / ".venv/pyvenv.cfg", "home = /usr/bin\n")
    site = parent / SITE
    write(site / "__editable__.gen-0.1.pth", f"{p}/src\n{p}/build/gen\n")
    write(site / "neighbour.pth", f"{p}-old/src\n/elsewhere{p}/src\n")
    (parent / "src").mkdir()
    (parent / "build" / "gen").mkdir(parents=True)  # ignored, not copied: the child lacks it
    child.mkdir()
    (child / "src").mkdir()
    report = copy(parent, child, [".venv/"])
    done = env_rewrite.rewrite_copies(child, report.entries, parent, report.parent_links)

    pth = (child / SITE / "__editable__.gen-0.1.pth").read_text()
    assert pth == f"{child}/src\n{p}/build/gen\n"  # what the child has is its own
    assert len(done.notices) == 1
    assert done.notices[0].startswith(f".venv/ still points into {parent} where it could not")
    assert f"__editable__.gen-0.1.pth ({p}/build/gen)" in done.notices[0]
    # Another folder named like the parent, or with the parent's path inside its own: not it.
    assert (child / SITE / "neighbour.pth").read_text() == f"{p}-old/src\n/elsewhere{p}/src\n"


def test_a_copy_sharing_the_parents_inode_is_replaced_not_written(tmp_path: Path) -> None:
    parent, child = tmp_path / "repo", tmp_path / "child"
    p = str(parent)
    write(parent / ".venv/pyvenv.cfg", f"home = /usr/bin\ncommand = python -m venv {p}/.venv\n")
    script = write(parent / ".venv/bin/demo", f"#!{p}/.venv/bin/python\n", 0o755)
    os.symlink("/usr/bin/python3", parent / ".venv/bin/python")
    child.mkdir()
    report = copy(parent, child, [".venv/"])
    # As a copier that hard links would leave it: the same inode as the parent's file.
    os.unlink(child / ".venv/bin/demo")
    os.link(script, child / ".venv/bin/demo")
    before = digest(parent)
    env_rewrite.rewrite_copies(child, report.entries, parent, report.parent_links)
    assert digest(parent) == before
    assert script.read_text() == f"#!{p}/.venv/bin/python\n"
    assert (child / ".venv/bin/demo").read_text() == f"#!{child}/.venv/bin/python\n"
    assert os.stat(child / ".venv/bin/demo").st_ino != script.stat().st_ino
    assert not list(child.rglob("*.coven-rewrite"))  # no scratch file left


def test_nothing_is_written_through_a_link_out_of_the_copy(tmp_path: Path) -> None:
    parent, child, shared = tmp_path / "repo", tmp_path / "child", tmp_path / "shared"
    p = str(parent)
    write(parent / ".venv/pyvenv.cfg", "home = /usr/bin\n")
    (parent / ".venv/lib/python3.11").mkdir(parents=True)
    write(shared / "site-packages" / "demo.pth", f"{p}/src\n")
    os.symlink(shared / "site-packages", parent / ".venv/lib/python3.11/site-packages")
    (parent / "src").mkdir()
    child.mkdir()
    (child / "src").mkdir()
    before = digest(shared)
    report = copy(parent, child, [".venv/"])
    done = env_rewrite.rewrite_copies(child, report.entries, parent, report.parent_links)
    assert digest(shared) == before and done.files == 0


def test_node_links_into_the_parent_point_into_the_child(tmp_path: Path) -> None:
    parent, child = tmp_path / "repo", tmp_path / "child"
    p = str(parent)
    for tree in (parent, child):  # the workspace packages: tracked, in both
        write(tree / "packages" / "lib" / "index.js", "module.exports = 1;\n")
    modules = parent / "node_modules"
    (modules / "@ws").mkdir(parents=True)
    os.symlink(f"{p}/packages/lib", modules / "@ws" / "lib")
    os.symlink("../packages/lib", modules / "relative")
    os.symlink("/usr/lib/node_modules/npm", modules / "global")
    os.symlink(f"{p}/packages/gone", modules / "gone")
    (modules / ".bin").mkdir()
    os.symlink(f"{p}/packages/lib/index.js", modules / ".bin" / "lib")
    before = digest(parent)
    report = copy(parent, child, ["node_modules/"])
    assert sorted(report.parent_links) == [
        "node_modules/.bin/lib",
        "node_modules/@ws/lib",
        "node_modules/gone",
    ]
    done = env_rewrite.rewrite_copies(child, report.entries, parent, report.parent_links)

    copied = child / "node_modules"
    assert os.readlink(copied / "@ws" / "lib") == f"{child}/packages/lib"
    assert os.readlink(copied / ".bin" / "lib") == f"{child}/packages/lib/index.js"
    assert os.readlink(copied / "relative") == "../packages/lib"  # resolves in the copy already
    assert os.readlink(copied / "global") == "/usr/lib/node_modules/npm"
    assert os.readlink(copied / "gone") == f"{p}/packages/gone"  # the child lacks it: left
    assert done.rewritten == ["node_modules/: 2 links rewritten to name the child's worktree"]
    assert len(done.notices) == 1 and f"node_modules/gone → {p}/packages/gone" in done.notices[0]
    assert digest(parent) == before


def test_a_link_the_child_lacks_the_target_of_is_said(tmp_path: Path) -> None:
    parent, child = tmp_path / "repo", tmp_path / "child"
    write(parent / "packages" / "lib" / "index.js", "module.exports = 1;\n")
    (parent / "node_modules").mkdir()
    os.symlink(f"{parent}/packages/lib", parent / "node_modules" / "lib")
    child.mkdir()  # a worktree without packages/ (the parent's are untracked, say)
    report = copy(parent, child, ["node_modules/"])
    done = env_rewrite.rewrite_copies(child, report.entries, parent, report.parent_links)
    assert os.readlink(child / "node_modules" / "lib") == f"{parent}/packages/lib"
    assert done.files == 0
    assert done.notices == [
        f"node_modules/ still points into {parent} where it could not be made the child's (its "
        "worktree has no such file, or the path leads there through a link): "
        f"node_modules/lib → {parent}/packages/lib. Those paths use the parent's files."
    ]


def test_the_parent_named_through_a_link_of_its_own_is_followed(tmp_path: Path) -> None:
    """A user who opened the project through a link (`~/project -> /data/project`): files name
    either spelling."""
    real, parent, child = tmp_path / "data" / "repo", tmp_path / "repo", tmp_path / "child"
    write(real / ".venv/pyvenv.cfg", "home = /usr/bin\n")
    write(real / SITE / "a.pth", f"{real}/src\n")
    write(real / SITE / "b.pth", f"{parent}/src\n")
    (real / "src").mkdir()
    os.symlink(real, parent)
    child.mkdir()
    (child / "src").mkdir()
    report = copy(parent, child, [".venv/"])
    done = env_rewrite.rewrite_copies(child, report.entries, parent, report.parent_links)
    assert (child / SITE / "a.pth").read_text() == f"{child}/src\n"
    assert (child / SITE / "b.pth").read_text() == f"{child}/src\n"
    assert done.files == 2


def test_a_link_into_the_parent_by_way_of_another_link_is_said(tmp_path: Path) -> None:
    parent, child, alias = tmp_path / "repo", tmp_path / "child", tmp_path / "alias"
    for tree in (parent, child):
        write(tree / "packages" / "lib" / "index.js", "module.exports = 1;\n")
    os.symlink(parent, alias)  # a name of the user's for the checkout, unknown to the server
    (parent / "node_modules").mkdir()
    os.symlink(f"{alias}/packages/lib", parent / "node_modules" / "lib")
    report = copy(parent, child, ["node_modules/"])
    done = env_rewrite.rewrite_copies(child, report.entries, parent, report.parent_links)
    assert os.readlink(child / "node_modules" / "lib") == f"{alias}/packages/lib"
    assert done.files == 0 and len(done.notices) == 1
    assert f"node_modules/lib → {alias}/packages/lib" in done.notices[0]
