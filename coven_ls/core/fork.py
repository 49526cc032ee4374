"""Forking: one module owns the whole of it.

The pure half parses the model's `<fork>` tag and composes the `<fork-results>` message; the
async half (`ForkManager`) proposes, approves, runs children in parallel with a limit, cancels,
and reintegrates. Children are ordinary sessions: each resumes the parent's agent conversation
with `--fork-session` under an agent session id chosen here.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from xml.sax.saxutils import escape

import anyio
import msgspec
import yaml

from .. import protocol
from ..protocol import Kind, events
from ..protocol.types import (
    FORK_STATES,
    AgentName,
    ChangedFile,
    Changes,
    ConflictFile,
    FileText,
    ForkChoices,
    ForkContext,
    ForkEstimate,
    ForkLimits,
    ForkRef,
    ForkSource,
    ForkState,
    GetChangesResult,
    LimitName,
    MergeState,
    Usage,
    Worktree,
)
from . import failpoints, transcript
from .agent import AgentSpec, AgentStartError, Backend, Copy, New
from .child_env import ChildEnvironments, stop_leftover_setup
from .fork_choices import ForkSettings, from_row, overlay, resolve, to_row
from .fork_choices import check as check_choices
from .fork_state import check_move
from .models import estimate_fork
from .session import Outcome, Session, SessionConfig
from .spend import child_limit_reached, describe
from .store import Store
from .workspace import isolation, pool
from .workspace.git import GitError
from .workspace.isolation import ForkTrees, MadeAhead

if TYPE_CHECKING:  # the journal stores forks: it imports this module
    from .journal import Journal

log = logging.getLogger(__name__)

MAX_LABEL_CHARS = 200

# --- the pure half -------------------------------------------------------------------------------

_FENCE = re.compile(r"^[ \t]*(```|~~~)[^\n]*\n.*?(?:^[ \t]*\1[ \t]*$|\Z)", re.DOTALL | re.MULTILINE)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_TAG = re.compile(r"<fork>(.*?)</fork>", re.DOTALL)
_OPEN_TAG = re.compile(r"<fork>")


class ForkSyntaxError(ValueError):
    """The model's `<fork>` tag is not a usable task list; the message says why, for the model."""


def fork_instructions(max_children: int) -> str:
    text = resources.files("coven_ls.core").joinpath("prompts/fork.md").read_text(encoding="utf-8")
    return text.replace("{max_children}", str(max_children))


def may_fork(config: SessionConfig, depth: int) -> bool:
    """Whether a session at `depth` (0: top level) forks when its model asks, and so is taught
    how to in its system prompt."""
    return config.fork_mode != "off" and depth < config.max_depth


def fork_prompt(config: SessionConfig, depth: int) -> str | None:
    """What to append to the agent's system prompt (Codex: its developer instructions) for a
    session at `depth`."""
    return fork_instructions(config.max_children) if may_fork(config, depth) else None


def _outside_code(text: str) -> str:
    """The text with fenced blocks and inline code blanked out: a tag shown as an example is not
    a request to fork."""
    text = _FENCE.sub(lambda m: " " * len(m.group(0)), text)
    return _INLINE_CODE.sub(lambda m: " " * len(m.group(0)), text)


def find_fork_tag(text: str) -> str | None:
    """The body of the answer's `<fork>` tag, or None when there is none. Raises ForkSyntaxError
    for an unclosed tag or more than one."""
    plain = _outside_code(text)
    tags = _TAG.findall(plain)
    if len(tags) > 1:
        raise ForkSyntaxError(
            f"Your answer has {len(tags)} <fork> tags; put every task in a single <fork> tag."
        )
    if not tags:
        if _OPEN_TAG.search(plain):
            raise ForkSyntaxError("Your answer opens a <fork> tag but never closes it (</fork>).")
        return None
    tag: str = tags[0]
    return tag


def check_tasks(tasks: Any, max_children: int) -> list[str]:
    """Validate a task list (from YAML or a client); raises ForkSyntaxError saying what is wrong."""
    if not isinstance(tasks, list):
        if isinstance(tasks, dict):
            raise ForkSyntaxError(
                "The <fork> tag holds a YAML mapping, not a list. Write one '- label' line per "
                "task, and quote a label that contains ': '."
            )
        raise ForkSyntaxError(
            "The <fork> tag must hold a YAML list of task labels, one '- label' line per task."
        )
    if not tasks:
        raise ForkSyntaxError("The task list is empty; give at least one task label.")
    if len(tasks) > max_children:
        raise ForkSyntaxError(
            f"{len(tasks)} tasks is more than the limit of {max_children}; "
            "merge tasks or fork fewer at a time."
        )
    labels = []
    for number, task in enumerate(tasks, 1):
        if not isinstance(task, str):
            kind = {bool: "a boolean", int: "a number", float: "a number", dict: "a mapping"}.get(
                type(task), "not plain text"
            )
            raise ForkSyntaxError(
                f"Task {number} is {kind} ({task!r}), not a text label; quote it if it is meant "
                "as text."
            )
        label = " ".join(task.split())
        if not label:
            raise ForkSyntaxError(f"Task {number} is empty; every task needs a label.")
        if len(label) > MAX_LABEL_CHARS:
            raise ForkSyntaxError(
                f"Task {number} is {len(label)} characters long; keep labels under "
                f"{MAX_LABEL_CHARS} characters and put the details in your answer before the tag."
            )
        labels.append(label)
    return labels


def parse_fork_tag(text: str, max_children: int) -> list[str] | None:
    """The task labels the answer asks to fork into; None when it asks for no fork."""
    body = find_fork_tag(text)
    if body is None:
        return None
    try:
        tasks = yaml.safe_load(body)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1} of the tag)" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ForkSyntaxError(f"The <fork> tag is not valid YAML{where}: {problem}.") from exc
    return check_tasks(tasks, max_children)


def problem_message(problem: str) -> str:
    """The follow-up a parent gets when its `<fork>` tag was refused."""
    return (
        f"Your <fork> tag was not used, so nothing was forked: {problem}\n"
        "Fix the tag and answer again to fork, or carry on without forking."
    )


