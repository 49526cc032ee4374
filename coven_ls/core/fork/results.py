"""What a fork gives back, pure: each child's `TaskResult` (its event form, `TaskOutcome`) and the
`<fork-results>` message that hands the children's answers to the parent's model."""

from __future__ import annotations

from dataclasses import dataclass
from xml.sax.saxutils import escape

from ...protocol import events
from ...protocol.types import ChangedFile, ConflictFile, LimitName, MergeState


@dataclass(frozen=True)
class TaskResult:
    label: str
    session_id: str
    ok: bool
    text: str = ""
    error: str | None = None
    # A worktree child's changes: what became of them, and where its work is kept.
    merge: MergeState | None = None
    files: tuple[ChangedFile, ...] = ()
    conflicts: tuple[ConflictFile, ...] = ()
    branch: str | None = None
    base: str | None = None
    limit: LimitName | None = None  # the fork limit that stopped it

    def wire(self) -> events.TaskOutcome:
        return events.TaskOutcome(
            label=self.label,
            sessionId=self.session_id,
            ok=self.ok,
            error=self.error or None,
            merge=self.merge,
            branch=self.branch if self.merge in _KEPT_ON_BRANCH else None,
            conflicts=list(self.conflicts) or None,
            stopped="limit" if self.limit is not None else None,
            limit=self.limit,
        )


# What became of a child's changes when its work stays on its branch (and only there).
_KEPT_ON_BRANCH = ("conflict", "discarded", "kept")


def _files_attr(files: tuple[ChangedFile, ...]) -> str:
    return ", ".join(f"{f.path} (+{f.linesAdded} -{f.linesRemoved})" for f in files)


def _merge_attrs(r: TaskResult) -> str:
    """The `<task>` attributes that tell the model what became of a worktree child's changes."""
    if r.merge is None:
        return ""
    attrs = f" merge={_attr(r.merge)}"
    if r.merge == "conflict":
        attrs += f" conflicts={_attr(', '.join(c.path for c in r.conflicts))}"
    elif r.files:
        attrs += f" files={_attr(_files_attr(r.files))}"
    if r.merge in _KEPT_ON_BRANCH and r.branch:
        attrs += f" branch={_attr(r.branch)}"
    return attrs


def _merge_note(r: TaskResult) -> str:
    """A line ahead of a child's answer when its changes did not reach the working tree."""
    where = ""
    if r.branch:
        where = f" They are on the branch {r.branch}"
        if r.base:
            where += f" (see them with `git diff {r.base[:12]} {r.branch}`)"
        where += "."
    if r.merge == "conflict":
        clashes = "; ".join(f"{c.path} ({c.reason})" for c in r.conflicts)
        return (
            f"[Not merged: these files conflict with changes already in the working tree: "
            f"{clashes}. None of this task's changes were applied.{where}]"
        )
    if r.merge == "discarded":
        return f"[Not merged: the user discarded this task's changes.{where}]"
    return ""


def _attr(value: str) -> str:
    """An XML attribute value, always in double quotes (quoteattr would switch quote styles)."""
    return '"' + escape(value, {'"': "&quot;"}) + '"'


def compose_results(results: list[TaskResult]) -> str:
    """The `<fork-results>` message. Labels are escaped (they go in an attribute); bodies are the
    children's answers as written, since only the model reads them."""
    parts = ["<fork-results>"]
    if results and not any(r.ok for r in results):
        parts.insert(
            0,
            f"All {len(results)} forks failed, so none of the tasks was done. "
            "Retry them or take another approach.",
        )
    for r in results:
        merge = _merge_attrs(r)
        if r.ok:
            note = _merge_note(r)
            body = f"{note}\n{r.text}" if note else r.text
            parts.append(f"<task label={_attr(r.label)}{merge}>\n{body}\n</task>")
        elif r.limit is not None:
            # Stopped at a limit: what it wrote until then is all the parent gets of it.
            error = " ".join((r.error or "stopped").split())
            stopped = f' stopped="limit" limit={_attr(r.limit)} error={_attr(error)}'
            body = f"\n{r.text}" if r.text else ""
            parts.append(f"<task label={_attr(r.label)}{stopped}{merge}>{body}\n</task>")
        else:
            error = " ".join((r.error or "failed").split())
            parts.append(f"<task label={_attr(r.label)} error={_attr(error)}{merge}>\n</task>")
    parts.append("</fork-results>")
    return "\n".join(parts)
