"""Hostile input, end to end (issue #12): a real coven-ls fed arbitrary and near-valid params for
every method, and badly framed or garbled bytes, answers each with a documented error (or drops
a connection whose framing is lost), never dies, and leaves a session it already runs alone.

Hypothesis drives one server per test (not one per example) from a worker thread, each example
a round trip on the test's event loop. Examples are derandomized: CI sees the same inputs every
run, and a failure names the example that caused it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import socket
import struct
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import msgspec
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from coven_ls import protocol
from coven_ls.testing.scripted_model import ScriptedModel

from ..harness import processes_with_env, wait_until
from ..rawlsp import (
    RawLsp,
    assert_documented_error,
    connect_tcp,
    frame,
    server_env,
    server_log,
    start_stdio,
    start_tcp,
)

pytestmark = pytest.mark.slow

T = TypeVar("T")


def fuzz_settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,  # each example is a round trip to another process
        derandomize=True,
        database=None,  # nothing written to .hypothesis/ in the checkout
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        print_blob=False,
        # No explain phase: it reruns the failing example many times over, each a round trip.
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
    )


def on_loop(loop: asyncio.AbstractEventLoop) -> Callable[[Coroutine[Any, Any, T]], T]:
    """Run a coroutine on the test's loop from Hypothesis' thread and wait for it."""

    def run(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(120)

    return run


# --- values --------------------------------------------------------------------------------------

# Lone surrogates, NULs, right-to-left marks, emoji: text a JSON encoder passes through.
any_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=40)
huge_text = st.sampled_from([10_000, 1_000_000]).flatmap(
    lambda n: st.sampled_from(["x" * n, "é" * n, "\U0001f600" * (n // 4), " " * n])
)
odd_scalars = st.sampled_from(
    [
        "",
        " \t\n",
        "\x00",
        "\ud800",
        "‮",
        10**40,
        -(10**40),
        2**63,
        -(2**63) - 1,
        1e308,
        -0.0,
        math.inf,
        -math.inf,
        math.nan,
        True,
        False,
        None,
    ]
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | any_text | odd_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=12,
)


def ids(prefix: str, known: list[str]) -> st.SearchStrategy[Any]:
    """Ids that name nothing, in the right shape or not, and (for methods that do not change the
    session) the one session that exists."""
    made_up = st.sampled_from([f"{prefix}-000000000000", f"{prefix}-", f"{prefix}-{'0' * 5000}"])
    return made_up | any_text | (st.sampled_from(known) if known else st.nothing())


def valid_value(annotation: Any, field: str, context: dict[str, st.SearchStrategy[Any]]) -> Any:
    """A strategy for a value that fits `annotation`."""
    if field in context:
        return context[field]
    origin = get_origin(annotation)
    if origin is Annotated:
        return valid_value(get_args(annotation)[0], field, context).filter(
            lambda v: not isinstance(v, int) or v >= 0
        ) | st.just(-1)
    if origin in (Union,) or str(origin) == "<class 'types.UnionType'>":
        options = [a for a in get_args(annotation) if a is not type(None)]
        return st.one_of(*(valid_value(a, field, context) for a in options))
    if origin is Literal:
        return st.sampled_from(get_args(annotation))
    if origin is list:
        return st.lists(valid_value(get_args(annotation)[0], field, context), max_size=3)
    if annotation is str:
        return any_text | st.sampled_from(["Write the docs", "  "])
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        return st.integers(min_value=-5, max_value=2**70)
    if annotation is float:
        return st.floats(min_value=-5, max_value=1e9, allow_nan=False) | st.integers(-5, 10**6)
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        hints = get_type_hints(annotation, include_extras=True)
        return st.fixed_dictionaries(
            {},
            optional={
                f.name: valid_value(hints[f.name], f.name, context)
                for f in msgspec.structs.fields(annotation)
            },
        )
    if annotation is Any or origin is dict:
        return json_values
    raise AssertionError(f"no strategy for {annotation!r}")


def near_valid(
    method: str, context: dict[str, st.SearchStrategy[Any]]
) -> st.SearchStrategy[dict[str, Any]]:
    """The method's params, right but for a few fields: each of those wrongly typed, null, a
    huge or odd string, or missing; and sometimes fields the method does not have."""
    cls = protocol.REQUESTS[method].params
    hints = get_type_hints(cls, include_extras=True)
    fields = msgspec.structs.fields(cls)
    right = {f.name: valid_value(hints[f.name], f.name, context) for f in fields}
    wrong = st.one_of(json_values, huge_text, odd_scalars, st.just(None), st.just(MISSING))
    extra = st.dictionaries(any_text | st.sampled_from(["__proto__", "jsonrpc", "id"]), json_values)

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        params = {f.name: draw(right[f.name]) for f in fields if f.required or draw(st.booleans())}
        names = [f.name for f in fields]
        for name in draw(st.sets(st.sampled_from(names), max_size=2)) if names else ():
            params[name] = draw(wrong)
        params = {k: v for k, v in params.items() if v is not MISSING}
        if draw(st.integers(0, 3)) == 0:
            params = {**draw(extra), **params}
        return params

    return build()


MISSING = object()


# --- coven/* params ------------------------------------------------------------------------------


async def wait_idle(conn: RawLsp, ids_: itertools.count[int], sid: str) -> None:
    async def idle() -> bool:
        events = (await conn.result(next(ids_), protocol.GET_EVENTS, {"sessionId": sid}))["events"]
        return any(e["kind"] == "status" and e["status"] == "idle" for e in events)

    deadline = asyncio.get_running_loop().time() + 90
    while not await idle():
        assert asyncio.get_running_loop().time() < deadline, "the session never became idle"
        await asyncio.sleep(0.1)


async def test_fuzzed_params_get_documented_errors(tmp_path: Path, model: ScriptedModel) -> None:
    """Every method, fed arbitrary JSON and near-valid params over one connection, answers with
    a result or a documented error; a session another connection started before goes on as if
    nothing happened, and nothing the fuzzing sent started an agent."""
    model.on("Before the fuzz", "Ready for anything.")
    model.on("After the fuzz", "Still here.")
    config = tmp_path / "claude-config"
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "a-file").write_text("not a folder")
    env = server_env(tmp_path, model.cli_env(config))
    process, port = await start_tcp(tmp_path, env)
    counter = itertools.count(1)
    owner = fuzzer = None
    try:
        owner = await connect_tcp(port)
        await owner.initialize(workspace)
        started = await owner.result(
            next(counter), protocol.START_SESSION, {"prompt": "Before the fuzz"}
        )
        sid = started["sessionId"]
        await wait_idle(owner, counter, sid)
        events_before = (
            await owner.result(next(counter), protocol.GET_EVENTS, {"sessionId": sid})
        )["events"]
        agents_before = sorted(processes_with_env(str(config), exclude=(process.pid,)))

        # The fuzzing client's claudePath names no binary: a start that passes every check fails
        # with ClaudeUnavailable instead of starting a real agent.
        fuzzer = await connect_tcp(port)
        await fuzzer.initialize(workspace, {"claudePath": str(tmp_path / "no-such-claude")})

        harmless = [protocol.GET_EVENTS, protocol.GET_CHANGES, protocol.STOP_TASK]
        harmless += [protocol.APPLY_CHANGES, protocol.DISCARD_CHANGES]
        requests = st.sampled_from(list(protocol.REQUESTS)).flatmap(
            lambda method: st.tuples(
                st.just(method),
                json_values
                | near_valid(
                    method,
                    {
                        "sessionId": ids("s", [sid] if method in harmless else []),
                        "forkId": ids("f", []),
                        # Not a real agent that may be installed (codex): a start must not
                        # succeed, whichever way the draws fall.
                        "agent": st.sampled_from(["claude", "nobody"]) | any_text,
                        "cwd": st.sampled_from(
                            [str(workspace), str(workspace / "a-file"), "/", "~", "", "\x00"]
                        )
                        | any_text,
                    },
                ),
            )
        )
        run = on_loop(asyncio.get_running_loop())
        seen: dict[str, set[int | str]] = {}

        @fuzz_settings(240)
        @given(requests)
        # One start that passes every check for sure: how many of the drawn ones do depends on
        # how the draws fall among the methods (more methods, fewer starts), and the test must
        # not hang on that to see a start reach the agent (ClaudeUnavailable below).
        @example((protocol.START_SESSION, {"prompt": "Fuzz me", "cwd": str(workspace)}))
        def fuzz(request: tuple[str, Any]) -> None:
            method, params = request
            msg_id = next(counter)
            answer = run(fuzzer.call(msg_id, method, params))
            if "result" in answer:
                # Only what reads may succeed: nothing the fuzzing sends may change a session.
                assert method in (protocol.LIST_SESSIONS, protocol.GET_EVENTS), (method, answer)
                seen.setdefault(method, set()).add("result")
            else:
                error = assert_documented_error(answer, msg_id)
                seen.setdefault(method, set()).add(error["code"])

        await asyncio.to_thread(fuzz)

        # Every method was tried, and the fuzzing reached past the params check.
        assert set(seen) == set(protocol.REQUESTS), seen
        assert protocol.ErrorCode.ClaudeUnavailable in seen[protocol.START_SESSION], seen
        reached = set().union(*seen.values())
        codes = protocol.ErrorCode
        assert {codes.SessionNotFound, codes.ForkNotFound, codes.InvalidState} <= reached, seen

        # Half a surrogate pair is valid JSON but no UTF-8: refused up front, for the session
        # that is running too (such a prompt used to hang its session in `starting`).
        for conn, method, params in [
            (fuzzer, protocol.START_SESSION, {"prompt": "Hello \ud800 there"}),
            (owner, protocol.SEND_MESSAGE, {"sessionId": sid, "text": "After \udfff"}),
            (owner, protocol.FORK, {"sessionId": sid, "tasks": ["a", "b\ud83d"]}),
        ]:
            msg_id = next(counter)
            error = assert_documented_error(await conn.call(msg_id, method, params), msg_id)
            assert error["code"] == protocol.ErrorCode.InvalidParams, error
            assert "unpaired surrogate" in error["message"], error

        assert process.returncode is None, "the server died"
        listed = (await owner.result(next(counter), protocol.LIST_SESSIONS))["sessions"]
        assert [(s["sessionId"], s["status"]) for s in listed] == [(sid, "idle")]
        after = await owner.result(next(counter), protocol.GET_EVENTS, {"sessionId": sid})
        assert after["events"] == events_before
        assert sorted(processes_with_env(str(config), exclude=(process.pid,))) == agents_before
        # The session still works.
        await owner.result(
            next(counter), protocol.SEND_MESSAGE, {"sessionId": sid, "text": "After the fuzz"}
        )

        result = await owner.notification(
            lambda n: (
                n["params"].get("kind") == "turnResult"
                and n["params"]["sessionId"] == sid
                and n["params"]["seq"] > events_before[-1]["seq"]
            ),
            timeout=90,
        )
        assert result["params"]["text"] == "Still here."
    finally:
        for conn in (owner, fuzzer):
            if conn is not None:
                conn.writer.close()
        if process.returncode is None:
            process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 30)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    await wait_until(lambda: not processes_with_env(str(config)), 30, "agent processes to end")
    assert "Traceback" not in server_log(tmp_path)


# --- frames --------------------------------------------------------------------------------------


def request_body(msg_id: Any, method: str = protocol.LIST_SESSIONS, params: Any = None) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}).encode()


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.fixture
async def stdio(tmp_path: Path) -> AsyncIterator[tuple[asyncio.subprocess.Process, RawLsp]]:
    """`python -m coven_ls` on a raw pipe, initialized; checked at the end to have left no
    process and logged no traceback."""
    env = server_env(tmp_path)
    process, conn = await start_stdio(tmp_path, env)
    try:
        await conn.initialize(tmp_path)
        yield process, conn
        if process.returncode is None and not conn.writer.is_closing():
            await conn.send({"jsonrpc": "2.0", "method": "exit"})
            conn.writer.close()
        await asyncio.wait_for(process.wait(), 30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert not processes_with_env(env["CLAUDE_CONFIG_DIR"]), "the server left a process behind"
    assert "Traceback" not in server_log(tmp_path)


async def answered_after(conn: RawLsp, msg_id: str) -> None:
    """A well-formed request right after is answered as usual: the connection goes on."""
    assert (await conn.result(msg_id, protocol.LIST_SESSIONS))["sessions"] == []


async def test_recoverable_frames_are_answered_and_the_connection_goes_on(
    stdio: tuple[asyncio.subprocess.Process, RawLsp],
) -> None:
    process, conn = stdio
    # Headers as clients really send them: other fields, any casing, bare LF, stray blank lines.
    body = request_body("casing")
    await conn.write(
        b"\r\n\r\ncontent-LENGTH:   %d  \nContent-Type: application/vscode-jsonrpc; charset=utf-8"
        b"\r\nX-Client: fuzz\r\n\r\n%s" % (len(body), body)
    )
    assert (await conn.response("casing"))["result"] == {"sessions": []}

    parse_errors: list[bytes] = [
        b"",  # Content-Length: 0
        b"\xff\xfe{}",  # not UTF-8
        b'{"jsonrpc": "2.0", "id": "cut", "method": "coven/listSe',  # truncated
        b"not json at all",
        b'{"jsonrpc": "2.0", "id": "n", "method": "coven/getEvents", "params": '
        b'{"sessionId": "s", "afterSeq": ' + b"9" * 5000 + b"}}",  # too long for Python's int()
        nested(100_000),  # too deep for the JSON parser
    ]
    for i, bad in enumerate(parse_errors):
        await conn.write(frame(bad))
        error = assert_documented_error(await conn.response(None), None)
        assert error["code"] == protocol.ErrorCode.ParseError, (bad[:80], error)
        await answered_after(conn, f"after-parse-error-{i}")

    invalid_requests: list[tuple[bytes, Any]] = [
        (b"5", None),
        (b'"coven/listSessions"', None),
        (b"null", None),
        (b"[]", None),
        # A batch: LSP has none, and neither request in it may run.
        (b"[" + request_body("b1") + b"," + request_body("b2") + b"]", None),
        (b"{}", None),
        (b'{"jsonrpc": "2.0", "id": 7}', 7),
        (b'{"jsonrpc": "2.0", "id": 8, "method": 5}', 8),
        (b'{"jsonrpc": "2.0", "id": 9.5, "method": "coven/listSessions"}', None),
        (b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "coven/listSessions"}', None),
        (request_body(10, protocol.GET_EVENTS, json.loads(nested(100))), 10),
    ]
    for i, (bad, msg_id) in enumerate(invalid_requests):
        await conn.write(frame(bad))
        error = assert_documented_error(await conn.response(msg_id), msg_id)
        assert error["code"] == protocol.ErrorCode.InvalidRequest, (bad[:80], error)
        await answered_after(conn, f"after-invalid-request-{i}")

    # 50 MB: skipped unread (the server's memory does not grow by it) and refused with a reason.
    before = peak_rss_kib(process.pid)
    big = request_body("big", protocol.START_SESSION, {"prompt": "x" * (50 * 2**20)})
    await conn.write(frame(big))
    error = assert_documented_error(await conn.response(None, timeout=60), None)
    assert error["code"] == protocol.ErrorCode.InvalidRequest
    assert f"a message of {len(big)} bytes" in error["message"]
    assert "larger than" in error["message"] and "skipped" in error["message"]
    assert peak_rss_kib(process.pid) - before < 20 * 2**10
    await answered_after(conn, "after-big")

    # Arbitrary bodies in good frames: each a ParseError or an InvalidRequest, then business as
    # usual.
    run = on_loop(asyncio.get_running_loop())
    counter = itertools.count()
    bodies = st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()).filter(
        lambda b: not b.startswith(b"{")
    )

    @fuzz_settings(80)
    @given(bodies)
    def fuzz(body: bytes) -> None:
        try:
            value = json.loads(body.decode("utf-8"))
            expected = protocol.ErrorCode.InvalidRequest
            if isinstance(value, dict):
                return  # a real message, perhaps; the params fuzzing covers those
        except ValueError:
            expected = protocol.ErrorCode.ParseError
        run(conn.write(frame(body)))
        error = assert_documented_error(run(conn.response(None)), None)
        assert error["code"] == expected, (body, error)
        run(answered_after(conn, f"after-fuzz-{next(counter)}"))

    await asyncio.to_thread(fuzz)
    assert process.returncode is None and conn.server_requests == []


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        pytest.param(
            b"Content-Type: application/json\r\n\r\n{}", "without Content-Length", id="missing"
        ),
        pytest.param(b"Content-Length: -5\r\n\r\n{}", "'-5' is not a number", id="negative"),
        pytest.param(b"Content-Length: twelve\r\n\r\n{}", "'twelve' is not", id="non-numeric"),
        pytest.param(b"Content-Length: 2e3\r\n\r\n{}", "'2e3' is not", id="float"),
        pytest.param(b"Content-Length 2\r\n\r\n{}", "not 'Name: value'", id="no-colon"),
        pytest.param(
            b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", "disagree", id="two-lengths"
        ),
        pytest.param(b"X-Long: " + b"a" * 100_000, "too long", id="endless-header-line"),
        pytest.param(b"Content-Length: 9999\r\n\r\n{}", "ended inside a body", id="too-big"),
        pytest.param(b"Content-Length: 2\r\n", "ended inside a header", id="truncated-header"),
    ],
)
async def test_lost_framing_ends_the_connection_cleanly(
    stdio: tuple[asyncio.subprocess.Process, RawLsp], data: bytes, reason: str
) -> None:
    """Where the next message starts is unknown: one ParseError says why and how to frame a
    message, then the server closes the connection (on stdio: exits, its sessions closed) rather
    than read bodies as headers, silently, for good."""
    process, conn = stdio
    await conn.write(data)
    if reason.startswith("ended inside"):
        conn.writer.close()  # the end of the input is what makes these unrecoverable
    error = assert_documented_error(await conn.response(None), None)
    assert error["code"] == protocol.ErrorCode.ParseError
    assert reason in error["message"] and "Content-Length: N" in error["message"], error
    with pytest.raises(EOFError):
        await conn.response("nothing more", timeout=30)
    assert await asyncio.wait_for(process.wait(), 30) == 1


async def test_a_too_short_content_length_loses_the_framing(
    stdio: tuple[asyncio.subprocess.Process, RawLsp],
) -> None:
    """The body is cut short (a ParseError), and the rest of it is then read as a header: the
    framing is lost and the connection ends, instead of every later message being swallowed."""
    process, conn = stdio
    body = request_body("short")
    await conn.write(b"Content-Length: %d\r\n\r\n%s" % (len(body) - 5, body))
    assert assert_documented_error(await conn.response(None), None)["code"] == -32700
    await conn.write(frame(request_body("next")))
    lost = assert_documented_error(await conn.response(None), None)
    assert "framing of the input is lost" in lost["message"]
    with pytest.raises(EOFError):
        await conn.response("next", timeout=30)
    assert await asyncio.wait_for(process.wait(), 30) == 1


async def test_a_reset_tcp_connection_ends_quietly(tmp_path: Path) -> None:
    """A client whose connection is reset (not closed in order) is one that went away: the
    server logs no traceback for it and goes on serving others."""
    process, port = await start_tcp(tmp_path, server_env(tmp_path))
    try:
        for _ in range(3):
            reset = await connect_tcp(port)
            await reset.initialize(tmp_path)
            await reset.write(b"Content-Length: 40\r\n")  # the server waits for the rest
            sock = reset.writer.get_extra_info("socket")
            # Linger 0: close() sends a reset instead of a FIN.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            reset.writer.transport.abort()
        other = await connect_tcp(port)
        await other.initialize(tmp_path)
        assert (await other.result(1, protocol.LIST_SESSIONS))["sessions"] == []
        other.writer.close()
        await wait_until(lambda: server_log(tmp_path).count("connection broke") == 3, 30, "resets")
    finally:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 30)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert "Traceback" not in server_log(tmp_path)