def child_prompt(
    label: str,
    tasks: list[str],
    workdir: str | None = None,
    parent_dir: str | None = None,
    fresh: bool = False,
) -> str:
    """A fork child's first message. Its first line is the seeds' contract, word for word; the
    rest keeps the child on its own task: parallel forks that redo each other's work or re-plan
    the whole job are what users complain of most in fork features. A child in a worktree is
    told where it works: the conversation it resumes names the parent's paths, and writing
    there would bypass its isolation."""
    lines = [f"You were assigned '{label}'"]
    if fresh:
        lines += [
            "",
            "You start afresh: you were given none of the conversation you were forked from, "
            "only this task. Find out what you need from the project itself.",
        ]
    if workdir is not None and parent_dir is not None:
        lines += [
            "",
            f"You work in a copy of the project of your own (a git worktree): {workdir}. It "
            f"holds what {parent_dir} held when you were forked, uncommitted changes included. "
            f"Read and change files only under {workdir}, never under {parent_dir}, even where "
            "the conversation so far names paths there. When you end, your changes are merged "
            f"back into {parent_dir}; you need not commit them.",
        ]
    others = [t for t in tasks if t != label]
    if others:
        lines += [
            "",
            f"You are one of {len(tasks)} forks of this conversation, running at the same time; "
            "each has one task. The others are:",
            *(f"- {t}" for t in others),
            "",
            "Do only your own task. Do not do the others' tasks, and do not re-plan or "
            "re-organise the whole job: that is what the conversation you were forked from "
            "does with every fork's answer. End with your result; it is handed back to it.",
        ]
    return "\n".join(lines)


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


# --- the async half ------------------------------------------------------------------------------


def fork_estimate(
    parent: Session,
    tasks: list[str],
    context: ForkContext = "inherit",
    agent: AgentName | None = None,
) -> ForkEstimate | None:
    """What forking `parent` into `tasks` would cost its children to read what they start from
    (by default children of its own agent that inherit its conversation; see `estimate_fork`);
    None before its first model request. Fresh and transcript children also read their briefs,
    measured as `_run_child` writes them (the worktree's path, not known yet, as the parent's)."""
    if parent.context is None:
        return None
    briefs = 0
    if context != "inherit":
        cwd = parent.config.cwd
        briefs = sum(
            transcript.estimate_tokens(child_prompt(t, tasks, cwd, cwd, fresh=context == "fresh"))
            for t in tasks
        )
    return estimate_fork(
        parent.context, len(tasks), context, agent, parent.config.agent, brief_tokens=briefs
    )


@dataclass
class Fork:
    id: str
    parent: Session
    tasks: list[str]
    source: ForkSource  # the model asked for it, or a user forked by hand
    at_message_id: str | None = None
    state: ForkState = "proposed"  # changed only by move_to
    proposed: list[str] = field(default_factory=list)  # the tasks as first asked for
    decision: str | None = None  # approved, rejected, cancelled (None: not asked, or pending)
    children: list[Session] = field(default_factory=list)
    results: list[TaskResult] | None = None
    # What coven/fork or coven/decideFork asked for it (each left out: the session's setting;
    # see `settings`).
    choices: ForkChoices = field(default_factory=ForkChoices)
    trees: ForkTrees | None = None  # decided when it starts
    # A proposal's worktrees, made while its approval is asked (isolation.MadeAhead).
    ahead: MadeAhead | None = None
    # Set once its children exist (worktrees take a moment): a cancel waits for it.
    prepared: anyio.Event = field(default_factory=anyio.Event)
    # The parent's conversation, read once for `transcript` children (all get the same).
    conversation: list[transcript.Entry] | None = None
    # What each child's worktree takes on disk, measured when the child ends (a walk of every
    # file: off the fork's last moments, but for its last child).
    disk: dict[str, int] = field(default_factory=dict)
    # A model's proposal: the parent's context and what the children would pay to read it.
    estimate: ForkEstimate | None = None

    def move_to(self, state: ForkState) -> None:
        """The one place a fork's state changes, checked against fork_state.py's table."""
        problem = check_move(self.state, state)
        if problem is not None:  # a bug in coven-ls: say so, but keep the fork going
            log.error("fork %s: %s", self.id, problem)
        self.state = state

    def ref(self) -> ForkRef:
        return ForkRef(forkId=self.id, state=self.state)

    @property
    def settings(self) -> ForkSettings:
        """What its children run with: its choices, the parent's settings for the rest."""
        return resolve(self.choices, self.parent.config)

    def record(self) -> dict[str, Any]:
        """The fork's row in the store."""
        return {
            "fork_id": self.id,
            "parent_id": self.parent.id,
            "source": self.source,
            "state": self.state,
            "tasks_proposed": self.proposed or self.tasks,
            "tasks_approved": self.tasks if self.state != "proposed" else None,
            "decision": self.decision,
            "at_message_id": self.at_message_id,
            "children": [c.id for c in self.children],
            "results": None
            if self.results is None
            else [msgspec.to_builtins(r.wire()) for r in self.results],
            "reintegrated": self.state == "finished",
            "isolation": None if self.trees is None else self.trees.record(),
            # as the wire has them (a resumed fork goes on with them, not the session's setting)
            "choices": to_row(self.choices),
        }


class ForkHost(Protocol):
    """What forking needs of the hub: its sessions to find, children to create and launch, and
    the user to ask. Storing fork rows (the journal) and running background work come in as
    dependencies of their own."""

    @property
    def sessions(self) -> Mapping[str, Session]: ...

    def child_backend(self, parent: Session, agent: AgentName) -> Backend:
        """The backend `parent`'s fork children of `agent` run on."""

    def new_child(
        self, parent: Session, fork_id: str, label: str, start: AgentSpec, agent: AgentName
    ) -> Session:
        """A fork child session of `agent`, created but not launched."""

    def launch(self, session: Session) -> None:
        """Announce a session and start its runner."""

    def ask_fork_approval(self, session: Session, fork: Fork) -> None:
        """Ask the user about a proposed fork; the answer comes back through `decide`."""

    def ask_review(self, fork: Fork, children: list[Session]) -> None:
        """Ask the user to apply or discard each of these children's changes; the answers come
        back through `apply_changes` / `discard_changes`."""

    async def ask_permission(
        self, session: Session, tool_name: str, tool_input: dict[str, Any], tool_use_id: str | None
    ) -> tuple[bool, str]:
        """Ask the user a yes/no question as a tool permission (a worktree setup from the
        repository); a message starting with "Denied:" means nobody answered."""


class Spawn(Protocol):
    """Runs background work; a failure is logged, never swallowed."""

    def __call__(self, coro: Coroutine[Any, Any, None], name: str) -> None: ...


def tree_usage(sessions: Mapping[str, Session], session: Session) -> Usage:
    """A session's tokens and those of its fork children, theirs, and so on."""
    total = session.usage
    for child in sessions.values():
        if child.parent_id == session.id:
            total = total + tree_usage(sessions, child)
    return total


