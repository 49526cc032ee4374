"""The terminal tree (term/render.py) on events and deltas fed by hand: streamed text printed in
place, background tasks under their tool call, retries, and --json's lines."""

from __future__ import annotations

import io
import json
from typing import Any

import msgspec

from coven_ls.protocol.describe import change_counts
from coven_ls.protocol.events import TaskOutcome
from coven_ls.term.render import (
    FILES_LISTED,
    TreePrinter,
    file_listing,
    merge_line,
    merge_summary,
)

SID, CHILD = "s-root", "s-child"


class Feed:
    def __init__(self, **options: Any) -> None:
        self.out = io.StringIO()
        self.printer = TreePrinter(self.out, full_text=True, **options)
        self.printer.add_session(SID, "Tell me")
        self.seq: dict[str, int] = {}

    def event(self, kind: str, sid: str = SID, **fields: Any) -> None:
        self.seq[sid] = self.seq.get(sid, 0) + 1
        self.printer({"sessionId": sid, "seq": self.seq[sid], "kind": kind, "time": "", **fields})

    def delta(self, block: str, text: str, kind: str = "text", sid: str = SID) -> None:
        piece = {"sessionId": sid, "afterSeq": self.seq.get(sid, 0), "blockId": block}
        self.printer.delta({**piece, "kind": kind, "text": text})

    @property
    def lines(self) -> list[str]:
        return self.out.getvalue().split("\n")


def test_pieces_print_in_place_and_the_text_event_only_ends_the_line() -> None:
    feed = Feed()
    feed.event("prompt", text="Tell me", origin="user")
    feed.delta("b1", "\nThere are ")
    feed.delta("b1", "42 fi")
    assert feed.lines[-1] == "  ⏺ There are 42 fi"  # on the screen, the line still open
    feed.delta("b1", "les.\n\nIn src")
    feed.delta("b1", "/.\n")
    feed.event("text", text="\nThere are 42 files.\n\nIn src/.\n", blockId="b1")
    feed.event("turnResult", text="", isError=False, subtype="success", durationMs=1200)
    assert feed.lines == [
        "● Tell me",
        "  › you: Tell me",
        "  ⏺ There are 42 files.",
        "",
        "    In src/.",
        "  ✓ turn done (1.2 s, $0.0000)",
        "",
    ]


def test_thinking_streams_on_one_line_cut_like_its_event() -> None:
    feed = Feed()
    long = "word " * 40
    feed.delta("t1", long[:50], kind="thinking")
    feed.delta("t1", long[50:], kind="thinking")
    feed.event("thinking", text=long, blockId="t1")
    assert feed.lines[1:] == ["  ✻ " + ("word " * 20)[:99] + "…", ""]


def test_interleaved_blocks_go_on_below_with_a_mark_and_cut_off_ones_end() -> None:
    feed = Feed()
    feed.event(
        "forkStarted",
        forkId="f",
        state="running",
        source="user",
        tasks=["Docs"],
        children=[{"sessionId": CHILD, "label": "Docs"}],
    )
    feed.delta("b1", "Writing the ")
    feed.delta("c1", "Docs are", sid=CHILD)
    feed.delta("b1", "docs.")
    feed.event("text", text="Writing the docs.", blockId="b1")
    feed.delta("c1", " written, but", sid=CHILD)
    feed.event("turnResult", sid=CHILD, text="", isError=False, subtype="x", cancelled=True)
    assert feed.lines == [
        "● Tell me",
        "  ⑂ Fork  1 task",
        "  ⏺ Writing the",
        "    [1/1] ● ⑂ Docs",
        "      [1/1] ⏺ Docs are",
        "  ⏺ … docs.",
        "      [1/1] ⏺ … written, but",
        "      [1/1] ■ turn cancelled",
        "",
    ]


