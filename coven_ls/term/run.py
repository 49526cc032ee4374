"""`coven-ls run "prompt"`: one agent session from the terminal, through coven-ls.

The same LSP client as the demo (`CovenClient`), against the user's own Claude setup: the server
it starts runs `claude` with this process's environment, so whatever makes `claude` work in this
shell (a login, `ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL`, ...) works here.

- The session's tree streams to stdout, the model's text as it writes it (`coven/delta`); at the
  end, the tokens and cost of the whole tree. With `--json`, one `coven/event` per line instead
  (and with `--deltas`, the streamed pieces as `{"delta": …}` lines among them); the usage line
  then goes to stderr.
- A proposed fork asks y/n/e/l (e: type a new task list; l: limits for this fork, as
  coven/decideFork takes them); a tool that needs permission asks y/n;
  with `--merge review`, each fork child whose changes wait asks y/n (apply them to the working
  tree, or discard them: they stay on the child's branch). Questions go to stderr, one at a time,
  and are answered with a line on stdin.
- When stdin is not a terminal nothing is asked: forks are rejected, tools denied (the model is
  told why) and reviewed changes discarded. `--yes` approves every fork, allows every tool and
  applies every change, terminal or not.
- When a fork whose children worked in worktrees ends, one line per child says what became of
  its changes (applied, conflict, discarded, kept, unchanged); with `--json` those lines go to
  stderr, stdout being for events only.
- Ctrl+C cancels the running fork or turn (as `coven/cancel` does); a second Ctrl+C quits: the
  server closes every session and exits, so no process is left behind.
- It ends when the session settles: the first turn, and any fork and reintegration turn it led
  to, are over, and so are the CLI's background tasks (subagents) and the turns it starts to
  report them. Exit code 0; 1 when the session's last turn failed; 2 when it could not start;
  130 after Ctrl+C.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeVar

import msgspec
from pygls.exceptions import JsonRpcException

from .. import protocol
from ..protocol import Kind
from ..protocol.describe import change_counts, one_line, summarize_input
from ..protocol.types import Isolation, MergeMode, Usage
from . import options
from .agents import unknown_agent
from .client import CovenClient, PermissionAnswer
from .limits import EXAMPLE, LimitsError, limits_text, parse_limits
from .render import TreePrinter, estimate_lines, file_listing, merge_summary

T = TypeVar("T")

EXIT_OK, EXIT_FAILED, EXIT_NOT_STARTED, EXIT_INTERRUPTED = 0, 1, 2, 130

# Statuses in which a session runs nothing: once the root is in one with nothing queued, the
# run is over.
SETTLED = frozenset({"idle", "failed", "cancelled", "closed", "interrupted"})
# Statuses after which the CLI starts no turn of its own (its process is gone).
CLI_GONE = frozenset({"failed", "cancelled", "closed", "interrupted"})
TASK_ENDED = frozenset({"completed", "failed", "stopped"})
# After a background task ends the CLI starts a turn by itself to report it; the server shows the
# session idle (no task running, nothing queued) until that turn starts, a fraction of a second
# later. The run waits this long for it before it takes the idle session as settled.
REPORT_TURN_GRACE = 15.0

# What the model is told when nobody could be asked (stdin is not a terminal, no --yes).
NO_TERMINAL_DENIAL = (
    "Denied: coven-ls run has no terminal to ask the user, so tools that need permission are "
    "denied. Do without this tool, or the user can rerun with --yes or a --permission-mode that "
    "allows it."
)
NO_TERMINAL_FORK_REASON = (
    "coven-ls run has no terminal to ask the user, so forks are not approved (--yes approves them)"
)


@dataclass(frozen=True)
class RunOptions:
    prompt: str
    cwd: str
    fork_mode: protocol.ForkMode | None = None
    model: str | None = None
    permission_mode: protocol.PermissionMode | None = None
    as_json: bool = False
    json_deltas: bool = False
    yes: bool = False
    merge_mode: MergeMode | None = None
    isolation: Isolation | None = None
    worktree_setup: str | None = None
    agent: protocol.AgentName | None = None
    # For the forks the user approves: what the children start from, which agent runs them.
    fork_context: protocol.ForkContext | None = None
    fork_agent: protocol.AgentName | None = None

    def approval(self) -> dict[str, Any]:
        """What an approval (coven/decideFork) adds to the fork: only what was given."""
        choices: dict[str, Any] = {}
        if self.fork_context is not None:
            choices["context"] = self.fork_context
        if self.fork_agent is not None:
            choices["agent"] = self.fork_agent
        return choices

    fork_limits: dict[str, float | int] = field(default_factory=dict)  # forkLimits given
    agents: dict[str, Any] | None = None  # initializationOptions.agents given (--agents)

    def init_options(self) -> dict[str, Any]:
        """The server's initializationOptions: only what was given, so its defaults apply."""
        options: dict[str, Any] = {}
        if self.merge_mode is not None:
            options["mergeMode"] = self.merge_mode
        if self.isolation is not None:
            options["forkIsolation"] = self.isolation
        if self.worktree_setup is not None:
            options["worktreeSetup"] = self.worktree_setup
        if self.fork_limits:
            options["forkLimits"] = dict(self.fork_limits)
        if self.agents is not None:
            options["agents"] = self.agents
        return options


