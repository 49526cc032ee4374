"""Tests for the scripted model: HTTP-level behaviour, scripts, the process, the real CLI."""

from __future__ import annotations

import http.client
import json
import os
import queue
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coven_ls.core.fork.results import TaskResult, compose_results
from coven_ls.core.fork.tag import child_prompt, parse_fork_tag
from coven_ls.testing.scripted_model import (
    DEFAULT_TEXT,
    HttpError,
    ModelRequest,
    Reply,
    Rule,
    ScriptedModel,
    Text,
    Thinking,
    ToolUse,
    Usage,
    load_script,
    parse_request,
    reply,
)

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "examples" / "fork-script.yaml"


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel() as m:
        yield m


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def body(*messages: dict[str, Any], stream: bool = True, **extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-test-1",
        "max_tokens": 100,
        "stream": stream,
        "messages": list(messages),
        **extra,
    }


def request(
    m: ScriptedModel,
    method: str,
    path: str,
    payload: dict[str, Any] | None = None,
    timeout: float = 10,
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", m.port, timeout=timeout)
    try:
        data = None if payload is None else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def post(m: ScriptedModel, payload: dict[str, Any], path: str = "/v1/messages?beta=true"):
    return request(m, "POST", path, payload)


def sse(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    frames = []
    for chunk in raw.decode().split("\n\n"):
        if not chunk.strip():
            continue
        lines = dict(line.split(": ", 1) for line in chunk.splitlines())
        data = json.loads(lines["data"])
        assert data["type"] == lines["event"]
        frames.append((lines["event"], data))
    return frames


def stream(m: ScriptedModel, text: str) -> list[tuple[str, dict[str, Any]]]:
    status, headers, raw = post(m, body(user(text)))
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    return sse(raw)


def deltas(frames: list[tuple[str, dict[str, Any]]], index: int) -> list[dict[str, Any]]:
    return [d["delta"] for e, d in frames if e == "content_block_delta" and d["index"] == index]


def text_of(frames: list[tuple[str, dict[str, Any]]]) -> str:
    return "".join(d["delta"].get("text", "") for e, d in frames if e == "content_block_delta")


# --------------------------------------------------------------------------- streaming


def test_stream_frame_order_and_contents(model: ScriptedModel) -> None:
    model.on("hello", "Hello world")
    frames = stream(model, "well hello there")
    assert [e for e, _ in frames] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    msg = frames[0][1]["message"]
    assert re.fullmatch(r"msg_scripted_\d+", msg["id"])
    assert msg["role"] == "assistant" and msg["type"] == "message"
    assert msg["model"] == "claude-test-1"
    assert msg["content"] == [] and msg["stop_reason"] is None
    assert msg["usage"]["input_tokens"] >= 1
    assert frames[1][1] == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    assert deltas(frames, 0) == [{"type": "text_delta", "text": "Hello world"}]
    assert frames[3][1] == {"type": "content_block_stop", "index": 0}
    assert frames[4][1]["delta"]["stop_reason"] == "end_turn"
    assert frames[4][1]["usage"]["output_tokens"] >= 1

    second = stream(model, "hello again")
    assert second[0][1]["message"]["id"] != msg["id"]
    (req, _) = model.wait_for_requests(2)
    assert req.rule_index == 0 and req.finished is not None and not req.aborted
    assert req.path == "/v1/messages?beta=true"


def test_text_is_split_by_chunk_chars(model: ScriptedModel) -> None:
    model.on("go", "abcdefgh", chunk_chars=3)
    frames = stream(model, "go")
    assert [d["text"] for d in deltas(frames, 0)] == ["abc", "def", "gh"]


def test_plain_messages_path_without_beta(model: ScriptedModel) -> None:
    model.on("x", "plain")
    status, _, raw = post(model, body(user("x")), path="/v1/messages")
    assert status == 200
    assert text_of(sse(raw)) == "plain"


def test_tool_use_streams_input_json_that_reassembles(model: ScriptedModel) -> None:
    args = {"command": "echo hi && ls -la /tmp", "timeout": 5, "list": [1, 2, {"a": "é"}]}
    model.on("run", "Running.", ToolUse("Bash", args), chunk_chars=7)
    frames = stream(model, "run it")
    start = frames[[e for e, _ in frames].index("content_block_start", 2)][1]
    block = start["content_block"]
    assert start["index"] == 1
    assert block["type"] == "tool_use" and block["name"] == "Bash" and block["input"] == {}
    assert re.fullmatch(r"toolu_\w+", block["id"])
    parts = deltas(frames, 1)
    assert len(parts) > 1 and all(p["type"] == "input_json_delta" for p in parts)
    assert all(len(p["partial_json"]) <= 7 for p in parts)
    assert json.loads("".join(p["partial_json"] for p in parts)) == args
    assert frames[-2][1]["delta"]["stop_reason"] == "tool_use"
    # A reused Reply must not reuse tool ids: the CLI pairs results to uses by id.
    again = stream(model, "run it")
    (again_block,) = [
        d["content_block"]
        for e, d in again
        if e == "content_block_start" and d["content_block"]["type"] == "tool_use"
    ]
    assert again_block["id"] != block["id"]


def test_tool_use_with_explicit_id(model: ScriptedModel) -> None:
    model.on("x", ToolUse("Read", {"file_path": "/a"}, id="toolu_fixed"))
    frames = stream(model, "x")
    assert frames[1][1]["content_block"]["id"] == "toolu_fixed"


def test_thinking_block_carries_signature(model: ScriptedModel) -> None:
    model.on("think", Thinking("step one, step two"), "Answer", chunk_chars=8)
    frames = stream(model, "think hard")
    starts = [d for e, d in frames if e == "content_block_start"]
    assert starts[0]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    assert starts[1]["content_block"]["type"] == "text"
    parts = deltas(frames, 0)
    assert [p["type"] for p in parts] == ["thinking_delta"] * 3 + ["signature_delta"]
    assert "".join(p["thinking"] for p in parts[:-1]) == "step one, step two"
    assert parts[-1]["signature"]
    assert [d["text"] for d in deltas(frames, 1)] == ["Answer"]
    assert frames[-2][1]["delta"]["stop_reason"] == "end_turn"


def test_non_streaming_message(model: ScriptedModel) -> None:
    model.on("q", Thinking("hmm"), "A", ToolUse("Bash", {"command": "true"}))
    status, headers, raw = post(model, body(user("q"), stream=False))
    assert status == 200 and headers["content-type"] == "application/json"
    msg = json.loads(raw)
    assert msg["type"] == "message" and msg["id"].startswith("msg_scripted_")
    assert [b["type"] for b in msg["content"]] == ["thinking", "text", "tool_use"]
    assert msg["content"][0]["signature"]
    assert msg["content"][2]["input"] == {"command": "true"}
    assert msg["content"][2]["id"].startswith("toolu_")
    assert msg["stop_reason"] == "tool_use"
    assert set(msg["usage"]) >= {"input_tokens", "output_tokens"}


def test_http_error_reply(model: ScriptedModel) -> None:
    model.on("boom", Reply(error=HttpError(529, "too busy", "overloaded_error")))
    model.on("fatal", Reply(error=HttpError(should_retry=False)))
    status, headers, raw = post(model, body(user("boom")))
    assert status == 529
    assert json.loads(raw) == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "too busy"},
    }
    assert "x-should-retry" not in headers
    status, headers, raw = post(model, body(user("fatal")))
    assert status == 500 and headers["x-should-retry"] == "false"
    assert json.loads(raw)["error"] == {"type": "api_error", "message": "scripted failure"}
    assert [r.rule_index for r in model.requests] == [0, 1]


