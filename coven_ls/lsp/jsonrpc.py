"""The JSON-RPC layer of an LSP connection, hardened: every request gets a response.

pygls' protocol drops some requests unanswered and reads nested objects as messages; `CovenProtocol`
decodes each body itself, answers what it cannot decode with an error, and withdraws the questions
it asks the editor once no one waits for their answers.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any, Protocol, cast

from cattrs import transform_error
from cattrs.errors import ClassValidationError
from lsprotocol import types
from pygls.exceptions import (
    JsonRpcException,
    JsonRpcInvalidParams,
    JsonRpcInvalidRequest,
    JsonRpcMethodNotFound,
    JsonRpcParseError,
)
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import MsgId, RPCRequest
from pygls.protocol.language_server import lsp_method

from .. import protocol

log = logging.getLogger(__name__)

# What `structure_message` hands on for a request it could not decode and has answered already.
_ANSWERED = object()


def _valid_id(msg_id: Any) -> MsgId | None:
    """A request's id if it is one JSON-RPC allows (a string or an integer), else None."""
    return msg_id if isinstance(msg_id, (str, int)) and not isinstance(msg_id, bool) else None


MAX_DEPTH = 64
"""How deeply a message may nest its arrays and objects. No LSP or coven/* message comes close;
a deeper one would only exhaust the stack of whatever walks it."""


def _not_a_message(data: Any) -> str | None:
    """Why the decoded body is no JSON-RPC message (a batch counts as none: LSP has no
    batches), or None."""
    if isinstance(data, list):
        return "batches are not supported; send each message in a frame of its own"
    if not isinstance(data, dict):
        return f"a message is a JSON object, not {protocol.json_type(data)}"
    if "method" in data:
        if not isinstance(data["method"], str):
            return f"'method' must be a string (got {protocol.json_type(data['method'])})"
    elif "result" not in data and "error" not in data:
        return "a message has a 'method' (a request or notification) or a 'result' or 'error'"
    if _depth(data) > MAX_DEPTH:
        return f"the message nests arrays and objects more than {MAX_DEPTH} levels deep"
    return None