def test_a_text_event_that_differs_from_its_pieces_is_printed_whole() -> None:
    feed = Feed()
    feed.delta("b1", "Hello wor")
    feed.event("text", text="Goodbye.", blockId="b1")
    assert feed.lines[1:] == ["  ⏺ Hello wor", "  ⏺ Goodbye.", ""]


def test_tasks_retries_and_queue_positions() -> None:
    feed = Feed()
    feed.event("queuePosition", position=2)
    feed.event("apiRetry", attempt=3, maxRetries=10, retryDelayMs=4000, errorStatus=529, error="x")
    agent = {"description": "Find TODOs", "prompt": "Look for TODOs"}
    feed.event("toolUse", toolUseId="tu", name="Agent", input=agent)
    feed.event("task", taskId="t1", status="started", toolUseId="tu", description="Find TODOs")
    feed.event("toolResult", toolUseId="tu", content="Async agent launched", isError=False)
    feed.event("text", text="Found 3 TODOs.", parentToolUseId="tu")
    feed.event("task", taskId="t1", status="running", lastToolName="Grep", toolUses=2)
    feed.event("task", taskId="t1", status="completed", summary="Found 3")
    assert feed.lines[1:] == [
        "  · queued: 2nd in line",
        "  ⟳ API overloaded — retrying in 4 s (3/10)",
        "  ⚙ Agent  Look for TODOs",
        "    ◇ task started: Find TODOs",
        "    ↳ Async agent launched",
        "      ⏺ Found 3 TODOs.",
        "    ◇ task running: Find TODOs (Grep, 2 tool uses)",
        "    ◆ task completed: Find TODOs — Found 3",
        "",
    ]


def test_a_note_ends_the_streaming_line_first() -> None:
    feed = Feed()
    feed.delta("b1", "Half a")
    feed.printer.note("Σ usage")
    feed.delta("b1", " sentence.")
    assert feed.lines[1:] == ["  ⏺ Half a", "Σ usage", "  ⏺ … sentence."]


def test_json_prints_events_and_deltas_only_when_asked() -> None:
    for with_deltas in (False, True):
        feed = Feed(as_json=True, json_deltas=with_deltas)
        feed.delta("b1", "Hi")
        feed.event("text", text="Hi", blockId="b1")
        printed = [json.loads(line) for line in feed.out.getvalue().splitlines()]
        piece = {"sessionId": SID, "afterSeq": 0, "blockId": "b1", "kind": "text", "text": "Hi"}
        event = {"sessionId": SID, "seq": 1, "kind": "text", "time": "", "text": "Hi"}
        assert printed == [{"delta": piece}, {**event, "blockId": "b1"}][not with_deltas :]


# --- isolated children: where they work, their changes, what became of them ---------------------

DOCS, BUGS, TIDY, SAME = "s-docs", "s-bugs", "s-tidy", "s-same"
BRANCH = "coven/f-1/{}"


def changed(path: str, added: int, removed: int, **more: Any) -> dict[str, Any]:
    file = {"path": path, "status": "modified", "oldPath": None, "binary": False}
    return {**file, "linesAdded": added, "linesRemoved": removed, **more}


def changes(merge: str, *files: dict[str, Any], commit: str | None = "c0ffee") -> dict[str, Any]:
    return {
        "merge": merge,
        "files": list(files),
        "linesAdded": sum(f["linesAdded"] for f in files),
        "linesRemoved": sum(f["linesRemoved"] for f in files),
        "conflicts": [],
        "commit": commit if files else None,
    }


def worktree(n: int) -> dict[str, str]:
    branch = BRANCH.format(n)
    return {"path": f"/state/{branch}", "branch": branch, "base": "9c1e", "repository": "/repo"}


def started(*labels: tuple[str, str], **isolation: Any) -> dict[str, Any]:
    children = [{"sessionId": sid, "label": label} for sid, label in labels]
    tasks = [label for _, label in labels]
    return {"forkId": "f-1", "source": "model", "tasks": tasks, "children": children, **isolation}


