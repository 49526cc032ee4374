"""Each worktree child's environment, made between "its worktree exists" and "its agent starts":
the `.worktreeinclude` copies (`worktree_env`), its ports (`ports`), the worktree setup
(`worktree_setup`, asked about once per fork when it comes from the repository), and the
variables its setup and its agent get:

- `COVEN_ROOT_PATH`: the parent's repository (its top folder)
- `COVEN_WORKTREE_PATH`: the child's worktree
- `COVEN_CHILD_INDEX`: its task's number, from 1
- `COVEN_PORT`: the first of the 10 ports reserved for it while it runs (a turn sent to it after
  its fork's work is over gets a block of its own for as long as its agent runs: `later_turn`)

What the repository's environment holds (the copies, the notices, which setup) is decided once
per fork, for all its children; the copies and the setup run per child, side by side.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import msgspec

from ...protocol import events
from ..agent import Decision
from ..session import Outcome, Session
from ..store import default_state_dir
from ..workspace import env_rewrite, worktree_env, worktree_setup
from ..workspace.commits import commit_all, own_git_dir
from ..workspace.git import GitError
from ..workspace.ports import PORTS, PortBlocks

log = logging.getLogger(__name__)

# Asks the user a yes/no question as a tool permission (the hub's `ask_permission`).
Asker = Callable[[Session, str, dict[str, Any], str | None], Awaitable[Decision]]

# In a worktree's own git folder once its environment is made: a resumed child is not set up twice.
READY_RECORD = "coven-env-ready"
# In a worktree's own git folder while its setup runs: the setup's process group, which a server
# killed meanwhile leaves running (its own session: it outlives the server) for the next to stop.
SETUP_PID_RECORD = "coven-setup.pid"

# How often a running setup looks whether its child was cancelled meanwhile.
_CANCEL_POLL_SECONDS = 0.2


@dataclass
class _ForkPlan:
    """What every child of one fork gets."""

    entries: list[str] = field(default_factory=list)
    digest: str | None = None
    """what the entries are in the parent now (`worktree_env.manifest`): copies a pool's spare
    came with are used only when they were made of exactly this"""
    notices: list[str] = field(default_factory=list)
    setup: worktree_setup.Setup | None = None


class ChildEnvironments:
    def __init__(self, ask: Asker, ports: PortBlocks = PORTS) -> None:
        self._ask = ask
        self._ports = ports
        self._held: dict[str, int] = {}  # child session id -> its first port
        self._plans: dict[str, _ForkPlan] = {}
        self._planning: dict[str, anyio.Lock] = {}

    async def ready(
        self, fork_id: str, parent: Session, child: Session, index: int, setup_value: str | None
    ) -> bool:
        """Make the child's environment; False when it must not start (its setup failed: it has
        ended `failed` with the setup's output in its error; or it was cancelled meanwhile)."""
        tree = child.worktree
        try:
            port = self._ports.reserve()
        except OSError as exc:
            await self._fail(child, f"no ports could be reserved for it: {exc}")
            return False
        self._held[child.id] = port
        if tree is None:
            # Sharing the parent's folder: no copies, no setup, but ports of its own all the same.
            folder = child.config.cwd
            child.add_env(
                {
                    "COVEN_ROOT_PATH": folder,
                    "COVEN_WORKTREE_PATH": folder,
                    "COVEN_CHILD_INDEX": str(index),
                    "COVEN_PORT": str(port),
                }
            )
            return True
        variables = {
            "COVEN_ROOT_PATH": tree.repository,
            "COVEN_WORKTREE_PATH": tree.path,
            "COVEN_CHILD_INDEX": str(index),
            "COVEN_PORT": str(port),
        }
        made = await anyio.to_thread.run_sync(_made, tree.path)
        if made is not None:
            # Resumed: its copies and setup are there already; the variables of the tool its
            # setup came from are given again (with its new port).
            variables.update(worktree_setup.tool_env(made, tree.repository, tree.path, port))
            child.add_env(variables)
            return True
        began = time.monotonic()
        await anyio.to_thread.run_sync(stop_leftover_setup, tree.path)
        plan = await self._plan(fork_id, parent, child, setup_value)
        top = Path(tree.repository)
        try:
            report = await anyio.to_thread.run_sync(
                worktree_env.prepare_copies, top, Path(tree.path), plan.entries, plan.digest
            )
        except (OSError, GitError) as exc:
            # Half a dependency folder would fail in ways far from the cause: say it plainly.
            why = exc.message if isinstance(exc, GitError) else str(exc)
            await self._fail(
                child, f"the files {worktree_env.INCLUDE_FILE} lists could not be copied: {why}"
            )
            return False
        notices = list(plan.notices) + report.warnings
        try:
            # The copies made the child's own: its venv runs its worktree's code, not the parent's.
            rewrite = await anyio.to_thread.run_sync(
                env_rewrite.rewrite_copies,
                Path(tree.path),
                report.entries,
                top,
                report.parent_links,
            )
        except OSError as exc:
            rewrite = env_rewrite.RewriteReport(
                notices=[
                    f"The copies still point at {top} in places (their scripts and editable "
                    f"installs may run the parent's code): rewriting them failed: {exc}"
                ]
            )
        notices += rewrite.notices
        setup = plan.setup
        if setup is not None:
            variables.update(setup.tool_env(tree.repository, tree.path, port))
        if report.entries or notices or setup is not None:
            child.emit(
                events.WorktreeEnv(
                    port=port,
                    childIndex=index,
                    copied=report.entries or None,
                    copiedFiles=report.files if report.entries else None,
                    copiedBytes=report.bytes if report.entries else None,
                    clonedFiles=report.cloned if report.entries else None,
                    copiedAhead=True if report.reused else None,
                    rewritten=rewrite.rewritten or None,
                    notices=notices or None,
                    setup=setup.command if setup else None,
                    setupSource=setup.source if setup else None,
                    setupFile=setup.file if setup else None,
                )
            )
        log.info(
            "child %s: environment in %.2f s (%s, %s rewritten)",
            index,
            time.monotonic() - began,
            "copies made ahead" if report.reused else f"{report.files} files copied",
            rewrite.files,
        )
        if setup is not None and not await self._set_up(child, setup, variables):
            return False
        await anyio.to_thread.run_sync(_mark_made, tree.path, setup.source if setup else "")
        child.add_env(variables)
        return True

    @staticmethod
    async def _fail(child: Session, error: str) -> None:
        """The child cannot start: like a child whose turn failed, it ends `failed` with the
        reason as its task's error (and stays: a message to it tries again)."""
        if not child.closed:
            child.emit(events.Error(message=f"The child could not start: {error}"))
            child.last_outcome = Outcome(ok=False, error=error)
            child.set_status("failed")

    def release(self, child: Session) -> None:
        """The child's fork work is over: its ports go back."""
        port = self._held.pop(child.id, None)
        if port is not None:
            self._ports.release(port)

    @asynccontextmanager
    async def later_turn(self, child: Session) -> AsyncIterator[None]:
        """A turn of a child whose fork work is over (a follow-up sent to it later): its block was
        freed when that work ended, and another child may hold it now, so it gets a block of its
        own while its agent runs (`COVEN_PORT`, and the variables of the tool its setup came from
        that follow it), given back with the agent. A child still at its fork's work keeps its
        block."""
        if child.id in self._held:
            yield
            return
        port = await anyio.to_thread.run_sync(self._ports.reserve)
        self._held[child.id] = port
        try:
            variables = {"COVEN_PORT": str(port)}
            tree = child.worktree
            made = None if tree is None else await anyio.to_thread.run_sync(_made, tree.path)
            if tree is not None and made is not None:
                variables.update(worktree_setup.tool_env(made, tree.repository, tree.path, port))
            child.add_env(variables)
            yield
        finally:
            self.release(child)

    def forget(self, fork_id: str) -> None:
        self._plans.pop(fork_id, None)
        self._planning.pop(fork_id, None)

    async def _plan(
        self, fork_id: str, parent: Session, child: Session, setup_value: str | None
    ) -> _ForkPlan:
        async with self._planning.setdefault(fork_id, anyio.Lock()):
            plan = self._plans.get(fork_id)
            if plan is None:
                plan = await self._make_plan(parent, child, setup_value)
                self._plans[fork_id] = plan
            return plan

    async def _make_plan(
        self, parent: Session, child: Session, setup_value: str | None
    ) -> _ForkPlan:
        assert child.worktree is not None
        top = Path(child.worktree.repository)
        plan = _ForkPlan()
        try:
            plan.entries = await anyio.to_thread.run_sync(worktree_env.included, top)
            if plan.entries:
                now = time.time()
                plan.digest = await anyio.to_thread.run_sync(
                    worktree_env.manifest, top, plan.entries, now
                )
            plan.notices = await anyio.to_thread.run_sync(worktree_env.left_out, top)
        except (GitError, OSError) as exc:
            why = exc.message if isinstance(exc, GitError) else str(exc)
            plan.notices.append(f"{worktree_env.INCLUDE_FILE} could not be read: {why}")
        value = child.config.worktree_setup if setup_value is None else setup_value
        try:
            setup = worktree_setup.resolve(value, top)
        except (worktree_setup.SetupFileError, OSError) as exc:
            plan.notices.append(f"No worktree setup runs: {exc}")
            return plan
        if setup is not None and setup.from_repository:
            allowed, why = await self._allowed(parent, child, setup, top)
            if not allowed:
                plan.notices.append(
                    f"The worktree setup in {setup.file} did not run: {why}. It runs once you "
                    "allow it (you are asked at the next fork)."
                )
                return plan
        plan.setup = setup
        return plan

    async def _allowed(
        self, parent: Session, child: Session, setup: worktree_setup.Setup, top: Path
    ) -> tuple[bool, str]:
        state = Path(child.config.state_dir).expanduser() if child.config.state_dir else None
        approvals = worktree_setup.Approvals(state or default_state_dir())
        repository = str(top)
        known = await anyio.to_thread.run_sync(approvals.answer, repository, setup)
        if known is not None:
            return known, "you refused it before (it is asked again when it changes)"
        question: dict[str, Any] = {
            "command": setup.command,
            "source": setup.source,
            "file": setup.file,
            "repository": repository,
        }
        if setup.script is not None:
            question["script"] = setup.content.split("\n", 1)[1]
        parent.emit(events.PermissionRequest(toolName=worktree_setup.APPROVAL_TOOL, input=question))
        answer = await self._ask(parent, worktree_setup.APPROVAL_TOOL, question, None)
        allow, message = answer[0], answer[1]
        parent.emit(
            events.PermissionDecision(
                toolName=worktree_setup.APPROVAL_TOOL,
                allow=allow,
                message=None if allow else message,
            )
        )
        # "Denied: ..." is nobody's answer (no editor, no terminal, a timeout, a dismissed
        # question): asked again next time. A yes or a user's no is remembered.
        if allow or not message.startswith("Denied:"):
            try:
                await anyio.to_thread.run_sync(approvals.remember, repository, setup, allow)
            except OSError:
                log.warning("could not remember the answer in %s", approvals.path, exc_info=True)
        return allow, "refused" if not allow and not message.startswith("Denied:") else message

    async def _set_up(
        self, child: Session, setup: worktree_setup.Setup, variables: dict[str, str]
    ) -> bool:
        tree = child.worktree
        assert tree is not None
        result: worktree_setup.SetupRun | None = None

        def output(text: str) -> None:
            child.emit(events.SetupOutput(text=text))

        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                # A session says when it has closed, not when it starts closing (a cancel).
                while not child.closed:  # noqa: ASYNC110
                    await anyio.sleep(_CANCEL_POLL_SECONDS)
                tg.cancel_scope.cancel()

            async def run() -> None:
                nonlocal result
                result = await worktree_setup.run(
                    setup,
                    tree.path,
                    variables,
                    child.config.worktree_setup_timeout,
                    output,
                    on_start=lambda pid: _record_setup(tree.path, pid),
                )
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            tg.start_soon(run)
        await anyio.to_thread.run_sync(_record_setup, tree.path, None)
        if result is None:
            return False  # cancelled while it ran: the child has ended already
        child.emit(
            events.SetupEnded(
                ok=result.ok,
                durationMs=result.duration_ms,
                exitCode=result.exit_code,
                error=result.error,
            )
        )
        if not result.ok:
            await self._fail(child, result.error or "the worktree setup failed")
            return False
        # What the setup changed (a lockfile) is where the child starts, not work it merges back.
        try:
            commit = await anyio.to_thread.run_sync(commit_all, tree.path, "coven: worktree setup")
        except GitError as exc:
            log.warning("session %s: the setup's changes could not be committed: %s", child.id, exc)
            child.emit(events.Error(message=f"The setup's changes could not be kept apart: {exc}"))
            return True
        if commit is not None:
            child.worktree = msgspec.structs.replace(tree, base=commit)
        return True