class Terminal:
    """The user's side of the questions: lines read from stdin without a thread (an asyncio
    reader on the descriptor), so a pending question never keeps the process from quitting."""

    def __init__(self, *, interactive: bool, yes: bool, out: TextIO, fd: int = 0) -> None:
        self.interactive = interactive
        self.yes = yes
        self.lock = asyncio.Lock()  # one question at a time: hold it across a whole dialogue
        self._out = out
        self._fd = fd
        self._lines: deque[str] = deque()
        self._partial = b""
        self._eof = False
        self._interrupted = False
        self._waiter: asyncio.Future[str | None] | None = None
        # Called before anything is written: ends a line of streamed text on the same screen.
        self.before_output: Callable[[], None] | None = None

    def say(self, text: str) -> None:
        self._before()
        self._out.write(text + "\n")
        self._out.flush()

    def _before(self) -> None:
        if self.before_output is not None:
            self.before_output()

    async def ask(
        self, question: str, choices: str, default: str, *, always_ask: bool = False
    ) -> str | None:
        """One of `choices` (letters); `default` when there is no terminal or at end of input;
        None when the user pressed Ctrl+C instead of answering. `always_ask`: --yes does not
        answer it."""
        self._interrupted = False
        if self.yes and not always_ask:
            self.say(f"{question} → y (--yes)")
            return "y"
        if not self.interactive:
            self.say(f"{question} → {default} (stdin is not a terminal; --yes answers y)")
            return default
        while True:
            self._before()
            self._out.write(f"{question} [{'/'.join(choices)}] ")
            self._out.flush()
            line = await self._readline()
            if line is None:
                self.say("")
                return None if self._interrupted else default
            answer = line.strip().lower()[:1]
            if answer and answer in choices:
                return answer
            self.say(f"Please answer {' or '.join(choices)}.")

    async def read_line(self, prompt: str) -> str | None:
        """One line of text (None after Ctrl+C or at end of input)."""
        self.say(prompt)
        self._before()
        self._out.write("  > ")
        self._out.flush()
        line = await self._readline()
        if line is None:
            self.say("")
        return line

    async def read_list(self, prompt: str) -> list[str] | None:
        """Lines up to an empty one (None after Ctrl+C)."""
        self.say(prompt)
        items: list[str] = []
        while True:
            self._before()
            self._out.write("  > ")
            self._out.flush()
            line = await self._readline()
            if line is None:
                self.say("")
                return None if self._interrupted else items
            if not line.strip():
                return items
            items.append(line.strip())

    def interrupt(self) -> None:
        """Ctrl+C: the pending question ends unanswered and typed-ahead input is dropped."""
        self._interrupted = True
        self._lines.clear()
        self._partial = b""
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _readline(self) -> str | None:
        if self._lines:
            return self._lines.popleft()
        if self._eof:
            return None
        loop = asyncio.get_running_loop()
        self._waiter = loop.create_future()
        loop.add_reader(self._fd, self._on_readable)
        try:
            return await self._waiter
        finally:
            loop.remove_reader(self._fd)
            self._waiter = None

    def _on_readable(self) -> None:
        try:
            data = os.read(self._fd, 4096)
        except OSError:  # the terminal went away
            data = b""
        if not data:
            self._eof = True
        else:
            *lines, self._partial = (self._partial + data).split(b"\n")
            self._lines.extend(line.decode(errors="replace") for line in lines)
        if self._waiter is not None and not self._waiter.done():
            if self._lines:
                self._waiter.set_result(self._lines.popleft())
            elif self._eof:
                self._waiter.set_result(None)