def test_a_worktree_fork_says_where_children_work_and_what_became_of_their_changes() -> None:
    feed = Feed()
    labels = [(DOCS, "Write the docs"), (BUGS, "Fix the bugs"), (TIDY, "Tidy up"), (SAME, "Look")]
    feed.event(
        "forkStarted",
        state="running",
        **started(*labels, isolation="worktree", mergeMode="auto", base="9c"),
    )
    docs = changes("pending", changed("docs/guide.md", 38, 2), changed("README.md", 2, 0))
    feed.event("changes", sid=DOCS, worktree=worktree(1), changes=docs)
    bugs = changes("pending", changed("src/app.py", 3, 1))
    feed.event("changes", sid=BUGS, worktree=worktree(2), changes=bugs)
    tidy = changes("kept", changed("src/util.py", 3, 9))
    feed.event("changes", sid=TIDY, worktree=worktree(3), changes=tidy)
    feed.event("changes", sid=SAME, worktree=worktree(4), changes=changes("unchanged"))
    # Merging them changes only `merge`: not news for the child's lines, it is for the summary.
    feed.event("changes", sid=DOCS, worktree=worktree(1), changes={**docs, "merge": "applied"})
    conflict = {"path": "src/app.py", "reason": "changed on the same lines"}
    feed.event("changes", sid=BUGS, worktree=worktree(2), changes={**bugs, "merge": "conflict"})
    results = [
        {"label": "Write the docs", "sessionId": DOCS, "ok": True, "merge": "applied"},
        {"label": "Fix the bugs", "sessionId": BUGS, "ok": True, "merge": "conflict"},
        {"label": "Tidy up", "sessionId": TIDY, "ok": False, "error": "cancelled by the user"},
        {"label": "Look", "sessionId": SAME, "ok": True, "merge": "unchanged"},
    ]
    results[1].update(branch=BRANCH.format(2), conflicts=[conflict])
    results[2].update(merge="kept", branch=BRANCH.format(3))
    feed.event("forkFinished", state="finished", forkId="f-1", results=results, diskBytes=1843200)

    assert feed.lines == [
        "● Tell me",
        "  ⑂ Fork  4 tasks · worktrees, merged when done",
        "    [1/4] ● ⑂ Write the docs",
        "      [1/4] ± +40 −2 · 2 files changed",
        "    [2/4] ● ⑂ Fix the bugs",
        "      [2/4] ± +3 −1 · 1 file changed",
        "    [3/4] ● ⑂ Tidy up",
        "      [3/4] ± +3 −9 · 1 file changed · kept",
        "    [4/4] ● ⑂ Look",
        "      [4/4] ± no files changed",
        "  ⑂ Fork done  3 of 4 tasks succeeded · worktrees take 1.8 MB",
        "    ✓ Write the docs: applied +40 −2 · 2 files",
        "    ✗ Fix the bugs: conflict in src/app.py — work kept on branch coven/f-1/2",
        "    ! Tidy up: not merged, the task failed (cancelled by the user) — +3 −9 · 1 file kept"
        " on branch coven/f-1/3",
        "    · Look: unchanged",
        "",
    ]


def test_each_child_s_first_line_says_how_it_is_held() -> None:
    feed = Feed()
    why = "bubblewrap (bwrap) not found on PATH"
    children = [
        {
            "sessionId": DOCS,
            "label": "Write the docs",
            "sandbox": {"fenced": True, "by": "claude", "reason": None, "network": "full"},
        },
        {
            "sessionId": BUGS,
            "label": "Fix the bugs",
            "sandbox": {"fenced": False, "by": None, "reason": why, "network": None},
        },
        {"sessionId": TIDY, "label": "Tidy up"},  # a server from before the sandbox
    ]
    feed.event(
        "forkStarted",
        state="running",
        forkId="f-1",
        source="user",
        tasks=[c["label"] for c in children],
        children=children,
        isolation="worktree",
        mergeMode="auto",
        base="9c",
    )
    for child in (DOCS, BUGS, TIDY):
        feed.event("statusChanged", sid=child, status="running")
    assert feed.lines[2:5] == [
        "    [1/3] ● ⑂ Write the docs · fenced by claude (network: full)",
        f"    [2/3] ● ⑂ Fix the bugs · unfenced: {why}",
        "    [3/3] ● ⑂ Tidy up",
    ]