def _git_dir(path: str) -> Path:
    """A linked worktree's own git folder, from its `.git` file (no git: this runs on the event
    loop at a restart)."""
    text = (Path(path) / ".git").read_text(encoding="utf-8").strip()
    if not text.startswith("gitdir:"):
        raise OSError(f"{path}/.git does not name a worktree's git folder")
    return Path(path) / text.split(":", 1)[1].strip()


def _record_setup(path: str, pid: int | None) -> None:
    try:
        record = _git_dir(path) / SETUP_PID_RECORD
        if pid is None:
            record.unlink(missing_ok=True)
        else:
            record.write_text(str(pid))
    except OSError:
        log.warning("could not record the setup's process in %s", path, exc_info=True)


def stop_leftover_setup(path: str) -> None:
    """Stop the setup a killed server left running in this worktree, if any (blocking)."""
    try:
        record = _git_dir(path) / SETUP_PID_RECORD
        pgid = int(record.read_text())
    except (OSError, ValueError):
        return  # none recorded (or the worktree is gone)
    if worktree_setup.stop_leftover(pgid, path):
        log.info("stopped the worktree setup a stopped server left running in %s", path)
    record.unlink(missing_ok=True)


def _made(path: str) -> str | None:
    """None when the worktree's environment was never made; else the source of the setup that
    made it (`cursor`, `conductor`, `option`; empty: none ran)."""
    try:
        return (own_git_dir(Path(path)) / READY_RECORD).read_text(encoding="utf-8")
    except (GitError, FileNotFoundError):
        return None
    except OSError:
        return ""


def _mark_made(path: str, source: str) -> None:
    (own_git_dir(Path(path)) / READY_RECORD).write_text(source, encoding="utf-8")