def test_latency_delays_the_first_byte(model: ScriptedModel) -> None:
    model.on("slow", "ok", latency=0.3)
    started = time.monotonic()
    frames = stream(model, "slow")
    assert time.monotonic() - started >= 0.3
    assert text_of(frames) == "ok"
    (req,) = model.requests
    assert req.finished is not None and req.finished - req.time >= 0.3


def test_client_hanging_up_mid_stream_is_recorded_and_harmless(model: ScriptedModel) -> None:
    model.on("long", "x" * 400, chunk_chars=4, chunk_delay=0.02)
    model.on("after", "still here")
    conn = http.client.HTTPConnection("127.0.0.1", model.port, timeout=10)
    conn.request("POST", "/v1/messages", body=json.dumps(body(user("long"))))
    resp = conn.getresponse()
    first = resp.fp.readline()  # chunk size line of message_start: streaming has begun
    assert first.strip()
    conn.close()
    resp.close()
    (req,) = model.wait_for_requests(1, timeout=10, predicate=lambda r: r.aborted)
    assert req.finished is None
    assert text_of(stream(model, "after")) == "still here"


def test_empty_reply_and_default(model: ScriptedModel) -> None:
    model.on("nothing", reply())
    assert [e for e, _ in stream(model, "nothing")][1:] == ["message_delta", "message_stop"]
    assert text_of(stream(model, "unscripted")) == DEFAULT_TEXT
    assert model.requests[-1].rule_index is None


def test_custom_default() -> None:
    with ScriptedModel(default=reply("fallback")) as m:
        assert text_of(stream(m, "anything")) == "fallback"


# --------------------------------------------------------------------------- rules


def test_rules_in_order_and_times(model: ScriptedModel) -> None:
    first = model.on("same", "first", times=1)
    model.on("same", "second")
    model.add(Rule("added", reply("late rule")))
    assert text_of(stream(model, "same")) == "first"
    assert text_of(stream(model, "same")) == "second"
    assert text_of(stream(model, "same")) == "second"
    assert text_of(stream(model, "added later")) == "late rule"
    assert first.fired == 1 and not first.live
    assert [r.rule_index for r in model.requests] == [0, 1, 1, 2]


