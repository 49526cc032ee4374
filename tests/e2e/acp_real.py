"""Real ACP agents installed by scripts/test.sh (tests/e2e/acp_agents, pinned), each pointed at
its scripted model API, for end-to-end tests: where each one's program is, and the environment
that starts it offline. They are offered as the known agents they are (agents/acp/known.py):
a folder on PATH holds `opencode` and `claude-agent-acp`, and no `initializationOptions.agents`
entry is needed. The fixtures that start a coven-ls with each are in tests/e2e/conftest.py."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from coven_ls.testing.scripted_chat import DEFAULT_MODEL, ScriptedChat

from ..harness import Coven, wait_until

MODULES = Path(__file__).parent / "acp_agents/node_modules"
OPENCODE = MODULES / "opencode-linux-x64/bin/opencode"
CLAUDE_AGENT_ACP = MODULES / "@agentclientprotocol/claude-agent-acp/dist/index.js"
INSTALL = "not installed (scripts/test.sh runs npm ci in tests/e2e/acp_agents)"

# opencode's price for the scripted model, in USD per million tokens, and its context window:
# its `usage_update` carries `size` and `cost` only for a model whose config gives them.
OPENCODE_PRICE = {"input": 3.0, "output": 15.0}
OPENCODE_WINDOW = 100_000


def opencode_cost(input_tokens: int, output_tokens: int) -> float:
    """What opencode reports one model call of these tokens cost, at OPENCODE_PRICE."""
    return (input_tokens * OPENCODE_PRICE["input"] + output_tokens * OPENCODE_PRICE["output"]) / 1e6


def agents_path(folder: Path) -> str:
    """PATH with `folder` first, holding the installed agents under their known commands."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, target in (("opencode", OPENCODE), ("claude-agent-acp", CLAUDE_AGENT_ACP)):
        link = folder / name
        if not link.exists():
            link.symlink_to(target)
    return os.pathsep.join([str(folder), os.environ.get("PATH", "")])


def opencode_env(chat: ScriptedChat, home: Path) -> dict[str, str]:
    """Variables that start opencode offline against `chat`: its config (a provider through the
    bundled `@ai-sdk/openai-compatible`, the model's price and window, `bash` commands asked
    about) and its folders in `home`, with nothing fetched, updated or read from the user's own
    Claude Code set-up. Its title requests reach `chat` too (the same model)."""
    model = f"scripted/{DEFAULT_MODEL}"
    config = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "scripted": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Scripted",
                "options": {"baseURL": chat.base_url, "apiKey": "scripted"},
                "models": {
                    DEFAULT_MODEL: {
                        "name": "scripted",
                        "cost": OPENCODE_PRICE,
                        "limit": {"context": OPENCODE_WINDOW, "output": 4096},
                    }
                },
            }
        },
        "model": model,
        "small_model": model,
        "permission": {"bash": "ask"},
    }
    env = {
        "OPENCODE_CONFIG_CONTENT": json.dumps(config),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_CACHE_HOME": str(home / "cache"),
    }
    for what in ("MODELS_FETCH", "AUTOUPDATE", "DEFAULT_PLUGINS", "LSP_DOWNLOAD", "SHARE"):
        env[f"OPENCODE_DISABLE_{what}"] = "1"
    env["OPENCODE_DISABLE_CLAUDE_CODE"] = "1"
    return env


def streamed(coven: Coven, sid: str) -> str:
    """The text `sid` streamed (its `coven/delta`s), in order."""
    return "".join(d["text"] for d in coven.deltas if d["sessionId"] == sid and d["kind"] == "text")


async def cancel_then_restart(
    start: Callable[[], Awaitable[Coven]], script: Any, agent: str
) -> tuple[Coven, str, dict[str, Any], dict[str, Any]]:
    """A long answer cancelled mid-stream, a word to remember, the server stopped and started
    again, and the word asked for: the second server, the session, the answer after the restart
    and the session as listed then. `script` is the agent's scripted API (rules added here)."""
    script.on("long", "word " * 200, chunk_chars=5, chunk_delay=0.05, times=1)
    script.on("remember the word pineapple", "Noted: pineapple.")
    script.on("Which word", "It was pineapple.")
    first = await start()
    sid = await first.start("a long answer please")
    await wait_until(lambda: len(streamed(first, sid)) >= 15, 120, "the answer to stream")
    await first.request("coven/cancel", {"sessionId": sid})
    cancelled = await first.wait_kind(sid, "turnResult")
    assert cancelled["cancelled"] and not cancelled["isError"], cancelled
    assert len(streamed(first, sid)) < len("word " * 200)
    await first.wait_status(sid, "idle", after_seq=cancelled["seq"] - 1)
    await first.request(
        "coven/sendMessage", {"sessionId": sid, "text": "Please remember the word pineapple"}
    )
    noted = await first.wait_kind(sid, "turnResult", count=2)
    assert noted["text"] == "Noted: pineapple."
    await first.wait_status(sid, "idle", after_seq=noted["seq"] - 1)
    await first.stop()

    second = await start()
    [info] = (await second.request("coven/listSessions", {}))["sessions"]
    assert info["agent"] == agent and info["agentSessionId"] == noted["agentSessionId"]
    await second.request("coven/sendMessage", {"sessionId": sid, "text": "Which word was it?"})
    result = await second.wait_kind(sid, "turnResult")
    assert result["text"] == "It was pineapple.", result
    assert result["agentSessionId"] == info["agentSessionId"]
    return second, sid, result, info


async def command_turn(
    coven: Coven, sid: str, asked: list[dict[str, Any]], command: str = "echo one > one.txt"
) -> dict[str, Any]:
    """The second turn of the streaming tests: `WRITE-ONE please` makes the agent run
    `echo one > one.txt` (its rules are the test's), asked about first (the client's answers
    are in `asked`; `command` is how the agent words it there), then answer "the command
    ran". Its turnResult."""
    await coven.request("coven/sendMessage", {"sessionId": sid, "text": "WRITE-ONE please"})
    second = await coven.wait_kind(sid, "turnResult", count=2)
    assert second["text"] == "the command ran", coven.of(sid, "toolResult")
    assert (coven.workspace / "one.txt").read_text() == "one\n"
    [use] = coven.of(sid, "toolUse")
    assert use["name"] == "Bash"
    [question] = coven.of(sid, "permissionRequest")
    assert question["toolUseId"] == use["toolUseId"] and use["seq"] < question["seq"]
    assert asked and asked[0]["input"]["command"] == command
    [done] = coven.of(sid, "toolResult")
    assert done["toolUseId"] == use["toolUseId"] and not done["isError"], done
    return second