async def fork_point_problem(session: Session, at_message_id: str | None) -> str | None:
    """Why the session's agent cannot copy its conversation up to `at_message_id` (an assistant
    message of the session's), or None; for coven/fork and coven/branch."""
    if at_message_id is None or session.agent_session_id is None:
        return None
    return await session.backend.fork_point_problem(session.agent_session_id, at_message_id)


class ForkManager:
    def __init__(self, host: ForkHost, journal: Journal, spawn: Spawn) -> None:
        self._host = host
        self._journal = journal  # stores fork rows with the next burst of events
        self._spawn = spawn
        self.forks: dict[str, Fork] = {}
        self.envs = ChildEnvironments(host.ask_permission)
        self.pools = pool.Pools()
        self._pools_resumed: set[Path] = set()

    def get(self, fork_id: str) -> Fork:
        fork = self.forks.get(fork_id)
        if fork is None:
            raise protocol.fork_not_found(fork_id)
        return fork

    def latest(self) -> dict[str, Fork]:
        """Each parent's (by session id) latest fork, whatever its state."""
        # in the order they were made (or restored): a later fork replaces an earlier one
        return {fork.parent.id: fork for fork in self.forks.values()}

    def active_fork(self, session: Session) -> Fork | None:
        for fork in self.forks.values():
            if fork.parent is session and fork.state in ("proposed", "running"):
                return fork
        return None

    # --- detection (runs in the parent's runner task, at the end of each turn) -------------------

    async def on_turn_end(self, session: Session, result: events.TurnResult) -> None:
        await self._bring_later_work(session)
        config = session.config
        if not may_fork(config, session.depth):
            return  # the tag, if any, stays in the answer as plain text
        match result:
            case events.TurnResult(isError=True) | events.TurnResult(cancelled=True):
                return  # a failed or stopped turn asks for nothing
        try:
            tasks = parse_fork_tag(result.text, config.max_children)
        except ForkSyntaxError as exc:
            session.emit(events.ForkError(message=str(exc)))
            session.send(problem_message(str(exc)), origin="forkError", first=True)
            return
        if tasks is None:
            return
        fork = self._new_fork(session, tasks, source="model")
        if config.fork_mode == "auto":
            self._start(fork)
            return
        session.set_status("awaitingApproval")
        chosen = fork.settings
        fork.estimate = fork_estimate(session, tasks, chosen.context, chosen.agent)
        session.emit(
            events.ForkProposed(
                forkId=fork.id, state=fork.state, tasks=tasks, estimate=fork.estimate
            )
        )
        self._make_ahead(fork)
        self._host.ask_fork_approval(session, fork)

    async def _bring_later_work(self, child: Session) -> None:
        """A worktree child whose changes were already collected (its fork has ended, or waits
        for review) did more work in its worktree (a follow-up): its changes are that work,
        `pending` again until coven/applyChanges brings them back."""
        fork = self.forks.get(child.fork_id or "")
        if (
            fork is None
            or child.worktree is None
            or child.changes is None
            or fork.state not in ("finished", "reviewing")
        ):
            return
        try:
            later = await isolation.later_work(
                child.worktree, child.changes, child.changes_since, child.label or ""
            )
        except GitError as exc:
            child.emit(events.Error(message=f"Its later work could not be read: {exc.message}"))
            return
        if later is None:
            return
        changes, child.changes_since = later
        self._set_changes(child, changes)
        self._host.ask_review(fork, [child])

    def _new_fork(
        self,
        parent: Session,
        tasks: list[str],
        source: ForkSource,
        **kw: Any,
    ) -> Fork:
        fork = Fork(f"f-{uuid.uuid4().hex[:12]}", parent, tasks, source, proposed=list(tasks), **kw)
        self.forks[fork.id] = fork
        self._journal.fork_changed(fork)
        # From here until the results are in, the parent's own messages wait, and its agent
        # process is stopped: a paused-but-alive parent could keep working where no one sees it.
        parent.hold()
        parent.pause_agent()
        return fork

    # --- commands --------------------------------------------------------------------------------

    def estimate(
        self,
        fork_id: str,
        tasks: list[str] | None = None,
        choices: ForkChoices | None = None,
    ) -> ForkEstimate | None:
        """coven/estimateFork: what a proposed fork would cost were it approved with these
        choices (the ones left out: the fork's own), so that a question the user edits shows the
        cost of what it would start."""
        fork = self.get(fork_id)
        if fork.state != "proposed":
            raise protocol.CovenError(
                protocol.ErrorCode.InvalidState,
                f"Fork {fork_id} is {fork.state}; only a proposed fork has an estimate.",
                {"forkId": fork_id, "state": fork.state},
            )
        given = choices or ForkChoices()
        check_choices(protocol.ESTIMATE_FORK, given, fork.parent.config.agent)
        if tasks is not None:
            try:
                tasks = check_tasks(tasks, fork.parent.config.max_children)
            except ForkSyntaxError as exc:
                raise protocol.invalid_params(protocol.ESTIMATE_FORK, str(exc)) from exc
        chosen = resolve(overlay(fork.choices, given), fork.parent.config)
        return fork_estimate(fork.parent, tasks or fork.tasks, chosen.context, chosen.agent)

    def decide(
        self,
        fork_id: str,
        approve: bool,
        tasks: list[str] | None = None,
        reason: str | None = None,
        choices: ForkChoices | None = None,
    ) -> None:
        """coven/decideFork: approve (with other tasks, and the fork's choices) or reject."""
        fork = self.get(fork_id)
        if fork.state != "proposed":
            raise protocol.CovenError(
                protocol.ErrorCode.InvalidState,
                f"Fork {fork_id} is {fork.state}; only a proposed fork can be decided.",
                {"forkId": fork_id, "state": fork.state},
            )
        if approve:
            given = choices or ForkChoices()
            check_choices(protocol.DECIDE_FORK, given, fork.parent.config.agent)
            if tasks is not None:
                try:
                    fork.tasks = check_tasks(tasks, fork.parent.config.max_children)
                except ForkSyntaxError as exc:
                    raise protocol.invalid_params(protocol.DECIDE_FORK, str(exc)) from exc
            fork.decision = "approved"
            fork.choices = overlay(fork.choices, given)
            self._start(fork)
            return
        fork.decision = "rejected"
        self._reject(fork, reason, tell_model=True)

    def _reject(
        self, fork: Fork, reason: str | None, *, tell_model: bool, failed: bool = False
    ) -> None:
        """The fork will not run: declined or withdrawn (or, `failed`, it could not start)."""
        fork.move_to("rejected")
        if fork.ahead is not None:
            ahead, fork.ahead = fork.ahead, None
            self._spawn(isolation.remove_ahead(ahead), name=f"fork {fork.id}: worktrees ahead")
            self._refill(fork)  # the spares it took
        self._journal.fork_changed(fork)
        parent = fork.parent
        parent.emit(events.ForkRejected(forkId=fork.id, state=fork.state, reason=reason))
        told = tell_model and not parent.closed
        if told:
            if failed:
                text = f"Your fork could not start, so nothing was forked: {reason}."
            else:
                because = f" Their reason: {reason}" if reason else ""
                text = f"The user declined your proposed fork, so nothing was forked.{because}"
            parent.send(f"{text}\nCarry on without forking.", origin="forkRejected", first=True)
        # A parent told why goes on from `forking` into that turn; otherwise it is done waiting.
        if parent.status == "awaitingApproval" or (parent.status == "forking" and not told):
            parent.set_status("idle")
        parent.release()

    def check_copyable(self, session: Session, verb: str, refused: str) -> str:
        """The session's agent conversation id, or InvalidState unless that conversation can be
        copied now (a fork's children or a branch start from it): open, settled, not forking,
        with an agent conversation. `verb` and `refused` word the errors for what was asked."""
        if session.closed:
            raise protocol.CovenError(
                protocol.ErrorCode.InvalidState,
                f"Session {session.id} is {session.status}; {refused}.",
                {"sessionId": session.id, "status": session.status},
            )
        if not session.settled or self.active_fork(session) is not None:
            raise protocol.CovenError(
                protocol.ErrorCode.InvalidState,
                f"Session {session.id} is busy ({session.status}); {verb} it when its turn has "
                "ended, or cancel the turn first.",
                {"sessionId": session.id, "status": session.status},
            )
        if session.agent_session_id is None:
            raise protocol.CovenError(
                protocol.ErrorCode.InvalidState,
                f"Session {session.id} has no agent conversation yet, so there is nothing to "
                f"{verb}; wait for its first turn to start.",
                {"sessionId": session.id},
            )
        return session.agent_session_id

    async def fork_by_hand(
        self,
        session: Session,
        tasks: list[str],
        at_message_id: str | None = None,
        choices: ForkChoices | None = None,
    ) -> Fork:
        """coven/fork: fork an idle session into `tasks` now, as `choices` say."""
        choices = choices or ForkChoices()
        # Looked up first (maybe in the store): the checks below and the start of the fork must
        # not be separated by an await, lest the session get busy in between.
        message_found = at_message_id is None or await session.has_message(at_message_id)
        # Only a child that resumes the conversation natively is bound by where its agent can
        # copy it: a transcript is cut at any message.
        native = resolve(choices, session.config).native
        problem = (
            await fork_point_problem(session, at_message_id) if message_found and native else None
        )
        self.check_copyable(session, "fork", "it cannot fork")
        check_choices(protocol.FORK, choices, session.config.agent)
        try:
            tasks = check_tasks(tasks, session.config.max_children)
        except ForkSyntaxError as exc:
            raise protocol.invalid_params(protocol.FORK, str(exc)) from exc
        if not message_found:
            raise protocol.invalid_params(
                protocol.FORK,
                f"'atMessageId' {at_message_id!r} is not an assistant message of session "
                f"{session.id}; use the messageId of one of its text events.",
            )
        if problem is not None:
            raise protocol.invalid_params(protocol.FORK, problem, "atMessageId")
        fork = self._new_fork(
            session,
            tasks,
            source="user",
            at_message_id=at_message_id,
            choices=choices,
        )
        self._start(fork)
        return fork

    async def cancel_fork(self, fork: Fork) -> None:
        """The user stops a whole fork: a proposal is withdrawn; running children are stopped
        (their processes end), queued ones never start, and what finished is reintegrated."""
        if fork.state == "proposed":
            fork.decision = "cancelled"
            self._reject(fork, "cancelled by the user", tell_model=False)
            return
        await fork.prepared.wait()  # its children are being made
        async with anyio.create_task_group() as tg:
            for child in fork.children:
                if not child.closed and not (child.settled and child.last_outcome is not None):
                    tg.start_soon(self.cancel_child, child)

    async def cancel_child(self, child: Session) -> None:
        """Only this child ends; its task is reported as cancelled and the others go on. Its
        CLI is killed at once, as at a limit: closed gracefully, a CLI in a tool loop goes on
        calling the model (and spending) for seconds."""
        child.begin_close("cancelled", kill=True)
        await child.close("cancelled")

    # --- running ---------------------------------------------------------------------------------

    def _start(self, fork: Fork) -> None:
        fork.move_to("running")
        fork.parent.set_status("forking")
        self._journal.fork_changed(fork)
        self._spawn(self._prepare_and_run(fork), name=f"fork {fork.id}")

    async def _prepare_and_run(self, fork: Fork) -> None:
        try:
            await failpoints.reached("approved")
            await self._prepare(fork)
        except Exception as exc:
            # A bug or a broken state folder: the parent must not wait for children that will
            # never exist, so the fork ends as refused, and the model and the user are told why.
            log.exception("fork %s could not start", fork.id)
            fork.parent.emit(events.Error(message=f"The fork could not start: {exc}"))
            self._reject(
                fork,
                f"the fork could not start: {exc}",
                tell_model=fork.source == "model",
                failed=True,
            )
            return
        finally:
            fork.prepared.set()
        await self._run(fork, fork.children)
        self._refill(fork)

    # --- the worktree pool -----------------------------------------------------------------------

    def _refill(self, fork: Fork) -> None:
        """After a worktree fork's children are done (the machine is the user's again), the
        repository's pool is made up for the next fork."""
        trees, config = fork.trees, fork.parent.config
        if trees is None or trees.mode != "worktree" or trees.repository is None:
            return
        self._spawn(
            self.pools.fill(config.state_dir, trees.repository, config.worktree_pool),
            name=f"worktree pool of {trees.repository}",
        )

    def resume_pools(self, state_dir: str | None, size: int) -> None:
        """Once per state folder, when a server first opens it: clean the pools a stopped server
        left and fill them again, in the background."""
        root = pool.state_root(state_dir)
        if root in self._pools_resumed:
            return
        self._pools_resumed.add(root)

        async def resume() -> None:
            for repository in await self.pools.resume(state_dir, size):
                await self.pools.fill(state_dir, repository, size)

        self._spawn(resume(), name=f"worktree pools of {root}")

    def _make_ahead(self, fork: Fork) -> None:
        """While a proposed fork's approval is asked, make its worktrees (spares adopted at a
        snapshot of the moment), so that an approved fork's children start at once. Nothing is
        made for a session whose forks share its folder."""
        config, chosen = fork.parent.config, fork.settings
        if chosen.isolation == "shared":
            return
        ahead = fork.ahead = MadeAhead()

        async def make() -> None:
            try:
                trees = await isolation.plan(
                    config.cwd, None, chosen.merge_mode, config.state_dir, fork.id
                )
                if trees.mode != "worktree" or trees.repository is None:
                    return
                places = [
                    isolation.place(trees, fork.id, n, t) for n, t in enumerate(fork.tasks, 1)
                ]
                # Stored before git makes them, as for a started fork: a crash leaves no orphan.
                trees.planned = [{"path": p, "branch": b} for p, b in places]
                if fork.state == "proposed":  # once started, the fork's own plan is stored
                    fork.trees = trees
                    self._journal.fork_changed(fork)
                    await self._journal.flushed()
                spares = self.pools.take(config.state_dir, trees.repository, len(places))
                ahead.made = await isolation.make(trees, places, spares)
                ahead.trees, ahead.places = trees, places
            except (GitError, OSError):
                log.warning("fork %s: worktrees could not be made ahead", fork.id, exc_info=True)
            finally:
                ahead.ready.set()

        self._spawn(make(), name=f"fork {fork.id}: worktrees ahead")

    async def _made_ahead(
        self, fork: Fork, trees: ForkTrees, places: list[tuple[str, str]]
    ) -> list[Worktree] | None:
        """The worktrees made ahead of this fork, brought to its snapshot, when they are for
        these very places; else (other tasks, or they failed) None, and they are removed."""
        ahead, fork.ahead = fork.ahead, None
        if ahead is None:
            return None
        await ahead.ready.wait()
        if ahead.trees is not None and ahead.made and ahead.places == places:
            try:
                return await isolation.catch_up(ahead, trees)
            except GitError as exc:
                log.warning("fork %s: worktrees made ahead not used: %s", fork.id, exc.message)
        await isolation.remove_ahead(ahead)
        return None

    async def _prepare(self, fork: Fork) -> None:
        """Decide where the children work (making their worktrees), create them, say so, and
        launch them."""
        parent, config, chosen = fork.parent, fork.parent.config, fork.settings
        if fork.ahead is not None and chosen.isolation == "shared":
            ahead, fork.ahead = fork.ahead, None
            await isolation.remove_ahead(ahead)  # approved to share the parent's folder after all
        backend = self._host.child_backend(parent, chosen.agent)
        await anyio.to_thread.run_sync(backend.check)  # no such agent: the fork cannot start
        await self._read_conversation(fork)
        started = time.monotonic()
        trees = await isolation.plan(
            config.cwd,
            chosen.isolation,
            chosen.merge_mode,
            config.state_dir,
            fork.id,
        )
        planned = time.monotonic()
        trees_made: list[Worktree] = []
        if trees.mode == "worktree":
            places = [
                isolation.place(trees, fork.id, n, label) for n, label in enumerate(fork.tasks, 1)
            ]
            trees.planned = [{"path": p, "branch": b} for p, b in places]
            fork.trees = trees
            self._journal.fork_changed(fork)
            await self._journal.flushed()  # stored before git makes them: a crash leaves no orphan
            await failpoints.reached("worktrees")
            assert trees.repository is not None
            try:
                trees_made = await self._made_ahead(fork, trees, places) or []
                if not trees_made:
                    spares = self.pools.take(config.state_dir, trees.repository, len(places))
                    trees_made = await isolation.make(trees, places, spares)
            except (GitError, OSError) as exc:
                reason = getattr(exc, "message", None) or str(exc)
                log.warning("fork %s: worktrees could not be made: %s", fork.id, reason)
                trees = isolation.shared(
                    f"the worktrees could not be made: {reason}", trees.merge_mode
                )
        fork.trees = trees
        log.info(
            "fork %s: %s; snapshot %.2f s, worktrees %.2f s",
            fork.id,
            trees.mode,
            planned - started,
            time.monotonic() - planned,
        )
        for n, label in enumerate(fork.tasks):
            tree = trees_made[n] if trees_made else None
            cwd = config.cwd if tree is None else isolation.child_cwd(tree, config.cwd)
            child = self._host.new_child(
                parent, fork.id, label, self._child_spec(fork, cwd), chosen.agent
            )
            child.isolation, child.isolation_reason = trees.mode, trees.reason
            child.worktree = tree
            fork.children.append(child)
        self._journal.fork_changed(fork)
        worktree_mode = trees.mode == "worktree"
        parent.emit(
            events.ForkStarted(
                forkId=fork.id,
                state=fork.state,
                source=fork.source,
                atMessageId=fork.at_message_id,
                tasks=fork.tasks,
                children=_refs(fork.children),
                isolation=trees.mode,
                isolationReason=trees.reason,
                mergeMode=trees.merge_mode if worktree_mode else None,
                base=trees.base if worktree_mode else None,
                context=None if chosen.context == "inherit" else chosen.context,
                agent=None if chosen.own_agent else chosen.agent,
                limits=chosen.limits,
            )
        )
        for child in fork.children:
            self._host.launch(child)

    async def _read_conversation(self, fork: Fork) -> None:
        """The parent's conversation, for `transcript` children (once per fork and server)."""
        parent = fork.parent
        if fork.settings.context != "transcript" or fork.conversation is not None:
            return
        if parent.agent_session_id is None:
            raise AgentStartError(f"Session {parent.id} has no conversation to write out.")
        fork.conversation = await parent.backend.conversation(
            parent.agent_session_id, parent.config.cwd, fork.at_message_id
        )

    @staticmethod
    def _child_spec(fork: Fork, cwd: str) -> AgentSpec:
        parent, config, chosen = fork.parent, fork.parent.config, fork.settings
        if chosen.context != "inherit":
            # A new conversation of the child's agent; the parent's model is its own agent's.
            return AgentSpec(
                cwd=cwd,
                model=config.model if chosen.own_agent else None,
                permission_mode=config.permission_mode,
                start=New(str(uuid.uuid4())),
                append_system_prompt=fork_prompt(config, parent.depth + 1),
                env=config.env,
            )
        return AgentSpec(
            cwd=cwd,
            model=config.model,
            permission_mode=config.permission_mode,
            # The copy's id is chosen here, so that its transcript is known before its agent
            # says a word.
            start=New(str(uuid.uuid4()))
            if parent.agent_session_id is None
            else Copy(parent.agent_session_id, fork.at_message_id, str(uuid.uuid4())),
            append_system_prompt=fork_prompt(config, parent.depth + 1),
            env=config.env,
        )

    async def _run(self, fork: Fork, children: list[Session]) -> None:
        finished = False
        try:
            async with anyio.create_task_group() as tg:
                for child in children:
                    tg.start_soon(self._run_child, fork, child)
            finished = True
        finally:
            # When the server stops (killed, or closing every session on its way out), the fork
            # stays `running` in the store: it comes back interrupted, to be resumed or abandoned.
            stopped = any(child.stopped_with_server for child in children)
        if finished and not stopped:
            await self._bring_back(fork)

    async def _bring_back(self, fork: Fork, interrupted: str | None = None) -> None:
        """Every child has ended: in worktree mode, merge their changes in task order (merge mode
        `auto`) or wait for the user's review; then give the parent the results."""
        for child in fork.children:
            if child.worktree is not None and child.changes is None:
                await self._collect(fork, child, interrupted)
        trees = fork.trees
        if trees is not None and trees.mode == "worktree" and trees.merge_mode == "review":
            pending = [c for c in fork.children if _pending(c)]
            if pending:
                fork.move_to("reviewing")
                self._journal.fork_changed(fork)
                fork.parent.set_status("reviewing")
                fork.parent.emit(
                    events.ForkReviewing(
                        forkId=fork.id, state=fork.state, pending=[c.id for c in pending]
                    )
                )
                self._host.ask_review(fork, pending)
                return
        async with anyio.create_task_group() as tg:
            for child in fork.children:
                if child.worktree is not None and child.id not in fork.disk:
                    tg.start_soon(self._measure, fork, child)
            for child in fork.children:
                if _pending(child):
                    await self._merge(child)
                    await failpoints.reached("merge")  # one child merged, the next not yet
        await self._finish_measured(fork, interrupted)

    async def _finish_measured(self, fork: Fork, interrupted: str | None = None) -> None:
        """`_finish`, with what the worktrees take on disk (a walk of every file: not on the
        event loop)."""
        disk: int | None = None
        for child in fork.children:
            if child.worktree is not None:
                if child.id not in fork.disk:
                    await self._measure(fork, child)
                disk = (disk or 0) + fork.disk[child.id]
        self._finish(fork, interrupted, disk)

    @staticmethod
    async def _measure(fork: Fork, child: Session) -> None:
        assert child.worktree is not None
        paths = [child.worktree.path]
        fork.disk[child.id] = await anyio.to_thread.run_sync(isolation.disk_usage, paths)

    async def _collect(self, fork: Fork, child: Session, interrupted: str | None = None) -> None:
        """A worktree child has ended: commit its work on its branch and say what it changed."""
        tree = child.worktree
        assert tree is not None
        ok = self._result_of(child, interrupted).ok
        await failpoints.reached("commit")
        try:
            changes = await isolation.collect(tree, child.label or "", ok, child.changes_since)
        except GitError as exc:
            log.warning("session %s: its changes could not be read: %s", child.id, exc)
            child.emit(events.Error(message=f"Its changes could not be read: {exc.message}"))
            changes = isolation.unreadable()
        self._set_changes(child, changes)

    def _set_changes(self, child: Session, changes: Changes) -> None:
        assert child.worktree is not None
        child.changes = changes  # stored with the event's burst (its row goes with it)
        child.emit(events.ChangesEvent(worktree=child.worktree, changes=changes))

    async def _merge(self, child: Session) -> Changes:
        tree, changes = child.worktree, child.changes
        assert tree is not None and changes is not None
        merged = await isolation.merge(tree, changes, child.label or "child", child.changes_since)
        self._set_changes(child, merged)
        return merged

    def _review_target(self, child: Session, method: str) -> Fork | None:
        if child.worktree is None or child.changes is None or child.changes.merge != "pending":
            merge = child.changes.merge if child.changes is not None else None
            what = (
                "did not work in a worktree"
                if child.worktree is None
                else "has not ended yet"
                if child.changes is None
                else f"has changes that are {merge}, not pending"
            )
            raise protocol.CovenError(
                protocol.ErrorCode.InvalidState,
                f"{method}: session {child.id} {what}; only a fork child whose changes wait "
                "for review can be applied or discarded.",
                {"sessionId": child.id, "merge": merge},
            )
        return self.forks.get(child.fork_id or "")

    async def get_changes(self, child: Session, path: str | None) -> GetChangesResult:
        """coven/getChanges: a worktree child's changes, and one file's two texts."""
        tree, changes = child.worktree, child.changes
        if tree is None or changes is None:
            raise protocol.CovenError(
                protocol.ErrorCode.InvalidState,
                f"Session {child.id} "
                + ("did not work in a worktree" if tree is None else "has not ended yet")
                + "; only a worktree fork child that has ended has changes to show.",
                {"sessionId": child.id, "status": child.status},
            )
        text = None
        if path is not None:
            try:
                changed, base, mine = await isolation.file_text(
                    tree, changes, path, child.changes_since
                )
            except KeyError:
                raise protocol.invalid_params(
                    protocol.GET_CHANGES,
                    f"'path' {path!r} is not one of the files session {child.id} changed; "
                    "coven/getChanges without 'path' lists them.",
                    "path",
                ) from None
            text = FileText(
                path=changed.path,
                oldPath=changed.oldPath,
                binary=changed.binary,
                base=None if changed.binary or base is None else base.decode(errors="replace"),
                child=None if changed.binary or mine is None else mine.decode(errors="replace"),
            )
        return GetChangesResult(sessionId=child.id, worktree=tree, changes=changes, file=text)

    async def apply_changes(self, child: Session) -> Changes:
        """The user applies a reviewed child's changes (all of them, or none on a conflict)."""
        fork = self._review_target(child, protocol.APPLY_CHANGES)
        merged = await self._merge(child)
        if fork is not None:
            self._reviewed(fork)
        return merged

    def discard_changes(self, child: Session) -> None:
        fork = self._review_target(child, protocol.DISCARD_CHANGES)
        assert child.changes is not None
        self._set_changes(child, isolation.discarded(child.changes))
        if fork is not None:
            self._reviewed(fork)

    def _reviewed(self, fork: Fork) -> None:
        """A child's changes were decided: once none waits, the parent gets the results."""
        if fork.state == "reviewing" and not any(_pending(c) for c in fork.children):
            fork.move_to("running")  # decided; a second decision must not finish it again
            fork.parent.set_status("forking")
            self._spawn(self._finish_measured(fork), name=f"fork {fork.id}")

    def _finish(
        self, fork: Fork, interrupted: str | None = None, disk_bytes: int | None = None
    ) -> None:
        """Every child has ended: report, and give the parent the results (ahead of anything
        that waited)."""
        parent = fork.parent
        self.envs.forget(fork.id)
        fork.results = [self._result_of(child, interrupted) for child in fork.children]
        if fork.state != "finished":  # a restart finds it finished, its results not given
            fork.move_to("finished")
        self._journal.fork_changed(fork)
        usage = sum((tree_usage(self._host.sessions, c) for c in fork.children), Usage())
        parent.emit(
            events.ForkFinished(
                forkId=fork.id,
                state=fork.state,
                results=[r.wire() for r in fork.results],
                usage=usage,
                diskBytes=disk_bytes,
            )
        )
        if not parent.closed:
            # The parent stays `forking` until its runner takes this turn and starts it.
            parent.send(compose_results(fork.results), origin="forkResults", first=True)
        parent.release()

    async def _run_child(self, fork: Fork, child: Session) -> None:
        """One child's part of the fork: its assignment, and every turn that follows from it (a
        fork of its own, and the turn that reads its results). Each of its turns waits for one
        of the server's slots (`maxParallel`, the hub's `Slots`)."""
        if child.closed:
            return  # cancelled before it started
        try:
            # Its copies, ports and setup (see child_env), before its agent starts.
            index = fork.children.index(child) + 1
            chosen = fork.settings
            if not await self.envs.ready(fork.id, fork.parent, child, index, chosen.worktree_setup):
                return  # its setup failed (it has ended, failed) or it was cancelled meanwhile
            workdir = parent_dir = None
            if child.worktree is not None:
                workdir, parent_dir = child.config.cwd, fork.parent.config.cwd
            context = chosen.context
            brief = child_prompt(
                child.label or "", fork.tasks, workdir, parent_dir, fresh=context == "fresh"
            )
            if context == "transcript":
                brief = transcript.render(fork.conversation or [], brief)
            child.send(brief, origin="fork")
            seconds = chosen.limits.childSeconds if chosen.limits is not None else None
            async with anyio.create_task_group() as timer:
                if seconds:
                    timer.start_soon(self._time_limit, fork, child, seconds)
                await child.wait_settled()
                timer.cancel_scope.cancel()
            if child.worktree is not None and not child.stopped_with_server:
                await self._collect(fork, child)
                if any(c is not child and not c.settled for c in fork.children):
                    # Its disk, walked while siblings work; the last child's is walked while
                    # the changes are merged (`_bring_back`), not before.
                    await self._measure(fork, child)
        finally:
            self.envs.release(child)

    async def _time_limit(self, fork: Fork, child: Session, seconds: float) -> None:
        """Stop the child `seconds` after it started (not while it waits for a slot)."""
        await child.started.wait()
        assert child.started_at is not None
        await anyio.sleep_until(child.started_at + seconds)
        self._stop_at_limit(fork, child, "childSeconds")

    # --- limits ----------------------------------------------------------------------------------

    def on_spend(self, session: Session) -> None:
        """A fork child (or one of its own children, at any depth) made a model call: tell the
        tree how far it is, and stop what reached a limit: the child itself for its own limits,
        every child still at work for its fork's `forkCostUsd`."""
        node, direct = session, True
        while node.fork_id is not None:
            fork = self.forks.get(node.fork_id)
            if fork is None:
                return
            limits = fork.settings.limits
            if limits is not None and fork.state == "running":
                if direct:
                    seconds = _seconds(node)
                    node.emit(
                        events.Spend(
                            usage=node.live_usage,
                            costUsd=round(node.live_cost_usd, 6),
                            seconds=round(seconds or 0.0, 3),
                        )
                    )
                    reached = child_limit_reached(limits, node.live_usage, node.live_cost_usd)
                    if reached is not None:
                        self._stop_at_limit(fork, node, reached)
                if limits.forkCostUsd:
                    spent = sum(self._tree_cost(c) for c in fork.children)
                    if spent >= limits.forkCostUsd:
                        for child in fork.children:
                            self._stop_at_limit(fork, child, "forkCostUsd")
            node, direct = fork.parent, False

    def _tree_cost(self, session: Session) -> float:
        """A session's cost so far and that of its fork children, theirs, and so on."""
        total = session.live_cost_usd
        for child in self._host.sessions.values():
            if child.parent_id == session.id and child.branched_from is None:
                total += self._tree_cost(child)
        return total

    def _stop_at_limit(
        self, fork: Fork, child: Session, limit: LimitName, limits: ForkLimits | None = None
    ) -> None:
        """Stop a child that reached a limit, as a cancel would (its process ends, its work stays
        on its branch), but with its words so far and the limit for the parent. A child that
        forked in turn has its own children stopped with it (`limits`: the fork's whose limit
        was reached, when it is an outer one)."""
        limits = limits or fork.settings.limits
        assert limits is not None
        if fork.state != "running" or child.closed:
            return
        inner = self.active_fork(child)
        if inner is None and (child.answered or (child.settled and child.last_outcome is not None)):
            return  # it had finished its task already
        if inner is not None:
            for grandchild in inner.children:
                self._stop_at_limit(inner, grandchild, limit, limits)
        child.last_outcome = Outcome(
            False, "\n\n".join(child.turn_text), describe(limit, limits), limit
        )
        log.info("fork %s: child %s reached %s", fork.id, child.id, limit)
        # At once: its turn must not end with another outcome, nor its CLI go on meanwhile.
        child.begin_close("cancelled", kill=True)

    @staticmethod
    def _result_of(child: Session, interrupted: str | None = None) -> TaskResult:
        label, sid = child.label or "", child.id
        changes, tree = child.changes, child.worktree
        merge: dict[str, Any] = {}
        if changes is not None and tree is not None:
            merge = {
                "merge": changes.merge,
                "files": tuple(changes.files),
                "conflicts": tuple(changes.conflicts),
                "branch": tree.branch,
                "base": tree.base,
            }
        stopped = child.last_outcome
        if stopped is not None and stopped.limit is not None:
            return TaskResult(
                label, sid, False, stopped.text, stopped.error, limit=stopped.limit, **merge
            )
        if child.status == "cancelled":
            return TaskResult(label, sid, False, error="cancelled by the user", **merge)
        if interrupted is not None and child.status == "interrupted":
            return TaskResult(label, sid, False, error=interrupted, **merge)
        outcome: Outcome | None = child.last_outcome
        if outcome is None:
            reason = interrupted or ("it was closed" if child.closed else "it never ran")
            return TaskResult(label, sid, False, error=f"did not finish: {reason}", **merge)
        return TaskResult(label, sid, outcome.ok, outcome.text, outcome.error, **merge)

    # --- after a restart -------------------------------------------------------------------------

    def restore(self, rows: list[dict[str, Any]], reached: set[str]) -> None:
        """Forks as a stopped server left them. A proposal is still open; a fork that was running
        is interrupted (its parent waits for coven/resumeFork or coven/abandonFork); a finished
        fork whose results never reached its parent (it is not in `reached`, see
        `results_reached`) gives them now."""
        sessions = self._host.sessions
        for row in rows:
            parent = sessions.get(row["parent_id"])
            if parent is None or row["fork_id"] in self.forks:
                continue
            state = _stored_state(row["state"])
            stored = row.get("isolation") or {}
            fork = Fork(
                row["fork_id"],
                parent,
                list(row["tasks_approved"] or row["tasks_proposed"]),
                row["source"],
                at_message_id=row["at_message_id"],
                state=state,
                proposed=list(row["tasks_proposed"]),
                decision=row["decision"],
                children=[sessions[c] for c in row["children"] or [] if c in sessions],
                trees=ForkTrees.from_record(stored) if "mode" in stored else None,
                choices=from_row(row.get("choices")),
            )
            fork.prepared.set()
            self.forks[fork.id] = fork
            if state == "reviewing":
                parent.hold()  # until every child's changes are decided
            elif state == "proposed":
                parent.hold()
                if parent.status == "interrupted":
                    parent.set_status("awaitingApproval")
            elif state in ("running", "interrupted"):
                for child in fork.children:  # a setup the stopped server left running
                    if child.worktree is not None:
                        stop_leftover_setup(child.worktree.path)
                if state == "running":
                    fork.move_to("interrupted")
                parent.hold()
                self._journal.fork_changed(fork)
                if state == "running":  # said once, by the restart that found it cut off
                    parent.emit(
                        events.ForkInterrupted(
                            forkId=fork.id,
                            state=fork.state,
                            unfinished=[c.id for c in self._unfinished(fork)],
                        )
                    )
            elif state == "finished" and fork.id not in reached:
                parent.hold()  # _finish releases it
                self._finish(fork)

    def resume(self, fork_id: str) -> None:
        """Run again the children of an interrupted fork that had not finished (fresh forks of
        the parent), then reintegrate as usual."""
        fork = self._interrupted(fork_id, protocol.RESUME_FORK)
        if fork.parent.agent_session_id is None:
            raise protocol.CovenError(
                protocol.ErrorCode.InvalidState,
                f"Fork {fork_id}'s parent has no agent conversation to fork.",
                {"forkId": fork_id, "state": fork.state},
            )
        if not fork.children:
            # Cut off before its children existed (approved, its worktrees not made yet): it
            # starts now as it would have then. Worktrees planned and left half made were
            # removed by the restart (Hub._remove_orphans).
            fork.move_to("running")
            fork.prepared = anyio.Event()
            fork.parent.set_status("forking")
            self._journal.fork_changed(fork)
            self._spawn(self._prepare_and_run(fork), name=f"fork {fork.id}")
            return
        again = self._unfinished(fork)
        fork.move_to("running")
        fork.parent.set_status("forking")
        fork.parent.emit(
            events.ForkResumed(forkId=fork.id, state=fork.state, children=_refs(again))
        )
        for child in again:
            child.changes = None  # collected again when it ends
            child.restart_as_fork(self._child_spec(fork, child.config.cwd))
        self._journal.fork_changed(fork)
        self._spawn(self._resume_run(fork, again), name=f"fork {fork.id}")

    async def _resume_run(self, fork: Fork, again: list[Session]) -> None:
        try:
            await self._read_conversation(fork)
        except AgentStartError as exc:
            fork.parent.emit(events.Error(message=f"The fork could not resume: {exc}"))
            for child in again:
                _not_resumed(child, str(exc))
        for child in again:
            if child.worktree is not None and child.status != "failed":
                try:
                    await isolation.ensure(child.worktree)
                except GitError as exc:
                    _not_resumed(child, exc.message)
        await self._run(fork, [c for c in again if c.status != "failed"])

    @staticmethod
    def _unfinished(fork: Fork) -> list[Session]:
        return [c for c in fork.children if c.status == "interrupted" or c.last_outcome is None]

    def abandon(self, fork_id: str) -> None:
        """Give the parent what finished; the rest is reported as interrupted."""
        fork = self._interrupted(fork_id, protocol.ABANDON_FORK)
        fork.move_to("running")  # until its finished children's changes are brought back
        self._journal.fork_changed(fork)
        self._spawn(
            self._bring_back(fork, "interrupted: the server stopped before it finished"),
            name=f"abandon {fork.id}",
        )

    def _interrupted(self, fork_id: str, method: str) -> Fork:
        fork = self.get(fork_id)
        if fork.state != "interrupted":
            raise protocol.CovenError(
                protocol.ErrorCode.InvalidState,
                f"{method}: fork {fork_id} is {fork.state}; only a fork interrupted by a "
                "server restart can be resumed or abandoned.",
                {"forkId": fork_id, "state": fork.state},
            )
        return fork

    def forget(self, session_ids: list[str]) -> None:
        gone = set(session_ids)
        for fork_id in [f.id for f in self.forks.values() if f.parent.id in gone]:
            del self.forks[fork_id]