def test_times_holds_under_concurrency(model: ScriptedModel) -> None:
    model.on("race", "winner", times=3)
    results: list[str] = []
    lock = threading.Lock()

    def hit() -> None:
        text = text_of(stream(model, "race"))
        with lock:
            results.append(text)

    threads = [threading.Thread(target=hit) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(results).count("winner") == 3 and len(results) == 10


def test_regex_and_callable_matching(model: ScriptedModel) -> None:
    model.on(re.compile(r"^fix \w+$"), "fixing")
    model.on(lambda r: r.model.startswith("claude-haiku"), "small model")
    model.on("echo", lambda r: reply(f"you said: {r.last_user_text}"))
    assert text_of(stream(model, "fix bug")) == "fixing"
    assert text_of(stream(model, "please fix bug")) == DEFAULT_TEXT
    _, _, raw = post(model, {**body(user("x")), "model": "claude-haiku-9"})
    assert text_of(sse(raw)) == "small model"
    assert text_of(stream(model, "echo me")) == "you said: echo me"


def test_a_raising_rule_answers_an_error(model: ScriptedModel) -> None:
    model.on("bad", lambda r: 1 / 0)
    status, headers, raw = post(model, body(user("bad")))
    assert status == 500 and headers["x-should-retry"] == "false"
    assert "ZeroDivisionError" in json.loads(raw)["error"]["message"]
    assert text_of(stream(model, "fine")) == DEFAULT_TEXT


def test_on_with_reply_object_and_bad_kwargs(model: ScriptedModel) -> None:
    rule = model.on("r", Reply((Text("t"),), chunk_chars=1))
    assert isinstance(rule.reply, Reply) and rule.reply.chunk_chars == 1
    with pytest.raises(TypeError):
        model.on("r", Reply(), latency=1)
    with pytest.raises(TypeError):
        Reply(blocks=("not a block",))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- request parsing


def test_last_user_text_and_all_text_extraction(model: ScriptedModel) -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": "<system-reminder>\nCLAUDE.md says hi\n</system-reminder>",
                },
                {"type": "text", "text": "list the files"},
            ],
        },
        {"role": "system", "content": "# Environment\ncwd: /x"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}},
                {"type": "tool_use", "id": "t2", "name": "Read", "input": {"file_path": "/a"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "a.txt\nb.txt"},
                {
                    "type": "tool_result",
                    "tool_use_id": "t2",
                    "content": [
                        {"type": "text", "text": "contents of a"},
                        {"type": "image", "source": {}},
                    ],
                },
                {
                    "type": "text",
                    "text": "before <system-reminder>noise</system-reminder> after",
                },
            ],
        },
    ]
    system = [{"type": "text", "text": "You are scripted."}, {"type": "text", "text": "Be nice."}]
    post(model, body(*messages, system=system))
    (req,) = model.requests
    assert req.last_user_text == "a.txt\nb.txt\ncontents of a\nbefore  after"
    assert "noise" not in req.last_user_text
    for seen in ("list the files", "Let me look.", '{"command": "ls"}', "contents of a"):
        assert seen in req.all_text
    assert req.system_text == "You are scripted.\nBe nice."
    assert req.model == "claude-test-1" and req.messages == messages
    assert req.body["system"] == system
    assert req.is_main_turn  # not a haiku model


def test_parse_request_edge_cases() -> None:
    req = parse_request("/v1/messages", {"system": "plain system"}, 1.0)
    assert req.last_user_text == "" and req.all_text == "" and req.system_text == "plain system"
    side = parse_request("/v1/messages", {"model": "claude-haiku-4-5", "messages": []}, 1.0)
    assert not side.is_main_turn
    tools = {"model": "claude-haiku-4-5", "tools": [{"name": "Bash"}], "messages": []}
    assert parse_request("/v1/messages", tools, 1.0).is_main_turn


# --------------------------------------------------------------------------- other endpoints


def test_count_tokens(model: ScriptedModel) -> None:
    status, _, raw = post(
        model, body(user("count me " * 50), stream=False), path="/v1/messages/count_tokens"
    )
    assert status == 200
    tokens = json.loads(raw)["input_tokens"]
    assert isinstance(tokens, int) and tokens > 10
    assert model.requests == []
    assert [(m, p) for _, m, p in model.other_requests] == [("POST", "/v1/messages/count_tokens")]


def test_head_get_and_unknown_paths(model: ScriptedModel) -> None:
    status, _, raw = request(model, "HEAD", "/api/hello")
    assert status == 200 and raw == b""
    assert request(model, "GET", "/anything/at/all")[0] == 200
    for method, path in (("POST", "/v1/complete"), ("DELETE", "/v1/messages"), ("PUT", "/")):
        status, _, raw = request(model, method, path, {})
        assert status == 404, (method, path)
        assert json.loads(raw)["error"]["type"] == "not_found_error"
    status, _, raw = request(model, "POST", "/v1/messages")
    assert status == 200  # an empty body is an empty request, answered by the default
    conn = http.client.HTTPConnection("127.0.0.1", model.port, timeout=10)
    conn.request("POST", "/v1/messages", body=b"{not json")
    resp = conn.getresponse()
    assert resp.status == 400 and json.loads(resp.read())["error"]["type"]
    conn.close()


