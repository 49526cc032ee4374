"""The scripted Chat Completions API (coven_ls.testing.scripted_chat), driven over real HTTP."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from coven_ls.testing import ScriptedChat
from coven_ls.testing.replies import HttpError, ToolUse, Usage
from coven_ls.testing.scripted_chat import DEFAULT_TEXT, ChatRequest


def _connect(model: ScriptedChat) -> http.client.HTTPConnection:
    parts = urlsplit(model.url)
    return http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)


def _post(model: ScriptedChat, body: dict[str, Any], path: str = "/v1/chat/completions") -> Any:
    conn = _connect(model)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def _stream(model: ScriptedChat, body: dict[str, Any]) -> list[Any]:
    """The `data:` payloads of a streamed answer, parsed line by line; `[DONE]` as the string."""
    conn = _connect(model)
    try:
        conn.request(
            "POST",
            "/v1/chat/completions",
            json.dumps({**body, "stream": True}),
            {"Content-Type": "application/json"},
        )
        resp = conn.getresponse()
        assert resp.status == 200
        assert resp.getheader("Content-Type", "").startswith("text/event-stream")
        return list(_data_lines(resp))
    finally:
        conn.close()


def _data_lines(resp: http.client.HTTPResponse) -> Iterator[Any]:
    for raw in iter(resp.readline, b""):
        line = raw.decode().rstrip("\n")
        if not line:
            continue
        assert line.startswith("data: "), line
        data = line[len("data: ") :]
        yield data if data == "[DONE]" else json.loads(data)


def _user(text: str) -> dict[str, Any]:
    return {"model": "m1", "messages": [{"role": "user", "content": text}]}


def _text_of(chunks: list[Any]) -> str:
    return "".join(
        c["choices"][0]["delta"].get("content") or ""
        for c in chunks
        if isinstance(c, dict) and c["choices"]
    )


def test_streams_text_in_pieces_role_first_then_done() -> None:
    with ScriptedChat() as model:
        model.on("hello", "Hi there", chunk_chars=3)
        chunks = _stream(model, _user("hello"))
    assert chunks[-1] == "[DONE]"
    events = chunks[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in events)
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    pieces = [c["choices"][0]["delta"]["content"] for c in events[1:-1]]
    assert pieces == ["Hi ", "the", "re"]
    assert events[-1]["choices"][0]["finish_reason"] == "stop"
    # Without stream_options.include_usage there is no usage chunk.
    assert all("usage" not in c for c in events)


def test_non_streaming_answer_is_one_chat_completion() -> None:
    with ScriptedChat() as model:
        model.on("hello", "Hi there", usage=Usage(10, 3, cache_read_input_tokens=4))
        status, body = _post(model, _user("hello"))
    assert status == 200
    assert body["object"] == "chat.completion"
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "Hi there"}
    assert choice["finish_reason"] == "stop"
    assert body["usage"] == {
        "prompt_tokens": 14,
        "completion_tokens": 3,
        "total_tokens": 17,
        "prompt_tokens_details": {"cached_tokens": 4},
    }


def test_usage_comes_in_the_last_chunk_when_asked() -> None:
    with ScriptedChat() as model:
        model.on("count", "ok", usage=Usage(100, 7, cache_read_input_tokens=20))
        chunks = _stream(model, {**_user("count"), "stream_options": {"include_usage": True}})
    assert chunks[-1] == "[DONE]"
    last = chunks[-2]
    assert last["choices"] == []
    assert last["usage"] == {
        "prompt_tokens": 120,
        "completion_tokens": 7,
        "total_tokens": 127,
        "prompt_tokens_details": {"cached_tokens": 20},
    }
    assert chunks[-3]["choices"][0]["finish_reason"] == "stop"


def test_tool_call_round_trip() -> None:
    tools = [
        {"type": "function", "function": {"name": "bash", "parameters": {}}},
        {"type": "function", "function": {"name": "read", "parameters": {}}},
    ]
    with ScriptedChat() as model:
        model.on("list", ToolUse("bash", {"command": "ls -la"}), chunk_chars=5, times=1)
        model.on(lambda r: r.last_is_tool_result and "a.txt" in r.tool_result, "Found a.txt")
        first = {**_user("list the files"), "tools": tools}
        chunks = _stream(model, first)
        events = [c for c in chunks if isinstance(c, dict)]
        calls = [d for c in events for d in c["choices"][0]["delta"].get("tool_calls", [])]
        head = calls[0]
        assert head["index"] == 0 and head["type"] == "function"
        assert head["function"] == {"name": "bash", "arguments": ""}
        call_id = head["id"]
        assert call_id
        arguments = "".join(c["function"]["arguments"] for c in calls[1:])
        assert len(calls) > 2  # the arguments come in pieces
        assert json.loads(arguments) == {"command": "ls -la"}
        assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"

        second = {
            "model": "m1",
            "tools": tools,
            "messages": [
                *first["messages"],
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": "bash", "arguments": arguments},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": call_id, "content": "a.txt\nb.txt"},
            ],
        }
        assert _text_of(_stream(model, second)) == "Found a.txt"
        requests = model.wait_for_requests(2)
    assert [r.rule_index for r in requests] == [0, 1]
    assert requests[0].tool_names == ["bash", "read"]
    assert not requests[0].last_is_tool_result and requests[0].tool_result is None
    assert requests[1].last_is_tool_result
    assert requests[1].tool_result == "a.txt\nb.txt"
    assert requests[1].last_user_text == "a.txt\nb.txt"
    assert requests[1].model == "m1"


def test_non_streaming_tool_call() -> None:
    with ScriptedChat() as model:
        model.on("run", ToolUse("bash", {"command": "true"}, id="call_1"))
        _, body = _post(model, _user("run it"), path="/chat/completions")
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "bash", "arguments": '{"command": "true"}'},
        }
    ]


def test_rule_matches_the_last_user_text_only() -> None:
    with ScriptedChat() as model:
        model.on("first", "from the first rule")
        model.on("second", "from the second rule")
        body = {
            "model": "m1",
            "messages": [
                {"role": "system", "content": "first of all, be brief"},
                {"role": "user", "content": "first question"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": [{"type": "text", "text": "the second one"}]},
            ],
        }
        assert _text_of(_stream(model, body)) == "from the second rule"
        (req,) = model.wait_for_requests(1)
    assert req.rule_index == 1
    assert req.last_user_text == "the second one"
    assert req.system_text == "first of all, be brief"


def test_a_side_request_is_told_from_a_turn_by_its_system_text() -> None:
    # opencode's title request has the turn's prompt as its last user message.
    with ScriptedChat() as model:
        model.on(lambda r: "title generator" in r.system_text, "A title")
        model.on("hello", "Hello!", times=1)
        system = {"role": "system", "content": "You are a title generator."}
        user = {"role": "user", "content": "hello there"}
        title = {"model": "m", "messages": [system, user], "stream": True}
        assert _text_of(_stream(model, title)) == "A title"
        turn = {"model": "m", "messages": [user], "stream": True}
        assert _text_of(_stream(model, turn)) == "Hello!"


def test_no_rule_matched_gets_the_default_text() -> None:
    lines: list[str] = []
    with ScriptedChat(log=lines.append) as model:
        model.on("never", "unused")
        chunks = _stream(model, _user("Generate a title for this conversation"))
        _, body = _post(model, _user("classify this"))
        reqs = model.wait_for_requests(2)
    assert _text_of(chunks) == DEFAULT_TEXT
    assert body["choices"][0]["message"]["content"] == DEFAULT_TEXT
    assert [r.rule_index for r in reqs] == [None, None]
    assert len(lines) == 2


def test_models_lists_the_given_models_or_a_default() -> None:
    def models(model: ScriptedChat, path: str) -> Any:
        conn = _connect(model)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            assert resp.status == 200
            return [m["id"] for m in json.loads(resp.read())["data"]]
        finally:
            conn.close()

    with ScriptedChat() as model:
        assert models(model, "/v1/models") == ["scripted-chat"]
        assert model.other_requests[0][1:] == ("GET", "/v1/models")
    with ScriptedChat(models=["a-model", "b-model"]) as model:
        assert models(model, "/models") == ["a-model", "b-model"]
        assert model.base_url == model.url + "/v1"


def test_http_error_and_unknown_endpoint() -> None:
    with ScriptedChat() as model:
        model.on("boom", error=HttpError(429, "slow down", "rate_limit_error"))
        status, body = _post(model, _user("boom"))
        assert status == 429
        assert body["error"]["message"] == "slow down"
        assert body["error"]["type"] == "rate_limit_error"
        status, body = _post(model, _user("x"), path="/v1/responses")
        assert status == 404
        assert "no such endpoint" in body["error"]["message"]


def test_drop_after_ends_the_stream_without_done() -> None:
    with ScriptedChat() as model:
        model.on("drop", "abcdefgh", chunk_chars=2, drop_after=2)
        chunks = _stream(model, _user("drop"))
        (req,) = model.wait_for_requests(1, predicate=lambda r: r.aborted)
    assert "[DONE]" not in chunks
    assert _text_of(chunks) == "abcd"
    assert isinstance(req, ChatRequest) and req.finished is None


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.2", "::1", "example.com"])
def test_refuses_a_non_loopback_host(host: str) -> None:
    with pytest.raises(ValueError, match="loopback"):
        ScriptedChat(host=host)