def _depth(value: Any) -> int:
    """How deeply `value` nests (walked without recursion: the point is to refuse deep ones)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            if depth > MAX_DEPTH:
                return depth
            deepest = max(deepest, depth)
            todo.extend((child, depth + 1) for child in item)
    return deepest


class ConnectionServer(Protocol):
    """What the protocol needs of the server it serves (`connection.CovenServer`, which imports
    this module: the protocol knows the server by this much only)."""

    coven_aware: bool

    def request_exit(self, code: int) -> None: ...

    def available_agents(self) -> list[protocol.AgentOffer]: ...

    def cluster_name(self) -> str | None: ...


class CovenProtocol(LanguageServerProtocol):
    """pygls' protocol, held to one rule: every request gets a response.

    pygls drops, unanswered, a request it cannot decode: `structure_message` raises, and pygls'
    read loop only logs. That happened to any request without a `params` member (which JSON-RPC
    2.0 allows), since pygls' generic `JsonRPCRequestMessage` requires one, and to a standard LSP
    request whose params do not fit its lsprotocol type. Here such a request is answered with an
    error instead, and absent params are read as `null` (which the coven/* handlers take for an
    empty object). Bodies come in through `receive` (see `_serve`), not pygls' loop."""

    @property
    def _coven(self) -> ConnectionServer:
        # pygls' `_server` is typed as its LanguageServer; only a CovenServer creates this
        # protocol (`protocol_cls`), and it is a ConnectionServer.
        return cast(ConnectionServer, self._server)

    # --- incoming --------------------------------------------------------------------------------

    def receive(self, body: bytes) -> None:
        """Handle one message's body.

        pygls decodes with `json.loads(body, object_hook=structure_message)`, which runs the hook
        on every object in the body, nested ones included: an object inside params that happened
        to have `jsonrpc` and `id` members was taken for a message of its own (answered, or
        consumed as the response to one of our requests), and when it did not fit, the request
        around it was dropped unanswered. Here the body is decoded as plain JSON and only the
        top-level object is a message."""
        try:
            data = json.loads(body.decode("utf-8"))
        except (ValueError, RecursionError) as exc:
            # ValueError: not UTF-8, not JSON, or an integer too long for Python to read.
            # RecursionError: nested too deep for the JSON parser itself.
            reason = "nested too deeply" if isinstance(exc, RecursionError) else exc
            self._answer_error(None, JsonRpcParseError(f"Parse error: {reason}"))
            return
        problem = _not_a_message(data)
        if problem is not None:
            msg_id = _valid_id(data.get("id")) if isinstance(data, dict) else None
            self._answer_error(msg_id, JsonRpcInvalidRequest(f"Invalid request: {problem}"))
            return
        try:
            message = self.structure_message(data)
        except JsonRpcException:  # a response or a notification that does not decode
            log.warning("ignoring a message that does not decode: %.200s", body)
            return
        self.handle_message(message)

    def structure_message(self, data: dict[str, Any]) -> Any:
        if "jsonrpc" in data and "method" in data and "params" not in data:
            data = {**data, "params": None}
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if "id" not in data or "method" not in data:
                raise  # a notification or a response: no one waits for an answer
            method, cause = str(data["method"]), exc.__cause__
            if isinstance(cause, ClassValidationError):
                problems = "; ".join(transform_error(cause))
                error: JsonRpcException = JsonRpcInvalidParams(f"{method}: {problems}")
            else:
                error = JsonRpcInvalidRequest(f"{method}: the request could not be decoded")
            self._answer_error(_valid_id(data.get("id")), error)
            return _ANSWERED

    def handle_message(self, message: Any) -> None:
        if message is _ANSWERED:
            return
        if isinstance(message, dict):  # no "jsonrpc" member: pygls hands on the plain object
            if "id" in message and "method" in message:
                self._answer_error(
                    _valid_id(message.get("id")),
                    JsonRpcInvalidRequest(f"{message['method']}: 'jsonrpc' must be \"2.0\""),
                )
            else:
                log.warning("ignoring a message that is not JSON-RPC 2.0: %.200s", message)
            return
        if isinstance(message, RPCRequest) and message.method != types.EXIT:
            # pygls ignores these silently; LSP wants InvalidRequest after shutdown.
            problem = None
            if _valid_id(message.id) is None:
                problem = "'id' must be a string or an integer"
            elif message.jsonrpc != self.VERSION:
                problem = "'jsonrpc' must be \"2.0\""
            elif self._shutdown:
                problem = "the server is shutting down and takes no more requests"
            if problem is not None:
                error = JsonRpcInvalidRequest(f"{message.method}: {problem}")
                self._answer_error(_valid_id(message.id), error)
                return
        super().handle_message(message)

    def _get_handler(self, feature_name: str) -> Any:
        try:
            return super()._get_handler(feature_name)
        except JsonRpcMethodNotFound as exc:
            raise JsonRpcMethodNotFound(exc.message, data={"method": feature_name}) from None

    def _send_handler_result(self, future: Any, *, msg_id: MsgId) -> None:
        # pygls logs a traceback, as an error, for every request answered with an error, the
        # documented ones (a session id that names nothing, a missing field) included: the log
        # keeps tracebacks for what is not expected (an InternalError is still logged so).
        error = None if future.cancelled() else future.exception()
        if isinstance(error, JsonRpcException):
            self._request_futures.pop(msg_id, None)
            log.info("answering %r with error %s: %s", msg_id, error.code, error.message)
            self._send_response(msg_id, error=error.to_response_error())
            return
        super()._send_handler_result(future, msg_id=msg_id)

    def _answer_error(self, msg_id: MsgId | None, error: JsonRpcException) -> None:
        log.warning("answering %r with error %s: %s", msg_id, error.code, error.message)
        if msg_id is not None:
            self._send_response(msg_id, error=error.to_response_error())
        else:  # lsprotocol's ResponseErrorMessage would leave the null id out
            body = {"code": error.code, "message": error.message}
            self._send_data({"jsonrpc": self.VERSION, "id": None, "error": body})

    # --- outgoing --------------------------------------------------------------------------------

    async def ask(self, method: str, params: Any) -> Any:
        """Send a request to the client and wait for its answer. Whoever stops waiting first (a
        cancelled turn, a closed session, a timeout) makes the question moot, and it is then
        withdrawn with `$/cancelRequest`: pygls, when the wait is cancelled, only cancels its own
        future, and the editor would go on showing a question no one will read the answer to."""
        msg_id = str(uuid.uuid4())
        try:
            return await self.send_request_async(method, params, msg_id=msg_id)
        finally:
            self.withdraw(msg_id)

    def connection_lost(self) -> None:
        """The editor is gone: its unanswered questions (a tool's permission, a fork's approval)
        fail now, instead of holding their sessions until they time out; a session then goes
        on as if the user had said no (or, for a fork, waits for coven/decideFork from another
        editor)."""
        for msg_id, pending in list(self._request_futures.items()):
            self._request_futures.pop(msg_id, None)
            self._result_types.pop(msg_id, None)
            if not pending.done():
                pending.set_exception(ConnectionError("the editor disconnected before it answered"))

    def withdraw(self, msg_id: MsgId) -> None:
        """Take back a request to the client that is still unanswered (a no-op once answered:
        the answer removed it from `_request_futures`)."""
        pending = self._request_futures.pop(msg_id, None)
        if pending is None:
            return
        pending.cancel()  # a late answer is then only logged as one to an unknown request
        self._result_types.pop(msg_id, None)
        try:
            self.notify(types.CANCEL_REQUEST, types.CancelParams(id=msg_id))
        except Exception:  # the connection is gone: there is no one to tell
            log.debug("could not withdraw request %s", msg_id, exc_info=True)

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args: Any) -> Any:
        """End the connection in order (sessions closed, agent processes gone) instead of pygls'
        `sys.exit` from inside the event loop."""
        self._coven.request_exit(0 if self._shutdown else 1)
        yield from ()

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams) -> Any:
        result = yield from super().lsp_initialize(params)
        # Every client is told which coven/* protocol it talks to, coven-aware or not.
        coven = protocol.CovenServerCapabilities(
            protocolVersion=protocol.PROTOCOL_VERSION,
            agents=self._coven.available_agents(),
            cluster=self._coven.cluster_name(),
        )
        result.capabilities.experimental = {"coven": protocol.to_json(coven)}
        if self._coven.coven_aware:
            # A client that speaks coven/* needs no command mirrors, and some (VS Code's language
            # client) would register them as editor commands, clashing with their own `coven.*`.
            result.capabilities.execute_command_provider = None
        return result
