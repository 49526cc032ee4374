"""`coven-ls chat [PROMPT]`: a conversation with Claude Code in the terminal, through coven-ls.

The same server, store and tree rendering as `coven-ls run` (which stays as it is, for scripts);
here the session goes on: an input line stays at the bottom (prompt_toolkit: editing, history kept
across runs in a 0600 file in the state dir, completion of the commands), and what the current
session's tree does prints above it as it happens.

- Plain text goes to the current session as a follow-up (queued, and said so, when it is busy);
  the first line starts a session when there is none. A multi-line paste is one message.
- Slash commands: see `chat_commands.COMMANDS` (`/help`). `/fork "prompt"` is a branch
  (`coven/branch`: a new session with the whole conversation, which becomes the current one);
  `/fork task one; task two` is a coven fork of those tasks (`coven/fork`), and the chat stays on
  the parent.
- A permission, a proposed fork (y/n, e: edit its tasks) or a fork child's changes are asked
  inline (`chat_dialogs`): the line being typed is put aside and given back once the question
  is answered, or once it goes away because it was settled elsewhere (another client decided
  the fork or the changes; the server withdrew its permission request). A line entered just
  before its question came (a lone y, n or e up to ANSWER_GRACE_SECONDS before; anything while
  a question waits) is not sent: it is given back too, and Enter again sends it.
- `--tcp HOST:PORT` attaches to a running server (an editor's) instead of starting one: nothing
  but the token is sent at `initialize`, so none of its settings change (the sessions started
  here take the editor's options: they fork as the editor's do), and quitting only disconnects.
- Ctrl+C clears a typed line; on an empty line it cancels the current session's running turn or
  fork; twice on an idle, empty prompt it quits, as Ctrl+D and `/quit` do. Quitting shuts the
  server down in order (every CLI process ends); the sessions stay in the store for
  `coven-ls chat --resume ID`.
"""

from __future__ import annotations

import asyncio
import signal
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prompt_toolkit import PromptSession
from prompt_toolkit.history import FileHistory
from prompt_toolkit.patch_stdout import patch_stdout
from pygls.exceptions import JsonRpcException

from .. import protocol
from ..protocol import Kind
from ..protocol.describe import one_line
from ..protocol.types import Isolation, MergeMode
from . import chat_commands as cmd
from . import chat_dialogs as dialogs
from .agents import unknown_agent
from .chat_clock import WorkClock
from .chat_input import ChatOutput, CommandCompleter, history_path
from .client import CovenClient
from .render import TreePrinter

EXIT_OK, EXIT_NOT_STARTED = 0, 2
# A one-letter line that answers questions (y, n, e) waits this long for a question to come
# before it is sent as a message: typed for a question about to appear, it stays typed.
ANSWER_LETTERS = frozenset("yne")
ANSWER_GRACE_SECONDS = 0.6
BUSY = frozenset(protocol.BUSY_STATUSES)
ENDED = frozenset(protocol.FINAL_STATUSES | {"failed"})


@dataclass(frozen=True)
class ChatOptions:
    cwd: str
    prompt: str | None = None
    resume: str | None = None
    fork_mode: protocol.ForkMode | None = None
    model: str | None = None
    permission_mode: protocol.PermissionMode | None = None
    agent: protocol.AgentName | None = None  # of new sessions: the server's default if None
    # The chat's own server's settings (never sent when attached): only what was given.
    merge_mode: MergeMode | None = None
    isolation: Isolation | None = None
    agents: dict[str, Any] | None = None  # initializationOptions.agents (--agents)

    def init_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if self.merge_mode is not None:
            options["mergeMode"] = self.merge_mode
        if self.isolation is not None:
            options["forkIsolation"] = self.isolation
        if self.agents is not None:
            options["agents"] = self.agents
        return options

    attach: tuple[str, int] | None = None  # a running `coven-ls --tcp` server's HOST, PORT
    token: str | None = None  # its token (never from the command line)