def test_a_child_on_a_cluster_says_so_and_names_its_node() -> None:
    feed = Feed()
    on_ray = {"cluster": "ray", "node": None, "nodeId": None}
    children = [
        {"sessionId": DOCS, "label": "Write the docs"},
        {"sessionId": BUGS, "label": "Fix the bugs", "placement": on_ray},
    ]
    feed.event(
        "forkStarted",
        state="running",
        forkId="f-1",
        source="user",
        tasks=[c["label"] for c in children],
        children=children,
        isolation="worktree",
        mergeMode="auto",
        base="9c",
        placement="auto",
    )
    feed.event("placed", sid=BUGS, node="host-2", cluster="ray", nodeId="5f0c")
    feed.event("forkStarted", state="running", **{**started((TIDY, "Tidy up")), "forkId": "f-2"})
    why = "the ray cluster cannot take children (down), so all run on this machine"
    feed.event(
        "forkStarted",
        state="running",
        **{**started((TIDY, "Tidy up")), "forkId": "f-3", "placementReason": why},
    )
    assert feed.lines[1:5] == [
        "  ⑂ Fork  2 tasks · worktrees, merged when done · 1 on the ray cluster",
        "    [2/2] ● ⑂ Fix the bugs · on the ray cluster",
        "      [2/2] ⇢ on host-2 (ray cluster)",
        "  ⑂ Fork  1 task",
    ]
    assert feed.lines[5] == f"  ⑂ Fork  1 task · all here: {why}"


def test_a_reviewed_fork_waits_and_a_shared_fork_has_no_summary() -> None:
    feed = Feed()
    feed.event(
        "forkStarted",
        state="running",
        **started((DOCS, "Docs"), isolation="worktree", mergeMode="review"),
    )
    docs = changes("pending", changed("docs/guide.md", 4, 0, status="added"))
    feed.event("changes", sid=DOCS, worktree=worktree(1), changes=docs)
    feed.event("status", status="reviewing")
    feed.event("forkReviewing", state="reviewing", forkId="f-1", pending=[DOCS])
    feed.event("changes", sid=DOCS, worktree=worktree(1), changes={**docs, "merge": "discarded"})
    result = {"label": "Docs", "sessionId": DOCS, "ok": True, "merge": "discarded"}
    feed.event(
        "forkFinished",
        state="finished",
        forkId="f-1",
        results=[{**result, "branch": BRANCH.format(1)}],
    )
    shared = started((BUGS, "Bugs"), isolation="shared", isolationReason="not a git repository")
    feed.event("forkStarted", state="running", **{**shared, "forkId": "f-2"})
    result = {"label": "Bugs", "sessionId": BUGS, "ok": True}
    feed.event("forkFinished", state="finished", forkId="f-2", results=[result])

    assert feed.lines[1:] == [
        "  ⑂ Fork  1 task · worktrees, changes reviewed",
        "    [1/1] ● ⑂ Docs",
        "      [1/1] ± +4 −0 · 1 file changed",
        "  ? reviewing",
        "  ⑂ Fork review  changes of 1 task wait: apply or discard each",
        "  ⑂ Fork done  1 of 1 tasks succeeded",
        "    ■ Docs: discarded +4 −0 · 1 file — work kept on branch coven/f-1/1",
        "  ⑂ Fork  1 task · shared folder: not a git repository",
        "  ⑂ Fork done  1 of 1 tasks succeeded",
        "",
    ]