def _stored_state(value: str) -> ForkState:
    for state in FORK_STATES:
        if state == value:
            return state
    raise ValueError(f"the store has a fork in an unknown state {value!r}")


def _not_resumed(child: Session, reason: str) -> None:
    """A child that cannot run again ends `failed` without starting, like one whose worktree
    setup failed: its task's error in `<fork-results>` is the real reason (not "cancelled by the
    user"), and a message to it tries again."""
    if child.closed:
        return
    child.emit(events.Error(message=f"The child could not resume: {reason}"))
    child.last_outcome = Outcome(ok=False, error=f"could not resume: {reason}")
    child.set_status("failed")


def _seconds(child: Session) -> float | None:
    """How long the child has run since it started (None: it has not)."""
    if child.started_at is None:
        return None
    return anyio.current_time() - child.started_at


def _pending(child: Session) -> bool:
    return child.changes is not None and child.changes.merge == "pending"


def _refs(children: list[Session]) -> list[events.ChildRef]:
    return [events.ChildRef(sessionId=c.id, label=c.label or "") for c in children]


def results_reached(store: Store, rows: list[dict[str, Any]]) -> set[str]:
    """Of the finished forks among these rows, those whose parent's log shows it was given
    their results. Blocking (it reads the store): a few indexed lookups per finished fork, never
    a whole log."""
    reached = set()
    for row in rows:
        if row["state"] != "finished":
            continue
        parent = row["parent_id"]
        finished = store.first_seq(parent, (Kind.FORK_FINISHED,), {"forkId": row["fork_id"]})
        if (
            finished is not None
            and store.first_seq(parent, (Kind.PROMPT,), {"origin": "forkResults"}, finished)
            is not None
        ):
            reached.add(row["fork_id"])
    return reached
