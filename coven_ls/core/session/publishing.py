"""What the agent says, published: coven events of its agent events (mapping.py), `coven/delta`
of the streamed pieces (streaming.py), and its figures from each model call and turn's end (a
fork's limits count the calls as they come, the context gauge follows the main thread's
requests, the cost is the turn's own).

Whichever agent it is, what it says arrives as coven's own agent events (core/agent/events.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import msgspec

from ...protocol import events
from ...protocol.types import ClusterPlacement, StreamKind
from ..agent import events as agent_events
from ..agent.events import AgentEvent
from ..fork.spend import claude_cost
from ..fork.transcript import estimate_tokens
from ..models import context_usage
from .mapping import message_payloads, to_payloads
from .state import SessionState


class AgentEventPublisher:
    def __init__(self, session: SessionState, on_spent: Callable[[], None]) -> None:
        """`on_spent`: a model call or turn added to what the session spent."""
        self._session = session
        self._on_spent = on_spent
        # How the agent last announced itself (it does at every turn; clients need it once).
        self.agent_info: events.AgentStarted | None = None

    def publish(self, event: AgentEvent) -> events.TurnResult | None:
        """Publish what one agent event says: streamed pieces as deltas, the rest as events.
        Returns the turn's result (as published), if the event ends a turn."""
        session = self._session
        match event:
            case agent_events.BlockStarted():
                session.streams.start(event)
                return None
            case agent_events.Delta():
                piece = session.streams.feed(event)
                if piece is not None:
                    session.sink.publish_delta(
                        events.Delta(
                            sessionId=session.id,
                            afterSeq=session.last_seq,
                            blockId=piece.block_id,
                            kind=piece.kind,
                            text=piece.text,
                            parentToolUseId=piece.parent_tool_use_id,
                        )
                    )
                return None
            case agent_events.ModelCall():
                self._gauge(event)
                self._count_call(event)
                return None
            case agent_events.AgentMessage():
                self._gauge(event.call)
                for payload in message_payloads(event):
                    if isinstance(payload, (events.Text, events.Thinking)):
                        kind: StreamKind = (
                            "text" if isinstance(payload, events.Text) else "thinking"
                        )
                        block = session.streams.finish(event.call_id, kind)
                        if block is not None:
                            payload = msgspec.structs.replace(payload, blockId=block)
                        if isinstance(payload, events.Text) and payload.parentToolUseId is None:
                            session.turn_text.append(payload.text)
                    session.emit(payload)
                self._count_call(event.call)  # after its parts: a child stopped here keeps them
                return None
        result: events.TurnResult | None = None
        for payload in to_payloads(event):
            if isinstance(payload, events.AgentStarted):
                # The CLI announces itself at every turn; clients need it once per change.
                if payload == self.agent_info:
                    continue
                self.agent_info = payload
                session.agent_session_id = payload.agentSessionId or session.agent_session_id
            elif isinstance(payload, events.TurnResult):
                payload = self._account(payload)
                # A call's messages may count only part of its output: its answer's text says
                # at least as much.
                session.answer_tokens = max(session.answer_tokens, estimate_tokens(payload.text))
                if payload.usage is not None:
                    session.usage = session.usage + payload.usage
                if session.context is not None:
                    payload = msgspec.structs.replace(payload, contextUsage=session.context)
                session.meter.clear()  # the turn's own figures replace its calls'
                if session.cancel_requested.is_set():
                    # The user stopped it: that is no error, and the CLI's text for it
                    # ("[ede_diagnostic] result_type=user ...") is no answer.
                    payload = msgspec.structs.replace(
                        payload, cancelled=True, isError=False, text=""
                    )
            elif isinstance(payload, events.Placed):
                placed = self._placed(payload)
                if placed is None:
                    continue  # each of its agent processes says so; clients need it once per node
                payload = placed
            elif isinstance(payload, events.Task):
                tracked = session.background.track(payload)
                if tracked is None:
                    continue
                agent = session.process.agent
                if agent is not None and not agent.reports_ended_tasks:
                    session.background.report_due = False  # no turn of its own will report it
                payload = tracked
            session.emit(payload)
            if isinstance(payload, events.TurnResult):
                result = payload
                session.answered = True
                self._on_spent()
        return result

    def publish_task_end(
        self, task: events.Task, summary: str = "stopped with the agent process"
    ) -> None:
        ended = events.Task(
            taskId=task.taskId,
            status="stopped",
            toolUseId=task.toolUseId,
            description=task.description,
            summary=summary,
        )
        session = self._session
        published = session.background.track(ended)
        if published is not None:
            session.emit(published)
        session.background.report_due = False  # the process is gone: no turn will report it

    def _placed(self, placed: events.Placed) -> events.Placed | None:
        """The child's node, kept (SessionInfo.placement, stored with its row) and said with its
        cluster's name; None when it is where it was."""
        session = self._session
        cluster = session.placement.cluster if session.placement is not None else None
        where = ClusterPlacement(
            cluster=cluster or "cluster", node=placed.node, nodeId=placed.nodeId
        )
        if where == session.placement:
            return None
        session.placement = where
        return msgspec.structs.replace(placed, cluster=cluster)

    def _count_call(self, call: agent_events.ModelCall | None) -> None:
        """A model call's tokens (and cost, when known), as soon as the agent reports them: a
        fork's limits count them."""
        if call is None or not call.call_id:
            return
        if self._session.meter.add(call.call_id, call.usage, call.cost_usd):
            self._on_spent()

    def _gauge(self, call: agent_events.ModelCall | None) -> None:
        """Each model call of the session's own (not a subagent's) sets its context: what the
        request put in (input, cache read, cache creation)."""
        if call is None or call.parent_tool_call_id is not None or not call.context_tokens:
            return
        context = context_usage(call.context_tokens, call.model or None)
        if call.context_size is not None:
            context = msgspec.structs.replace(context, window=call.context_size)
        session = self._session
        session.context = context
        # One call comes as several messages, each with the output counted so far (the CLI's
        # often less than the answer's; the turn's end makes up for it).
        same = call.call_id is not None and call.call_id == session.answer_call
        output = call.usage.outputTokens
        session.answer_tokens = max(session.answer_tokens, output) if same else output
        session.answer_call = call.call_id

    def _account(self, result: events.TurnResult) -> events.TurnResult:
        """The CLI reports the process's running total; turn it into this turn's cost."""
        total = result.costUsd
        if total is None or not math.isfinite(total):
            return result
        session = self._session
        process = session.process
        if process.carried_cost and session.config.agent == "claude" and result.usage is not None:
            # Claude Code going on with a conversation (--resume, a fork child's copy) starts
            # its running total at the cost it restores of the conversation's earlier process:
            # a fork child's first turn reported its parent's cost too. This turn's own part is
            # its usage at the table's prices; the rest was spent before.
            model = session.context.model if session.context is not None else None
            own = claude_cost(model, result.usage)
            if own is not None and own < total:
                process.cost = max(process.cost, total - own)
        process.carried_cost = False
        turn_cost = max(total - process.cost, 0.0)
        process.cost = total
        session.cost_usd += turn_cost
        return msgspec.structs.replace(result, costUsd=round(turn_cost, 6))
