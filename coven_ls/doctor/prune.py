"""`coven-ls prune` on the terminal: what it removes (or, with --dry-run, would remove), what it
keeps and why, one line each, grouped by repository; `--json` prints the same as one object.
Exit code 0 when everything it meant to remove was removed, 1 when something could not be."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..core.store import default_state_dir
from ..core.workspace import prune


def main(state_dir: str | None, dry_run: bool, discard_work: bool, as_json: bool) -> int:
    folder = Path(state_dir).expanduser() if state_dir else default_state_dir()
    report, stored = prune.plan(folder, discard_work, repositories=[os.getcwd()])
    report.dry_run = dry_run
    if not dry_run:
        prune.apply(report, stored)
    if as_json:
        sys.stdout.write(json.dumps(report.to_json()) + "\n")
    else:
        render(report, folder)
    return 1 if any(i.action == "failed" for i in report.items) else 0


def render(report: prune.Report, folder: Path) -> None:
    out = sys.stdout
    removing = "would remove" if report.dry_run else "removed"
    if not report.items:
        out.write(f"Nothing to prune: every coven-ls worktree and branch is in use ({folder}).\n")
    repository = None
    for item in report.items:
        if item.repository != repository:
            repository = item.repository
            out.write(f"{repository}\n")
        what = f"branch {item.branch}" if item.branch else f"worktree {item.worktree}"
        if item.branch and item.worktree:
            what += f" (worktree {item.worktree})"
        verb = {"remove": removing, "keep": "kept", "failed": "FAILED"}[item.action]
        out.write(f"  {verb:<12} {what}: {item.reason}\n")
        if item.error:
            out.write(f"  {'':<12} {item.error}\n")
    for problem in report.problems:
        out.write(f"warning: {problem}\n")
    gone = [i for i in report.items if i.action == "remove"]
    kept = [i for i in report.items if i.action == "keep"]
    failed = [i for i in report.items if i.action == "failed"]
    if report.items:
        summary = f"{removing.capitalize()} {len(gone)}"
        summary += f", kept {len(kept)} with work never applied" if kept else ""
        summary += f", {len(failed)} failed" if failed else ""
        out.write(summary + ".\n")
    if kept:
        out.write(
            "The kept branches hold work no one applied: `git diff <base> <branch>` shows it, "
            "`git merge` or `git cherry-pick` brings it back; `coven-ls prune --discard-work` "
            "deletes them.\n"
        )
    if report.dry_run and gone:
        out.write("Nothing was changed (--dry-run).\n")
