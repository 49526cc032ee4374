"""Real ACP agents installed by scripts/test.sh (tests/e2e/acp_agents, pinned), each pointed at
its scripted model API, for end-to-end tests: where each one's program is, and the environment
that starts it offline. They are offered as the known agents they are (agents/acp/known.py):
a folder on PATH holds `opencode` and `claude-agent-acp`, and no `initializationOptions.agents`
entry is needed. The fixtures that start a coven-ls with each are in tests/e2e/conftest.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

from coven_ls.testing.scripted_chat import DEFAULT_MODEL, ScriptedChat

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