class Runner:
    """One `coven-ls run`: start the server, start the session, answer its questions, follow its
    tree until it settles or the user quits."""

    def __init__(self, options: RunOptions, out: TextIO, terminal: Terminal) -> None:
        self._options = options
        self._terminal = terminal
        self.client = CovenClient(
            on_event=self._on_event,
            on_permission=self._on_permission,
            handles_forks=True,
            handles_review=True,
            on_delta=self._on_delta,
        )
        self._printer = TreePrinter(
            out, as_json=options.as_json, full_text=True, json_deltas=options.json_deltas
        )
        if not options.as_json and _is_tty(out):
            # A question on the same screen ends the line of text that is streaming.
            terminal.before_output = self._printer.break_line
        self.root: str | None = None
        # Events and deltas that came before startSession answered: (is it a delta, params).
        self._early: list[tuple[bool, dict[str, Any]]] = []
        self._ours: set[str] = set()  # the root and its fork children, and theirs
        self._names: dict[str, str] = {}
        self._root_status = "starting"
        self._last_result: dict[str, Any] | None = None
        # A background task of the root ended and the turn the CLI starts to report it has not.
        self._report_due = False
        self._report_started = asyncio.Event()
        self._sessions: list[dict[str, Any]] = []  # coven/listSessions when the run settled
        self._settled = asyncio.Event()
        self._quit = asyncio.Event()
        self._interrupts = 0
        self._tasks: set[asyncio.Task[None]] = set()

    # --- the run ---------------------------------------------------------------------------------

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, self._on_interrupt)
        loop.add_signal_handler(signal.SIGTERM, self._quit.set)
        try:
            return await self._run()
        finally:
            for task in self._tasks:
                task.cancel()
            # Ordered: shutdown closes every session (their CLI processes end), then exit.
            await self.client.stop()
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_signal_handler(signal.SIGTERM)

    async def _run(self) -> int:
        options = self._options
        await self.client.start(
            Path(options.cwd), init_options=options.init_options(), own_session=True
        )
        for flag, name in (("--agent", options.agent), ("--fork-agent", options.fork_agent)):
            if name is not None and (problem := unknown_agent(name, self.client.agents)):
                self._terminal.say(f"coven-ls run: {flag} {name}: {problem}")
                return EXIT_NOT_STARTED
        params: dict[str, Any] = {"prompt": options.prompt, "cwd": options.cwd}
        for key, value in (
            ("forkMode", options.fork_mode),
            ("model", options.model),
            ("permissionMode", options.permission_mode),
            ("agent", options.agent),
        ):
            if value is not None:
                params[key] = value
        try:
            started = await self._until_quit(self.client.request(protocol.START_SESSION, params))
        except JsonRpcException as exc:
            self._terminal.say(f"coven-ls run: {exc.message}")
            return EXIT_NOT_STARTED
        if started is None:
            return EXIT_INTERRUPTED
        self.root = started["sessionId"]
        self._ours.add(self.root)
        self._names[self.root] = one_line(options.prompt, 80)
        self._printer.add_session(self.root, self._names[self.root])
        for is_delta, params in self._early:
            (self._take_delta if is_delta else self._take)(params)
        self._early.clear()

        server_exit = asyncio.ensure_future(self.client.wait_server_exit())
        settled = asyncio.ensure_future(self._settled.wait())
        quit_ = asyncio.ensure_future(self._quit.wait())
        try:
            await asyncio.wait([server_exit, settled, quit_], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for future in (server_exit, settled, quit_):
                future.cancel()
        if self._quit.is_set() or self._interrupts:
            return EXIT_INTERRUPTED
        if not self._settled.is_set():
            tail = "\n".join(self.client.server_stderr)
            self._terminal.say(f"coven-ls run: the server stopped unexpectedly.\n{tail}")
            return EXIT_FAILED
        self._print_usage()
        result = self._last_result
        if self._root_status == "failed" or (result is not None and result.get("isError")):
            return EXIT_FAILED
        return EXIT_OK

    def _print_usage(self) -> None:
        """The tokens and cost of the session and everything forked from it."""
        by_id = {s["sessionId"]: s for s in self._sessions}
        root = by_id.get(self.root or "")
        if root is None:
            return
        tree = [s for s in self._sessions if s["sessionId"] in self._ours]
        line = usage_line(
            msgspec.convert(root.get("treeUsage") or {}, Usage),
            sum(float(s.get("costUsd") or 0) for s in tree),
            len(tree),
        )
        if self._options.as_json:
            self._terminal.say(line)  # stdout is for events only
        else:
            self._printer.note(line)

    async def _until_quit(self, work: Awaitable[T]) -> T | None:
        """`work`'s result, or None if the user quits first."""
        task = asyncio.ensure_future(work)
        quit_ = asyncio.ensure_future(self._quit.wait())
        await asyncio.wait([task, quit_], return_when=asyncio.FIRST_COMPLETED)
        quit_.cancel()
        if task.done():
            return task.result()
        task.cancel()
        return None

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task.cancelled() or task.exception() is None:
            return
        # While quitting, requests fail because the connection is going: not worth a word.
        if not self._quit.is_set():
            self._terminal.say(f"coven-ls run: {task.exception()!r}")

    # --- Ctrl+C ----------------------------------------------------------------------------------

    def _on_interrupt(self) -> None:
        self._interrupts += 1
        self._terminal.interrupt()
        if self._interrupts == 1 and self.root is not None and not self._settled.is_set():
            self._terminal.say("^C cancelling (press Ctrl+C again to quit)")
            self._spawn(self._cancel())
        elif not self._quit.is_set():
            self._terminal.say("^C quitting: closing the session")
            self._quit.set()

    async def _cancel(self) -> None:
        # coven/cancel on the root does the right thing for what it is doing: it withdraws a
        # proposed fork, cancels a running fork (the parent then gets the finished results),
        # or interrupts a turn.
        try:
            await self.client.request(protocol.CANCEL, {"sessionId": self.root})
        except JsonRpcException as exc:
            self._terminal.say(f"coven-ls run: could not cancel: {exc.message}")

    # --- events ----------------------------------------------------------------------------------

    def _on_event(self, event: dict[str, Any]) -> None:
        if self.root is None:
            self._early.append((False, event))
        else:
            self._take(event)

    def _on_delta(self, delta: dict[str, Any]) -> None:
        if self.root is None:
            self._early.append((True, delta))
        else:
            self._take_delta(delta)

    def _take_delta(self, delta: dict[str, Any]) -> None:
        if delta["sessionId"] in self._ours and not self._settled.is_set():
            self._printer.delta(delta)

    def _take(self, event: dict[str, Any]) -> None:
        sid, kind = event["sessionId"], event["kind"]
        if sid not in self._ours:
            return  # another client's session on a shared server
        if self._settled.is_set():
            return  # the run is over; what shutting down does to the sessions is not news
        self._printer(event)
        if sid == self.root:
            self._follow_reports(event)
        if kind == Kind.FORK_STARTED:
            for child in event["children"]:
                self._ours.add(child["sessionId"])
                self._names[child["sessionId"]] = child["label"]
        elif kind == Kind.FORK_PROPOSED:
            self._spawn(self._decide_fork(event))
        elif kind == Kind.FORK_REVIEWING:
            self._spawn(self._review(event))
        elif kind == Kind.FORK_FINISHED and self._options.as_json:
            # The tree prints this summary itself; with --json, stdout is for events only.
            for line in merge_summary(self._printer.tree, event["forkId"]):
                self._terminal.say(line)
        elif sid == self.root and kind == Kind.TURN_RESULT:
            self._last_result = event
        elif sid == self.root and kind == Kind.STATUS:
            self._root_status = event["status"]
            if event["status"] in SETTLED:
                self._spawn(self._check_settled())

    def _follow_reports(self, event: dict[str, Any]) -> None:
        """Whether the CLI owes the root a turn of its own, to report a background task that
        ended (it starts one for every task that ends, unless its process is gone)."""
        kind = event["kind"]
        if kind == Kind.TASK and event.get("status") in TASK_ENDED:
            self._report_due = True
            self._report_started.clear()
        elif kind == Kind.PROMPT and event.get("origin") == "task":
            self._report_due = False
            self._report_started.set()
        elif kind == Kind.STATUS and event["status"] in CLI_GONE:
            self._report_due = False

    async def _check_settled(self) -> None:
        # `idle` is not the end when a turn is already queued behind it (the follow-up to a
        # rejected fork or a refused fork tag), or background tasks still run: ask the server,
        # whose answer is consistent.
        sessions = (await self.client.request(protocol.LIST_SESSIONS, {}))["sessions"]
        info = next((s for s in sessions if s["sessionId"] == self.root), None)
        if info is not None and (
            info["status"] not in SETTLED or info.get("queued") or info.get("backgroundTasks")
        ):
            return
        if info is not None and info["status"] == "idle" and self._report_due:
            # A task ended: the turn that reports it comes next. Its `running` status checks
            # again; if it never starts, the run ends all the same.
            try:
                await asyncio.wait_for(self._report_started.wait(), REPORT_TURN_GRACE)
                return
            except asyncio.TimeoutError:
                sessions = (await self.client.request(protocol.LIST_SESSIONS, {}))["sessions"]
        if not self._settled.is_set():
            self._sessions = sessions
            self._settled.set()

    # --- questions -------------------------------------------------------------------------------

    async def _on_permission(self, request: dict[str, Any]) -> PermissionAnswer:
        name = self._names.get(request["sessionId"], request["sessionId"])
        if request["toolName"] == protocol.WORKTREE_SETUP_TOOL:
            return await self._on_setup(request)
        question = (
            f"Allow {request['toolName']} in '{one_line(name, 40)}': "
            f"{summarize_input(request.get('input') or {}, 120)}?"
        )
        choices = options.offered(request)
        if choices:
            # The agent's own answers; no terminal picks the first that rejects.
            keys = options.KEYS[: len(choices)]
            async with self._terminal.lock:
                answer = await self._terminal.ask(
                    f"{question}\n  {options.listing(choices)}", keys, options.rejecting(choices)
                )
            if answer == "y":  # --yes: allow once
                return {"allow": True}
            if answer is None:
                return {"allow": False, "message": "Denied: the user pressed Ctrl+C."}
            if not self._terminal.interactive:
                return {"allow": False, "message": NO_TERMINAL_DENIAL}
            return options.answer(choices, answer)
        async with self._terminal.lock:
            answer = await self._terminal.ask(question, "yn", default="n")
        if answer == "y":
            return {"allow": True}
        if answer is None:
            return {"allow": False, "message": "Denied: the user pressed Ctrl+C."}
        if not self._terminal.interactive:
            return {"allow": False, "message": NO_TERMINAL_DENIAL}
        return {"allow": False, "message": "Denied by the user."}

    async def _on_setup(self, request: dict[str, Any]) -> PermissionAnswer:
        """A repository's worktree setup runs commands nobody typed: shown whole and asked, even
        with --yes (the answer is remembered per repository and content)."""
        setup = request.get("input") or {}
        script = setup.get("script")
        question = (
            f"The repository's worktree setup ({setup.get('file')}) runs before each fork "
            f"child starts:\n  {setup.get('command')}"
            + (f"\n--- its script ---\n{script}" if script else "")
            + "\nAllow it?"
        )
        async with self._terminal.lock:
            answer = await self._terminal.ask(question, "yn", default="n", always_ask=True)
        if answer == "y":
            return {"allow": True}
        if answer is None or not self._terminal.interactive:
            return {"allow": False, "message": "Denied: nobody could be asked in the terminal."}
        return {"allow": False, "message": "Refused by the user."}

    async def _cost_lines(self, event: dict[str, Any], tasks: list[str], edited: bool) -> str:
        """The question's context and cost lines for what an approval would start: the
        proposal's estimate, or, with other tasks or --fork-context/--fork-agent, the server's
        (coven/estimateFork prices them as it priced the proposal)."""
        choices = self._options.approval()
        if not choices and not edited:
            return estimate_lines(event, len(tasks))
        params: dict[str, Any] = {"forkId": event["forkId"], **choices}
        if edited:
            params["tasks"] = tasks
        try:
            answer = await self.client.request(protocol.ESTIMATE_FORK, params)
        except JsonRpcException:
            # Choices the server refuses: the approval says why; until then, the proposal's.
            return estimate_lines(event, len(tasks))
        return estimate_lines(answer, len(tasks))

    async def _decide_fork(self, event: dict[str, Any]) -> None:
        name = self._names.get(event["sessionId"], event["sessionId"])
        tasks: list[str] = list(event["tasks"])
        edited = False
        limits: dict[str, int | float] = {}  # for this fork, over the session's (l)
        async with self._terminal.lock:
            while True:
                listing = "\n".join(f"  {n}. {task}" for n, task in enumerate(tasks, 1))
                count = f"{len(tasks)} parallel task{'s' if len(tasks) != 1 else ''}"
                limited = f"Limits for this fork: {limits_text(limits)}\n" if limits else ""
                answer = await self._terminal.ask(
                    f"Claude proposes to fork '{one_line(name, 40)}' into {count}:\n{listing}\n"
                    f"{await self._cost_lines(event, tasks, edited)}{limited}"
                    "Approve the fork? (e: edit the tasks, l: set its limits)",
                    "ynel",
                    default="n",
                )
                if answer is None:
                    return  # Ctrl+C: the cancel that follows withdraws the proposal
                if answer == "l":
                    typed_limits = await self._terminal.read_line(
                        "Limits for this fork's children, name=value (e.g. "
                        f"{EXAMPLE}; 0: no limit; one left out: the session's):"
                    )
                    if typed_limits is None:
                        return
                    try:
                        limits.update(parse_limits(typed_limits))
                    except LimitsError as exc:
                        self._terminal.say(str(exc))
                    continue
                if answer == "e":
                    typed = await self._terminal.read_list(
                        "Type the tasks, one per line; an empty line ends the list:"
                    )
                    if typed is None:
                        return
                    if typed:
                        tasks, edited = typed, True
                    continue
                params: dict[str, Any] = {"forkId": event["forkId"], "approve": answer == "y"}
                if answer == "y" and edited:
                    params["tasks"] = tasks
                if answer == "y":
                    params.update(self._options.approval())
                if answer == "y" and limits:
                    params["limits"] = limits
                if answer == "n":
                    params["reason"] = (
                        "rejected in the terminal"
                        if self._terminal.interactive
                        else NO_TERMINAL_FORK_REASON
                    )
                try:
                    await self.client.request(protocol.DECIDE_FORK, params)
                    return
                except JsonRpcException as exc:
                    if exc.code != protocol.ErrorCode.InvalidParams:
                        return  # withdrawn or decided meanwhile: nothing left to ask
                    self._terminal.say(exc.message)  # a bad task list: ask again

    async def _review(self, event: dict[str, Any]) -> None:
        """Ask about each child whose changes wait (in task order): y applies them to the
        working tree, n discards them (they stay on the child's branch)."""
        async with self._terminal.lock:
            for child in event["pending"]:
                try:
                    found = await self.client.request(protocol.GET_CHANGES, {"sessionId": child})
                except JsonRpcException as exc:
                    self._terminal.say(f"coven-ls run: {exc.message}")
                    continue
                changes, repository = found["changes"], found["worktree"]["repository"]
                if changes["merge"] != "pending":
                    continue  # decided meanwhile (by another client)
                name = one_line(self._names.get(child, child), 40)
                listing = "\n".join(file_listing(changes))
                answer = await self._terminal.ask(
                    f"Fork child '{name}' changed {change_counts(changes)}:\n{listing}\n"
                    f"Apply the changes to {repository}? (n: discard them)",
                    "yn",
                    default="n",
                )
                if answer is None:
                    return  # Ctrl+C: leave the rest pending
                try:
                    if answer == "y":
                        done = await self.client.request(
                            protocol.APPLY_CHANGES, {"sessionId": child}
                        )
                        self._terminal.say(applied_line(name, done["changes"]))
                    else:
                        await self.client.request(protocol.DISCARD_CHANGES, {"sessionId": child})
                except JsonRpcException as exc:
                    # Decided by someone else meanwhile: nothing left to ask about this one.
                    self._terminal.say(f"coven-ls run: {exc.message}")


def applied_line(name: str, changes: dict[str, Any]) -> str:
    """What coven/applyChanges did: applied, or nothing at all because of a conflict."""
    if changes["merge"] == "applied":
        return f"✓ applied {change_counts(changes)} from '{name}'"
    paths = ", ".join(c["path"] for c in changes.get("conflicts") or [])
    return f"✗ '{name}' conflicts with the working tree in {paths}: nothing was applied"


def usage_line(usage: Usage, cost: float, sessions: int) -> str:
    """`Σ 43,434 tokens in (24 uncached, 41,200 cache read, 2,210 cache write) · 310 out ·
    $0.0356`, and over how many sessions when a fork made more than one."""
    total_in = usage.inputTokens + usage.cacheReadTokens + usage.cacheCreationTokens
    where = f" over {sessions} sessions" if sessions > 1 else ""
    return (
        f"Σ {total_in:,} tokens in ({usage.inputTokens:,} uncached, "
        f"{usage.cacheReadTokens:,} cache read, {usage.cacheCreationTokens:,} cache write) · "
        f"{usage.outputTokens:,} out · ${cost:.4f}{where}"
    )


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def run_session(options: RunOptions) -> int:
    interactive = sys.stdin.isatty()
    terminal = Terminal(interactive=interactive, yes=options.yes, out=sys.stderr)
    runner = Runner(options, sys.stdout, terminal)
    try:
        return asyncio.run(runner.run())
    except KeyboardInterrupt:  # before the handler was installed, or after it was removed
        return EXIT_INTERRUPTED