def test_json_keeps_the_changes_for_the_summary_and_prints_only_events() -> None:
    feed = Feed(as_json=True)
    docs = changes("applied", changed("a.txt", 1, 0))
    feed.event("changes", sid=DOCS, worktree=worktree(1), changes=docs)
    result = {"label": "Docs", "sessionId": DOCS, "ok": True, "merge": "applied"}
    feed.event("forkFinished", state="finished", forkId="f-1", results=[result])
    printed = [json.loads(line) for line in feed.out.getvalue().splitlines()]
    assert [e["kind"] for e in printed] == ["changes", "forkFinished"]
    tree = feed.printer.tree
    assert merge_summary(tree, printed[1]["forkId"]) == ["✓ Docs: applied +1 −0 · 1 file"]


def test_merge_lines_name_a_few_conflicts_and_listings_cut_long_lists() -> None:
    conflicts = [{"path": f"f{n}.py", "reason": "same lines"} for n in range(5)]
    result = {"label": "Fix", "sessionId": BUGS, "ok": True, "merge": "conflict"}
    outcome = msgspec.convert({**result, "conflicts": conflicts}, TaskOutcome)
    assert merge_line(outcome, None) == "✗ Fix: conflict in f0.py, f1.py, f2.py and 2 more"
    assert merge_line(TaskOutcome("Shared", BUGS, True), None) is None
    moved = changed("new.py", 1, 1, status="renamed", oldPath="old.py")
    logo = changed("logo.png", 0, 0, status="added", binary=True)
    many = changes("pending", moved, logo, *(changed(f"m{n}", n, 0) for n in range(FILES_LISTED)))
    listing = file_listing(many)
    assert listing[:3] == ["  R old.py → new.py  +1 −1", "  A logo.png  binary", "  M m0  +0 −0"]
    assert len(listing) == FILES_LISTED + 1 and listing[-1] == "  … and 2 more"
    assert change_counts(many) == f"+{1 + sum(range(FILES_LISTED))} −1 · 22 files"


def test_a_child_stopped_at_a_limit_says_so_in_the_merge_summary() -> None:
    stopped = TaskOutcome(
        "Loop",
        BUGS,
        False,
        error="stopped: it reached its limit of 4,000 tokens (forkLimits.childTokens)",
        merge="kept",
        branch="coven/f-1/1-loop",
        stopped="limit",
        limit="childTokens",
    )
    assert merge_line(stopped, None) == (
        "! Loop: not merged, stopped at its limit (childTokens) — kept on branch coven/f-1/1-loop"
    )


PLAN = [
    {"content": "Read the test", "status": "completed", "priority": "high"},
    {"content": "Fix the parser", "status": "in_progress", "priority": "high"},
    {"content": "Run the tests", "status": "pending", "priority": "low"},
]


def test_a_plan_prints_a_line_per_step_marked_by_its_status() -> None:
    feed = Feed()
    feed.event("plan", entries=PLAN)
    assert feed.lines[-5:] == [
        "  ☰ plan 1/3 done",
        "    [x] Read the test",
        "    [>] Fix the parser",
        "    [ ] Run the tests",
        "",
    ]
    plan = feed.printer.tree.session(SID).plan
    assert plan is not None and [e.status for e in plan.entries][1] == "in_progress"


def test_a_tool_update_prints_its_status_and_title_but_not_output_alone() -> None:
    feed = Feed()
    feed.event("toolUpdate", toolUseId="call_9", content="def parse(")
    feed.event(
        "toolUpdate",
        toolUseId="call_9",
        status="in_progress",
        title="Read parser.py",
        locations=[{"path": "/w/parser.py", "line": 12}],
    )
    printed = [line for line in feed.lines if "call_9" in line]
    assert printed == ["    ↳ tool call_9: in_progress · Read parser.py · /w/parser.py:12"]