# --------------------------------------------------------------------------- lifecycle


@pytest.mark.parametrize("host", ["0.0.0.0", "", "192.168.1.10", "example.com", "::1", "::"])
def test_refuses_non_loopback_hosts(host: str) -> None:
    with pytest.raises(ValueError, match="loopback"):
        ScriptedModel(host=host)


def test_loopback_aliases_and_idempotent_lifecycle() -> None:
    m = ScriptedModel(host="localhost")
    with pytest.raises(RuntimeError):
        _ = m.url
    url = m.start()
    assert m.start() == url == f"http://127.0.0.1:{m.port}" == m.url
    m.stop()
    m.stop()
    ScriptedModel(host="127.0.0.2")  # the whole 127/8 range is loopback


def test_stop_does_not_wait_for_idle_keepalive_connections() -> None:
    m = ScriptedModel()
    m.start()
    conn = http.client.HTTPConnection("127.0.0.1", m.port, timeout=10)
    conn.request("POST", "/v1/messages", body=json.dumps(body(user("hi"))))
    conn.getresponse().read()  # connection stays open (HTTP/1.1 keep-alive)
    m.on("slow", "x" * 100, chunk_chars=1, chunk_delay=1.0)

    outcome: queue.Queue[BaseException | None] = queue.Queue()

    def cut_short() -> None:
        try:
            post(m, body(user("slow")))
        except (http.client.IncompleteRead, OSError) as exc:
            outcome.put(exc)
        else:
            outcome.put(None)

    slow = threading.Thread(target=cut_short, daemon=True)
    slow.start()
    m.wait_for_requests(2, timeout=10)
    stopper = threading.Thread(target=m.stop)
    stopper.start()
    stopper.join(timeout=10)
    assert not stopper.is_alive(), "stop() hung on open connections"
    conn.close()
    assert outcome.get(timeout=10) is not None, "the slow answer was not cut short"
    # stop() does not wait for the handler thread to mark its request (a busy machine may run
    # it later): wait on the record, not on time.
    (aborted,) = m.wait_for_requests(1, timeout=10, predicate=lambda r: r.aborted)
    assert aborted is m.requests[1]


def test_wait_for_requests_and_timeout_message(model: ScriptedModel) -> None:
    stream(model, "first message")
    assert len(model.wait_for_requests(1, timeout=5)) == 1
    with pytest.raises(TimeoutError) as info:
        model.wait_for_requests(2, timeout=0.2)
    text = str(info.value)
    assert "for 2 requests, got 1" in text and "first message" in text
    with pytest.raises(TimeoutError, match="matching requests, got 0; 1 arrived"):
        model.wait_for_requests(1, timeout=0.1, predicate=lambda r: "other" in r.last_user_text)
    waiter_result: queue.Queue[list[ModelRequest]] = queue.Queue()
    threading.Thread(
        target=lambda: waiter_result.put(
            model.wait_for_requests(1, timeout=10, predicate=lambda r: "second" in r.all_text)
        ),
        daemon=True,
    ).start()
    stream(model, "second message")
    (hit,) = waiter_result.get(timeout=10)
    assert hit.last_user_text == "second message"
    model.clear()
    assert model.requests == []