@dataclass
class _Question:
    text: str
    choices: str  # letters to pick from; "" for a line of free text
    answer: asyncio.Future[str | None]
    # What settles it elsewhere (another client's decision, a cancelled turn): ("fork", forkId),
    # ("permission", sessionId, toolUseId), ("review", sessionId).
    key: tuple[str, ...] | None = None
    default: str = ""  # free text: what the line starts with, to edit
    gone: str = "the question was settled elsewhere"  # said when it goes away unanswered


class Chat:
    def __init__(self, options: ChatOptions) -> None:
        self._options = options
        self.client = CovenClient(
            on_event=self._on_event,
            on_delta=self._on_delta,
            on_permission=lambda request: dialogs.ask_permission(self, request),
            handles_forks=True,
            handles_review=True,
        )
        self._out = ChatOutput()
        self._out.on_partial = self._redraw
        self._printer = TreePrinter(self._out, full_text=True)  # type: ignore[arg-type]
        self.current: str | None = None
        self.infos: dict[str, dict[str, Any]] = {}  # sessionId -> SessionInfo, kept current
        # Events and streamed pieces (is it a delta, params) of sessions not known yet, in the
        # order they came: a new session's first pieces can beat listSessions' answer.
        self._unplaced: list[tuple[bool, dict[str, Any]]] = []
        self.proposed: dict[str, str] = {}  # sessionId -> the forkId awaiting a decision
        self._questions: deque[_Question] = deque()
        self._question_came = asyncio.Event()  # set by each question asked
        self.clock = WorkClock()  # how long each fork child has been at work
        self._asking: _Question | None = None  # the question on the input line now
        self._agent = options.agent  # of the sessions started from now on (`/agent`)
        self.reviewed: set[str] = set()  # fork children whose changes were applied or discarded
        self._draft = ""
        self._armed = False  # Ctrl+C pressed once on an idle, empty prompt
        self._quit = False
        self._connected = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._input: PromptSession[str] | None = None
        self._asker: PromptSession[str] | None = None

    # --- the conversation ------------------------------------------------------------------------

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, self._on_sigint)
        loop.add_signal_handler(signal.SIGTERM, self._stop)
        try:
            if not await self._connect():
                return EXIT_NOT_STARTED
            watch = asyncio.ensure_future(self._watch_server())
            try:
                if not await self._begin():
                    return EXIT_NOT_STARTED
                with patch_stdout(raw=True):
                    await self._loop()
            finally:
                watch.cancel()
            return EXIT_OK
        finally:
            for task in list(self._tasks):
                task.cancel()
            # Our own server: shutdown closes every session (their CLI processes end); the store
            # keeps them. Attached: only the connection ends; the server and its sessions go on.
            await self.client.stop()
            if self.client.attached and self._connected:
                self.say("(disconnected: the server and its sessions go on)")
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_signal_handler(signal.SIGTERM)

    async def _connect(self) -> bool:
        """Start a server of our own, or attach to a running one; False (said why) if neither."""
        root = Path(self._options.cwd)
        attach = self._options.attach
        try:
            if attach is None:
                await self.client.start(
                    root, init_options=self._options.init_options(), own_session=True
                )
            else:
                await self.client.connect(*attach, root, self._options.token or "")
        except OSError as exc:
            where = f"{attach[0]}:{attach[1]}" if attach else "the server"
            self.say(
                f"coven-ls chat: cannot connect to {where} ({exc.strerror or exc}); is "
                f"`coven-ls --tcp {where}` running?"
            )
            return False
        except JsonRpcException as exc:
            self.say(f"coven-ls chat: {exc.message}")
            data = exc.data if isinstance(exc.data, dict) else {}
            if exc.code == protocol.ErrorCode.StoreUnavailable and data.get("pid"):
                self.say(
                    "To share one server between the editor and this terminal, have the editor "
                    "run it with --tcp (`coven-ls --tcp 127.0.0.1:7777`: coven.server.tcp in VS "
                    "Code, tcp in Neovim) and attach to it: `coven-ls chat --tcp "
                    "127.0.0.1:7777` (the token from --token-file or $COVEN_TOKEN)."
                )
            return False
        self._connected = True
        return True

    async def _begin(self) -> bool:
        if self._agent is not None and (problem := unknown_agent(self._agent, self.client.agents)):
            self.say(f"coven-ls chat: --agent {self._agent}: {problem}")
            return False
        await self.refresh()
        if self._options.resume is not None:
            if not await self._resume(self._options.resume):
                return False
        if self._options.prompt:
            await self._message(self._options.prompt)
            return self.current is not None
        if self.current is None:
            self.say("Type a message to start a session; /help lists the commands.")
        return True

    async def _loop(self) -> None:
        self._input = PromptSession(
            history=FileHistory(str(history_path())),
            completer=CommandCompleter(lambda: self.client.agents),
            complete_while_typing=True,
            refresh_interval=0.5,  # the prompt shows the current session's status
        )
        self._asker = PromptSession()
        while not self._quit:
            if self._questions:
                await self._ask_next()
                continue
            try:
                line = await self._input.prompt_async(
                    lambda: self._streaming(self._prompt()), default=self._draft
                )
            except KeyboardInterrupt:
                typed = self._input.default_buffer.text
                self._draft = ""
                await self._on_ctrl_c(bool(typed.strip()))
                continue
            except EOFError:  # Ctrl+D
                break
            if line is _ASIDE:
                continue  # a question came: asked first, then the draft comes back
            self._armed = False
            if await self._meant_for_a_question(line):
                self._draft = line  # back on the input line once the question is answered
                continue
            self._draft = ""
            await self._line(line)

    async def _meant_for_a_question(self, line: str) -> bool:
        """A line entered as a question came (its Enter beat the question to the input line),
        or an answer's letter entered just before one came: it was typed for the question, not
        as a message. It is not sent; it stays on the input line until Enter is pressed again."""
        if self._questions:
            return True
        if len(line.strip()) != 1 or line.strip().lower() not in ANSWER_LETTERS:
            return False
        self._question_came.clear()
        try:
            await asyncio.wait_for(self._question_came.wait(), ANSWER_GRACE_SECONDS)
        except TimeoutError:
            return False
        return True

    def _prompt(self) -> str:
        info = self.infos.get(self.current or "")
        if info is None:
            return "coven > "
        status = info["status"]
        state = "" if status == "idle" else f"({status}{self.clock.elapsed(info)}) "
        return f"{state}{self._place(info)} > "

    def _place(self, info: dict[str, Any]) -> str:
        """Where a session is: `⑂ 2/3 label` for a fork child, `⎇ title` for a branch."""
        if info.get("forkId"):
            siblings = [s for s in self.infos.values() if s.get("forkId") == info["forkId"]]
            n = next(i for i, s in enumerate(siblings, 1) if s["sessionId"] == info["sessionId"])
            return f"⑂ {n}/{len(siblings)} {one_line(info.get('label') or '', 30)}"
        title = one_line(info["title"], 30)
        return f"⎇ {title}" if info.get("branchedFrom") else title

    def _streaming(self, prompt: str) -> str:
        """A prompt with the line being streamed above it."""
        return f"{self._out.partial}\n{prompt}" if self._out.partial else prompt

    def _redraw(self) -> None:
        for session in (self._input, self._asker):
            if session is not None and session.app.is_running:
                session.app.invalidate()

    def say(self, text: str) -> None:
        # Through the printer: a line being streamed is ended first, not written over.
        self._printer.note(text)

    # --- lines and commands ----------------------------------------------------------------------

    async def _line(self, line: str) -> None:
        try:
            command = cmd.parse(line)
        except cmd.CommandError as exc:
            self.say(str(exc))
            return
        if command is None:
            return
        try:
            await self._do(command)
        except JsonRpcException as exc:
            self.say(f"coven-ls: {exc.message}")

    async def _do(self, command: cmd.Command) -> None:
        if isinstance(command, cmd.Message):
            await self._message(command.text)
        elif isinstance(command, cmd.Simple):
            await self._simple(command.name)
        elif isinstance(command, cmd.Resume):
            await self._resume(command.session_id)
        elif isinstance(command, cmd.Switch):
            await self._switch(command.target)
        elif isinstance(command, cmd.Agent):
            self._set_agent(command.name)
        elif self.current is None:
            self.say("There is no session yet: type a message to start one.")
        elif isinstance(command, cmd.Branch):
            await self._branch(command.prompt)
        elif isinstance(command, cmd.Fork):
            started = await self.client.request(
                protocol.FORK,
                {"sessionId": self.current, "tasks": command.tasks, **command.start.params()},
            )
            count = len(command.tasks)
            self.say(
                f"⑂ forking into {count} task{'s' if count != 1 else ''} ({started['forkId']})"
            )
        elif isinstance(command, (cmd.Approve, cmd.Reject)):
            await self._decide(command)
        elif isinstance(command, cmd.Cancel):
            await self._cancel(command.target)

    async def _simple(self, name: str) -> None:
        if name == "/quit":
            self._quit = True
        elif name == "/help":
            for command, what in cmd.COMMANDS.items():
                self.say(f"  {command} {what}")
            self.say("  Anything else is a message to the current session (//x sends /x).")
        elif name == "/tree":
            await self.refresh()
            for n, (info, depth) in enumerate(self._numbered(), 1):
                mark = "▶" if info["sessionId"] == self.current else " "
                self.say(
                    f"{mark}{n:>3}. {'  ' * depth}{self._place(info)} "
                    f"[{info['status']}{self.clock.elapsed(info)}] "
                    f"{info['sessionId']}"
                )
        elif name == "/sessions":
            await self.refresh()
            tops = [s for s in self.infos.values() if s["parentId"] is None]
            if not tops:
                self.say("No sessions in this workspace yet.")
            for info in tops:
                mark = "▶" if info["sessionId"] == self.current else " "
                self.say(
                    f"{mark} {info['sessionId']}  {info['createdAt'][:16].replace('T', ' ')}  "
                    f"{info['status']:<11} {info.get('agent') or 'claude':<6} "
                    f"{one_line(info['title'], 60)}"
                )
        elif name == "/review":
            # Its questions are asked by the input loop, which must not wait for them here.
            self._spawn(dialogs.review_current(self))
        elif name == "/new":
            self.current = None
            agent = self._agent or "the server's default agent"
            self.say(f"Your next message starts a new session ({agent}).")

    def _set_agent(self, name: str | None) -> None:
        offers = self.client.agents
        if name is None:
            default = "the server's default agent"
            self.say(f"New sessions run on {self._agent or default}.")
            if offers:
                self.say("This server's agents (/agent NAME picks one):")
            for offer in offers or []:
                mark = "▶" if offer.name == self._agent else " "
                self.say(f"{mark} {offer.line()}")
            return
        if problem := unknown_agent(name, offers):
            self.say(problem)
            return
        self._agent = name
        here = self.infos.get(self.current or "")
        stays = f"; this one stays on {here.get('agent') or 'claude'}" if here else ""
        more = " (/new starts one)" if here else ""
        self.say(f"New sessions run on {name}{more}{stays}.")

    async def _message(self, text: str) -> None:
        if self.current is None:
            params: dict[str, Any] = {"prompt": text, "cwd": self._options.cwd}
            for key, value in (
                ("forkMode", self._options.fork_mode),
                ("model", self._options.model),
                ("permissionMode", self._options.permission_mode),
                ("agent", self._agent),
            ):
                if value is not None:
                    params[key] = value
            try:
                started = await self.client.request(protocol.START_SESSION, params)
            except JsonRpcException as exc:
                self.say(f"coven-ls chat: {exc.message}")
                return
            await self._enter(started["sessionId"])
            return
        sent = await self.client.request(
            protocol.SEND_MESSAGE, {"sessionId": self.current, "text": text}
        )
        if sent["queued"]:
            ahead = sent["position"]
            self.say(
                f"(queued: the session is busy; {ahead} turn{'s' if ahead != 1 else ''} ahead)"
            )

    async def _branch(self, prompt: str) -> None:
        made = await self.client.request(
            protocol.BRANCH, {"sessionId": self.current, "prompt": prompt}
        )
        await self._enter(made["sessionId"])
        self.say(f"⎇ branched: now in {made['sessionId']} (/switch parent goes back)")

    async def _enter(self, session_id: str) -> None:
        """Make a session the current one, once its info is known."""
        await self.refresh(enter=session_id)

    async def _switch(self, target: str) -> None:
        await self.refresh()
        info = self.infos.get(self.current or "")
        found: str | None = None
        if target == "parent":
            found = info["parentId"] if info else None
            if found is None:
                self.say("This session has no parent.")
                return
        elif target == "root":
            found = self._root(self.current) if self.current else None
        elif target.isdigit():
            numbered = self._numbered()
            if not 1 <= int(target) <= len(numbered):
                self.say(f"No session {target} in the tree: /tree numbers them.")
                return
            found = numbered[int(target) - 1][0]["sessionId"]
        else:
            found = target if target in self.infos else None
        if found is None:
            self.say(f"No session {target}: /tree and /sessions list them.")
            return
        self.current = found
        self._place_in_tree(found)
        now = self.infos[found]
        self.say(f"→ {self._place(now)} [{now['status']}]")

    async def _resume(self, session_id: str) -> bool:
        await self.refresh()
        if session_id not in self.infos:
            self.say(f"coven-ls chat: no session {session_id} in this workspace (/sessions).")
            return False
        self.current = session_id
        self._place_in_tree(session_id)
        replay = await self.client.request(protocol.GET_EVENTS, {"sessionId": session_id})
        for event in replay["events"]:
            self._printer(event)
        info = self.infos[session_id]
        self.say(f"→ resumed {self._place(info)} [{info['status']}]")
        return True

    async def _cancel(self, target: str | None) -> None:
        session = self.current
        if target is not None:
            numbered = self._numbered()
            if not target.isdigit() or not 1 <= int(target) <= len(numbered):
                self.say(f"No session {target} in the tree: /tree numbers them.")
                return
            session = numbered[int(target) - 1][0]["sessionId"]
        done = await self.client.request(protocol.CANCEL, {"sessionId": session})
        dropped = done["droppedMessages"]
        self.say("cancelled" + (f" ({dropped} queued message(s) dropped)" if dropped else ""))

    async def _decide(self, command: cmd.Approve | cmd.Reject) -> None:
        fork_id = self.proposed.get(self.current or "")
        if fork_id is None:
            self.say("No fork is proposed in this session.")
            return
        params: dict[str, Any] = {"forkId": fork_id, "approve": isinstance(command, cmd.Approve)}
        if isinstance(command, cmd.Approve):
            if command.tasks:
                params["tasks"] = command.tasks
            params.update(command.start.params())
        if isinstance(command, cmd.Reject):
            params["reason"] = command.reason or "rejected in the terminal"
        await self.client.request(protocol.DECIDE_FORK, params)

    # --- the tree --------------------------------------------------------------------------------

    async def refresh(self, enter: str | None = None) -> None:
        """Know the sessions again; `enter`: make that one the current session before what came
        early for it is printed (its tree's events and pieces are shown, the others' not)."""
        listed = await self.client.request(protocol.LIST_SESSIONS, {})
        self.infos = {s["sessionId"]: s for s in listed["sessions"]}
        if enter is not None:
            self.current = enter
            self._place_in_tree(enter)
        waiting, self._unplaced = self._unplaced, []
        for is_delta, params in waiting:
            (self._take_delta if is_delta else self._take)(params)  # still unknown: dropped

    def _root(self, session_id: str) -> str:
        seen = session_id
        while (parent := (self.infos.get(seen) or {}).get("parentId")) in self.infos:
            seen = parent
        return seen

    def _numbered(self) -> list[tuple[dict[str, Any], int]]:
        """The current tree, depth first, in the order its sessions were made."""
        if self.current is None:
            return []
        out: list[tuple[dict[str, Any], int]] = []
        stack = [(self._root(self.current), 0)]
        while stack:
            sid, depth = stack.pop()
            out.append((self.infos[sid], depth))
            kids = [s["sessionId"] for s in self.infos.values() if s["parentId"] == sid]
            stack.extend((kid, depth + 1) for kid in reversed(kids))
        return out

    def _place_in_tree(self, session_id: str) -> None:
        """Give the printer the session's place (its depth under its parents)."""
        chain = [session_id]
        while (parent := self.infos[chain[-1]].get("parentId")) in self.infos:
            chain.append(parent)
        for sid in reversed(chain):
            info = self.infos[sid]
            name = info.get("label") or info["title"]
            self._printer.add_session(sid, one_line(name, 60), info.get("parentId"))

    def _in_tree(self, session_id: str) -> bool:
        return self.current is not None and self._root(session_id) == self._root(self.current)

    # --- events ----------------------------------------------------------------------------------

    def _on_delta(self, delta: dict[str, Any]) -> None:
        """A streamed piece of text or thinking: printed as it comes, for the current tree.
        A piece of a session not known yet waits with its events: dropped, the block's later
        pieces would print without its beginning, and its whole text again under them."""
        if delta["sessionId"] not in self.infos:
            self._unplaced.append((True, delta))
            return
        self._take_delta(delta)

    def _take_delta(self, delta: dict[str, Any]) -> None:
        if delta["sessionId"] in self.infos and self._in_tree(delta["sessionId"]):
            self._printer.delta(delta)

    def _on_event(self, event: dict[str, Any]) -> None:
        if event["sessionId"] not in self.infos:
            self._unplaced.append((False, event))  # placed once listSessions knows the session
            return
        self._take(event)

    def _take(self, event: dict[str, Any]) -> None:
        sid, kind = event["sessionId"], event["kind"]
        info = self.infos.get(sid)
        if info is None:
            return
        if kind == Kind.STATUS:
            info["status"] = event["status"]
            self.clock.status(sid, event["status"], event["time"])
        elif kind == Kind.FORK_STARTED:
            for child in event["children"]:
                self.infos.setdefault(
                    child["sessionId"],
                    {
                        "sessionId": child["sessionId"],
                        "parentId": sid,
                        "forkId": event["forkId"],
                        "label": child["label"],
                        "title": child["label"],
                        "status": "queued",
                        "branchedFrom": None,
                        "createdAt": event["time"],
                    },
                )
                self._printer.add_session(child["sessionId"], child["label"], sid)
        if kind == Kind.FORK_PROPOSED:
            self.proposed[sid] = event["forkId"]
        elif kind.startswith("fork") or (kind == Kind.STATUS and event["status"] in ENDED):
            if (settled := self.proposed.pop(sid, None)) is not None:
                self._settle(("fork", settled))
        if kind == Kind.PERMISSION_DECISION:
            self._settle(("permission", sid, str(event.get("toolUseId"))))
        elif kind == Kind.CHANGES and event["changes"]["merge"] == "pending":
            self.reviewed.discard(sid)  # later work: to be reviewed again
        elif kind == Kind.CHANGES:
            self.reviewed.add(sid)
            self._settle(("review", sid))
        if not self._in_tree(sid):
            return
        self._printer(event)
        if kind == Kind.FORK_PROPOSED:
            self._spawn(dialogs.ask_fork(self, event))
        elif kind == Kind.FORK_REVIEWING:
            self._spawn(dialogs.review(self, event["pending"]))

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None and not self._quit:
            self.say(f"coven-ls chat: {task.exception()!r}")

    # --- questions, inline -----------------------------------------------------------------------

    async def ask(
        self,
        text: str,
        choices: str,
        key: tuple[str, ...] | None = None,
        default: str = "",
        gone: str = "the question was settled elsewhere",
    ) -> str | None:
        """One of `choices` (or, with none, a line of text that starts as `default`), asked at
        the input line (the line being typed is put aside until it is answered); None after
        Ctrl+C, when the chat ends first, or when `key` is settled elsewhere meanwhile."""
        future = asyncio.get_running_loop().create_future()
        question = _Question(text, choices, future, key, default, gone)
        self._questions.append(question)
        self._question_came.set()
        app = self._input.app if self._input is not None else None
        # An Enter may have ended the input line already (its line is kept: _loop sees the
        # question waiting); exiting it again would fail.
        if app is not None and app.is_running and not (app.future and app.future.done()):
            self._draft = app.current_buffer.text
            app.exit(result=_ASIDE)
        try:
            return await asyncio.shield(question.answer)
        except asyncio.CancelledError:
            # The server withdrew its request ($/cancelRequest: the turn ended, say).
            self._withdraw(question)
            raise

    def _settle(self, key: tuple[str, ...]) -> None:
        """Questions that someone else answered (or that a cancelled turn made moot) go away."""
        for question in [*self._questions, self._asking]:
            if question is not None and question.key == key:
                self._withdraw(question)

    def _withdraw(self, question: _Question) -> None:
        """Take a question off the input line (or out of the line of questions) unanswered; the
        line typed before it comes back as it was."""
        if question.answer.done():
            return
        question.answer.set_result(None)
        if question in self._questions:
            self._questions.remove(question)
        elif question is self._asking:
            self.say(f"({question.gone})")
            if self._asker is not None and self._asker.app.is_running:
                self._asker.app.exit(result=_ASIDE)

    async def _ask_next(self) -> None:
        question = self._questions.popleft()
        assert self._asker is not None
        self._asking = question
        answer: str | None = None
        choices = "/".join(question.choices)
        try:
            while not question.answer.done():
                if not question.choices:
                    line = await self._asker.prompt_async(
                        lambda: self._streaming(f"{question.text} "), default=question.default
                    )
                    answer = None if line is _ASIDE else line
                    break
                line = await self._asker.prompt_async(
                    lambda: self._streaming(f"{question.text} [{choices}] ")
                )
                if line is _ASIDE:
                    break
                answer = line.strip().lower()[:1]
                if answer and answer in question.choices:
                    break
                self.say(f"Please answer {' or '.join(question.choices)}.")
        except (KeyboardInterrupt, EOFError):
            answer = None
        finally:
            self._asking = None
        if not question.answer.done():
            question.answer.set_result(answer)

    # --- Ctrl+C and the end ----------------------------------------------------------------------

    async def _on_ctrl_c(self, had_text: bool) -> None:
        if had_text:
            self._armed = False
            return  # the typed line is cleared, nothing else
        info = self.infos.get(self.current or "")
        if info is not None and info["status"] in BUSY:
            self._armed = False
            self.say("^C cancelling")
            try:
                await self.client.request(protocol.CANCEL, {"sessionId": self.current})
            except JsonRpcException as exc:
                self.say(f"coven-ls: could not cancel: {exc.message}")
            return
        if self._armed:
            self._quit = True
            return
        self._armed = True
        self.say("(Ctrl+C again, Ctrl+D or /quit to quit)")

    def _on_sigint(self) -> None:
        """A Ctrl+C while no input line shows (the terminal is not in raw mode then): cancel what
        runs, else quit."""
        info = self.infos.get(self.current or "")
        if info is not None and info["status"] in BUSY:
            self._spawn(self._on_ctrl_c(False))
        else:
            self._stop()

    def _stop(self) -> None:
        self._quit = True
        for question in self._questions:
            if not question.answer.done():
                question.answer.set_result(None)
        for session in (self._input, self._asker):
            if session is not None and session.app.is_running:
                session.app.exit(exception=EOFError())

    async def _watch_server(self) -> None:
        await self.client.wait_server_exit()
        if self.client.attached:
            self.say("coven-ls chat: the server closed the connection.")
        else:
            tail = "\n".join(self.client.server_stderr)
            self.say(f"coven-ls chat: the server stopped.\n{tail}")
        self._stop()


# What the input line returns when a question put it aside (never a line the user typed: the
# identity is what is compared).
_ASIDE = "\x00aside"


def chat(options: ChatOptions) -> int:
    try:
        return asyncio.run(Chat(options).run())
    except KeyboardInterrupt:  # before the handler was installed, or after it was removed
        return 130