def test_cli_env(model: ScriptedModel, tmp_path: Path) -> None:
    env = model.cli_env(tmp_path)
    assert env == {
        "ANTHROPIC_BASE_URL": model.url,
        "ANTHROPIC_API_KEY": env["ANTHROPIC_API_KEY"],
        "CLAUDE_CONFIG_DIR": str(tmp_path),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    assert env["ANTHROPIC_API_KEY"]
    full = model.cli_environ(tmp_path, base={"PATH": "/bin", "CLAUDECODE": "1"})
    assert full["PATH"] == "/bin" and "CLAUDECODE" not in full
    assert full["ANTHROPIC_BASE_URL"] == model.url


# --------------------------------------------------------------------------- script files

SCRIPT_YAML = """\
default: "fallback text"
rules:
  - match: "hello"
    times: 1
    latency: 0.01
    chunk_chars: 4
    reply:
      - thinking: "Let me think"
      - "Some text"
      - tool_use: {name: Bash, input: {command: "echo hi"}}
  - regex: "^fix .*"
    reply: "fixed"
  - match: "boom"
    error: {status: 500, message: "scripted failure"}
"""


def test_load_script_from_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "script.yaml"
    path.write_text(SCRIPT_YAML)
    with load_script(path) as m:
        frames = stream(m, "hello")
        kinds = [d["content_block"]["type"] for e, d in frames if e == "content_block_start"]
        assert kinds == ["thinking", "text", "tool_use"]
        assert [d["text"] for d in deltas(frames, 1)] == ["Some", " tex", "t"]
        assert json.loads("".join(d["partial_json"] for d in deltas(frames, 2))) == {
            "command": "echo hi"
        }
        assert text_of(stream(m, "hello")) == "fallback text"  # times: 1 spent
        assert text_of(stream(m, "fix it")) == "fixed"
        status, _, raw = post(m, body(user("boom")))
        assert status == 500 and json.loads(raw)["error"]["message"] == "scripted failure"


def test_load_script_from_dict() -> None:
    m = load_script(
        {
            "default": {"reply": ["d1", {"text": "d2"}], "latency": 0.5},
            "rules": [
                {"match": "a", "reply": "just a string"},
                {"regex": "b+", "times": 2, "chunk_delay": 0.1, "reply": [{"thinking": "t"}]},
                {
                    "match": "c",
                    "error": {"status": 429, "message": "slow down", "type": "rate_limit_error"},
                },
                {"match": "d", "reply": [{"tool_use": {"name": "X", "id": "toolu_1"}}]},
            ],
        }
    )
    rules = m.rules
    assert rules[0].match == "a" and rules[0].reply == reply("just a string")
    assert isinstance(rules[1].match, re.Pattern) and rules[1].times == 2
    assert rules[1].reply == Reply((Thinking("t"),), chunk_delay=0.1)
    assert rules[2].reply == Reply(error=HttpError(429, "slow down", "rate_limit_error"))
    assert rules[3].reply == reply(ToolUse("X", {}, "toolu_1"))
    assert m.default == Reply((Text("d1"), Text("d2")), latency=0.5)
    assert load_script({}).default.blocks == (Text(DEFAULT_TEXT),)


@pytest.mark.parametrize(
    "script",
    [
        {"rules": [{"match": "a", "regex": "b", "reply": "x"}]},
        {"rules": [{"reply": "x"}]},
        {"rules": [{"match": "a"}]},
        {"rules": [{"match": "a", "reply": "x", "typo": 1}]},
        {"rules": [{"match": "a", "reply": [{"image": "x"}]}]},
        {"rules": [{"match": "a", "error": {"code": 1}}]},
        {"rules": [{"match": "a", "error": {"should_retry": "no"}}]},
        {"rules": [{"match": "a", "reply": "x", "error": {"status": 500}}]},
        {"default": {"text": "an empty answer, were it allowed"}},
        {"default": {"reply": "x", "times": 1}},
        {"rulez": []},
    ],
)
def test_load_script_rejects_bad_scripts(script: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        load_script(script)


def test_script_errors_can_forbid_retries() -> None:
    # Without x-should-retry: false the CLI retries a 5xx ten times over about three minutes.
    m = load_script(
        {
            "rules": [
                {"match": "a", "error": {"status": 529, "should_retry": False}},
                {"match": "b", "error": {"should_retry": True}},
            ],
            "default": {"error": {"message": "nothing scripted"}, "latency": 0.1},
        }
    )
    assert [r.reply.error for r in m.rules] == [  # type: ignore[union-attr]
        HttpError(529, should_retry=False),
        HttpError(should_retry=True),
    ]
    assert m.default == Reply(latency=0.1, error=HttpError(message="nothing scripted"))
    with m:
        status, headers, _ = post(m, body(user("a")))
        assert status == 529 and headers["x-should-retry"] == "false"


def test_documented_example_answers_every_step_of_the_fork() -> None:
    """docs/examples/fork-script.yaml, request by request, with coven-ls' own fork parser and
    the messages coven-ls really sends to children and back to the parent."""
    with load_script(EXAMPLE) as m:
        frames = stream(m, "Run the tests")
        starts = [d["content_block"] for e, d in frames if e == "content_block_start"]
        assert [b["type"] for b in starts] == ["thinking", "text", "tool_use"]
        assert starts[2]["name"] == "Bash"
        call = json.loads("".join(d["partial_json"] for d in deltas(frames, 2)))
        assert call == {"command": "echo '3 passed, 0 failed'"}
        assert frames[-2][1]["delta"]["stop_reason"] == "tool_use"
        assert text_of(stream(m, "3 passed, 0 failed")) == "All 3 tests pass."

        plan = text_of(stream(m, "Plan the release"))
        assert "<fork>\n- Write the docs\n- Fix the bugs\n</fork>" in plan
        labels = parse_fork_tag(plan, max_children=5)
        assert labels == ["Write the docs", "Fix the bugs"]
        answers = [text_of(stream(m, child_prompt(label, labels))) for label in labels]
        assert answers == ["The docs are written.", "The bugs are fixed."]
        results = compose_results(
            [
                TaskResult(label, f"s-{i}", ok=True, text=answer)
                for i, (label, answer) in enumerate(zip(labels, answers, strict=True))
            ]
        )
        assert text_of(stream(m, results)).startswith("Both tasks are done")
        assert text_of(stream(m, "something else")) == "I have no scripted answer for that."
        assert [r.rule_index for r in m.requests] == [0, 1, 2, 3, 4, 5, None]


def test_docs_show_the_example_file_as_it_is() -> None:
    docs = (REPO / "docs" / "testing.md").read_text(encoding="utf-8")
    assert f"```yaml\n{EXAMPLE.read_text(encoding='utf-8')}```" in docs


# --------------------------------------------------------------------------- usage, retry
# headers, broken streams, subagents (what docs/cli-facts.md relies on)


def test_scripted_usage_in_message_start_delta_and_json(model: ScriptedModel) -> None:
    usage = Usage(100, 20, cache_read_input_tokens=1000, cache_creation_input_tokens=50)
    model.on("count", "Counted.", usage=usage)
    frames = stream(model, "count")
    start = frames[0][1]["message"]["usage"]
    split = {"ephemeral_5m_input_tokens": 50, "ephemeral_1h_input_tokens": 0}
    assert start == {
        "input_tokens": 100,
        "output_tokens": 1,
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 50,
        "cache_creation": split,
    }
    (delta,) = [d for e, d in frames if e == "message_delta"]
    assert delta["usage"] == {
        "input_tokens": 100,
        "output_tokens": 20,
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 50,
        "cache_creation": split,
    }
    _, _, raw = post(model, body(user("count"), stream=False))
    assert json.loads(raw)["usage"] == usage.as_dict()
    # Without a Usage: the prompt cache's charge (no breakpoints here: nothing cached), the
    # same in the start and at the end.
    model.on("plain", "x" * 40)
    frames = stream(model, "plain")
    (delta,) = [d for e, d in frames if e == "message_delta"]
    assert delta["usage"]["output_tokens"] == 10
    assert delta["usage"]["cache_read_input_tokens"] == 0
    assert delta["usage"]["input_tokens"] == frames[0][1]["message"]["usage"]["input_tokens"]


@pytest.mark.parametrize(
    "bad",
    [
        {"input_tokens": -1, "output_tokens": 1},
        {"input_tokens": 1.5, "output_tokens": 1},
        {"input_tokens": True, "output_tokens": 1},
        {"input_tokens": 1, "output_tokens": 1, "cache_read_input_tokens": -3},
        {"input_tokens": 1, "output_tokens": 1, "cache_creation_1h_input_tokens": 1},
    ],
)
def test_usage_rejects_bad_counts(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Usage(**bad)


def test_http_error_retry_after_headers(model: ScriptedModel) -> None:
    model.on("s", Reply(error=HttpError(529, retry_after=2, retry_after_ms=150)))
    model.on("f", Reply(error=HttpError(529, retry_after=0.5)))
    _, headers, _ = post(model, body(user("s")))
    assert headers["retry-after"] == "2" and headers["retry-after-ms"] == "150"
    _, headers, _ = post(model, body(user("f")))
    assert headers["retry-after"] == "0.5" and "retry-after-ms" not in headers
    with pytest.raises(ValueError):
        HttpError(retry_after=-1)


def read_until_broken(m: ScriptedModel, payload: dict[str, Any]) -> tuple[bytes, Exception | None]:
    conn = http.client.HTTPConnection("127.0.0.1", m.port, timeout=10)
    try:
        conn.request("POST", "/v1/messages", body=json.dumps(payload))
        resp = conn.getresponse()
        got = b""
        try:
            while chunk := resp.read1(65536):
                got += chunk
        except (http.client.HTTPException, OSError, ValueError) as exc:
            return got, exc
        if resp.length:  # read1 ends quietly where a Content-Length body falls short
            return got, http.client.IncompleteRead(got, resp.length)
        return got, None
    finally:
        conn.close()


def test_drop_after_breaks_the_stream_off_after_n_deltas(model: ScriptedModel) -> None:
    model.on("wobbly", "abcdefghij", chunk_chars=2, chunk_delay=0.01, drop_after=3, times=1)
    model.on("wobbly", "whole")
    got, broken = read_until_broken(model, body(user("wobbly")))
    assert broken is not None  # no end of the chunked body
    frames = sse(got)  # http.client took the chunking off
    assert [d["text"] for d in deltas(frames, 0)] == ["ab", "cd", "ef"]
    assert "message_delta" not in [e for e, _ in frames]
    (req,) = model.wait_for_requests(1, predicate=lambda r: r.aborted)
    assert req.dropped and req.finished is None
    assert text_of(stream(model, "wobbly")) == "whole"  # the server carries on
    assert not model.requests[1].dropped


def test_drop_after_zero_and_beyond_the_last_delta(model: ScriptedModel) -> None:
    model.on("zero", "abc", drop_after=0)
    model.on("late", "abc", chunk_chars=1, drop_after=99)
    got, broken = read_until_broken(model, body(user("zero")))
    assert broken is not None and b"message_start" in got and b"content_block" not in got
    got, broken = read_until_broken(model, body(user("late")))
    assert broken is not None
    assert got.count(b"text_delta") == 3 and b"content_block_stop" in got
    assert b"message_delta" not in got
    # Without streaming (the CLI's fallback), half of the JSON body, then the break.
    got, broken = read_until_broken(model, body(user("late"), stream=False))
    assert broken is not None and got.startswith(b'{"id": "msg_scripted_')
    assert all(r.dropped for r in model.wait_for_requests(3, predicate=lambda r: r.aborted))
    with pytest.raises(ValueError):
        Reply(drop_after=-1)


def test_error_after_ends_the_stream_with_an_error_event(model: ScriptedModel) -> None:
    overloaded = HttpError(529, "Overloaded", "overloaded_error")
    model.on("shaky", "abcdefghij", chunk_chars=2, error=overloaded, error_after=2)
    got, broken = read_until_broken(model, body(user("shaky")))
    assert broken is None  # a whole chunked body: the stream ends, the connection is fine
    frames = sse(got)
    assert [d["text"] for d in deltas(frames, 0)] == ["ab", "cd"]
    assert frames[-1] == (
        "error",
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    )
    assert "message_delta" not in [e for e, _ in frames]
    # Without streaming there is no middle: the HTTP status, as for any error.
    status, _, _ = post(model, body(user("shaky"), stream=False))
    assert status == 529
    assert [r.stream_error for r in model.requests] == [True, False]
    for bad in (
        {"error_after": 1},  # no error to send
        {"error": overloaded, "error_after": -1},
        {"error": overloaded, "error_after": 1, "drop_after": 1},
    ):
        with pytest.raises(ValueError):
            Reply(**bad)  # type: ignore[arg-type]


NOTIFICATION = """<system-reminder>
[SYSTEM NOTIFICATION - NOT USER INPUT]
This is an automated background-task event, NOT a message from the user.

<task-notification>
<task-id>a224b507d787de30f</task-id>
<tool-use-id>toolu_1</tool-use-id>
<output-file>/tmp/x/tasks/a224b507d787de30f.output</output-file>
<status>completed</status>
<summary>Agent "Say done" finished</summary>
<result>Subagent says: done.</result>
<usage><subagent_tokens>2853</subagent_tokens><tool_uses>0</tool_uses></usage>
</task-notification>
</system-reminder>"""

SUBAGENT_SYSTEM = [
    {
        "type": "text",
        "text": "x-anthropic-billing-header: cc_version=2.1.330; cc_is_subagent=true;",
    },
    {"type": "text", "text": "You are an agent for Claude Code."},
]


def test_subagent_requests_and_task_notifications(model: ScriptedModel) -> None:
    model.on("<status>completed</status>", "The agent is done.", subagent=False)
    model.on("do it", "Subagent did it.", subagent=True)
    model.on("do it", "Main thread did it.", subagent=False)
    notified = {"role": "user", "content": [{"type": "text", "text": NOTIFICATION}]}
    post(model, body(notified))
    post(model, body(user("do it"), system=SUBAGENT_SYSTEM))
    post(model, body(user("do it"), system=[{"type": "text", "text": "cc_entrypoint=sdk-py;"}]))
    first, sub, main = model.requests
    assert [r.rule_index for r in model.requests] == [0, 1, 2]
    assert sub.is_subagent and not main.is_subagent and not first.is_subagent
    # The notification survives the reminder stripping; the reminder's preamble does not.
    assert first.last_user_text.startswith("<task-notification>\n<task-id>a224b507d787de30f")
    assert "SYSTEM NOTIFICATION" not in first.last_user_text
    assert "SYSTEM NOTIFICATION" in first.last_user_raw
    (note,) = first.task_notifications
    assert note["task-id"] == "a224b507d787de30f" and note["tool-use-id"] == "toolu_1"
    assert note["status"] == "completed" and note["result"] == "Subagent says: done."
    assert note["usage"].startswith("<subagent_tokens>2853</subagent_tokens>")
    assert main.task_notifications == [] and main.last_user_raw == "do it"


def test_script_keys_for_usage_drops_retry_headers_and_subagents() -> None:
    m = load_script(
        {
            "rules": [
                {
                    "match": "a",
                    "reply": "x",
                    "drop_after": 2,
                    "subagent": True,
                    "usage": {"input_tokens": 10, "output_tokens": 2, "cache_read_input_tokens": 7},
                },
                {
                    "match": "b",
                    "error": {"status": 529, "retry_after": 1.5, "retry_after_ms": 20},
                    "subagent": False,
                },
            ],
            "default": {"reply": "d", "usage": {"input_tokens": 1, "output_tokens": 1}},
        }
    )
    first, second = m.rules
    assert first.subagent is True and second.subagent is False
    assert first.reply == Reply((Text("x"),), drop_after=2, usage=Usage(10, 2, 7))
    assert second.reply == Reply(error=HttpError(529, retry_after=1.5, retry_after_ms=20))
    assert m.default.usage == Usage(1, 1)


@pytest.mark.parametrize(
    "rule",
    [
        {"match": "a", "reply": "x", "subagent": "yes"},
        {"match": "a", "reply": "x", "usage": {"input_tokens": 1}},
        {"match": "a", "reply": "x", "usage": {"input_tokens": 1, "output_tokens": 1, "x": 1}},
        {"match": "a", "reply": "x", "usage": "lots"},
        {"match": "a", "reply": "x", "drop_after": -1},
        {"match": "a", "error": {"retry_after": -2}},
        {"match": "a", "error": {"retry_after_seconds": 2}},
    ],
)
def test_script_rejects_bad_new_keys(rule: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        load_script({"rules": [rule]})


def test_documented_subagent_script_answers_each_step() -> None:
    """docs/testing.md, "Claude Code's own subagents": the YAML there, request by request."""
    import yaml

    docs = (REPO / "docs" / "testing.md").read_text(encoding="utf-8")
    section = docs.split("### Claude Code's own subagents", 1)[1]
    script = yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    launched = "Async agent launched successfully.\nagentId: a1 (internal ID)"
    with load_script(script) as m:
        frames = stream(m, "please delegate this")
        (call,) = [d["content_block"] for e, d in frames if e == "content_block_start"]
        assert call["name"] == "Agent"
        assert json.loads("".join(d["partial_json"] for d in deltas(frames, 0)))["prompt"] == (
            "COUNT: the files"
        )
        assert text_of(stream(m, launched)) == "I started an agent for that."
        status, _, raw = post(m, body(user("COUNT: the files"), system=SUBAGENT_SYSTEM))
        assert status == 200 and text_of(sse(raw)) == "There are 3 files."
        notified = {"role": "user", "content": [{"type": "text", "text": NOTIFICATION}]}
        _, _, raw = post(m, body(notified))
        assert text_of(sse(raw)) == "The agent says there are 3 files."
        # The subagent rule does not answer the main conversation, nor the reverse.
        assert text_of(stream(m, "COUNT: the files")) == DEFAULT_TEXT
        _, _, raw = post(m, body(user("delegate this"), system=SUBAGENT_SYSTEM))
        assert text_of(sse(raw)) == DEFAULT_TEXT


# --------------------------------------------------------------------------- as a process


def _read_line(pipe: Any, timeout: float) -> str:
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(pipe.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError(f"no line within {timeout}s") from None


def test_module_runs_as_a_process(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text(SCRIPT_YAML)
    port_file = tmp_path / "port"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "coven_ls.testing.scripted_model",
            "--script",
            str(script),
            "--port-file",
            str(port_file),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = _read_line(proc.stdout, timeout=20)
        found = re.fullmatch(r"listening on http://127\.0\.0\.1:(\d+)\n", line)
        assert found, line
        port = int(found.group(1))
        assert int(port_file.read_text()) == port
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("POST", "/v1/messages", body=json.dumps(body(user("fix the thing"))))
        assert text_of(sse(conn.getresponse().read())) == "fixed"
        conn.close()
        proc.terminate()
        assert proc.wait(timeout=10) == 0
        assert "fix the thing" in proc.stderr.read()  # one log line per request
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        proc.stdout.close()
        proc.stderr.close()


def _module_env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }


def test_entry_point_help_explains_output_environment_and_script() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "coven_ls.testing", "--help"],
        capture_output=True,
        text=True,
        env=_module_env(),
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith("usage: python -m coven_ls.testing [-h] [--script FILE]")
    for needed in (
        "--port N",
        "--host ADDR",
        "--port-file PATH",
        "--quiet",
        "listening on http://127.0.0.1:PORT",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_API_KEY",
        "CLAUDE_CONFIG_DIR",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
        "match:",
        "regex:",
        "tool_use:",
        "should_retry",
        "docs/testing.md",
    ):
        assert needed in text, needed


def test_entry_point_reports_startup_problems_without_a_traceback(tmp_path: Path) -> None:
    def start(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "coven_ls.testing", *args],
            capture_output=True,
            text=True,
            env=_module_env(),
            timeout=30,
            check=False,
        )
        assert done.returncode == 2 and done.stdout == "", done
        assert "Traceback" not in done.stderr
        return done.stderr

    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - match: hello\n    replies: oops\n")
    problem = f"cannot use script {bad}: rule 0: unknown keys ['replies']"
    assert problem in start("--script", str(bad))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert "cannot listen on 127.0.0.1:" in start("--port", str(taken.getsockname()[1]))
    assert "loopback" in start("--host", "0.0.0.0")


# --------------------------------------------------------------------------- the package's shape


def test_the_testing_package_has_no_import_cycle() -> None:
    """Its modules import one another downwards only (http_base.py under the API servers, the
    records under both), type-checking imports included: each can be read apart."""
    import ast

    package = REPO / "coven_ls" / "testing"
    imports: dict[str, set[str]] = {}
    for path in package.glob("*.py"):
        found = imports.setdefault(path.stem, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                found.add(node.module.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.level == 1:
                found.update(alias.name for alias in node.names)

    def reaches(start: str, target: str, seen: set[str]) -> bool:
        for name in imports.get(start, ()):
            if name == target or (name not in seen and reaches(name, target, seen | {name})):
                return True
        return False

    cycles = sorted(name for name in imports if reaches(name, name, {name}))
    assert cycles == [], f"modules of coven_ls.testing in an import cycle: {cycles}"
    assert "http_base" in imports["model"] and "http_base" in imports["scripted_responses"]
