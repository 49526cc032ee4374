"""The scripted Responses API behind the Codex story of scripts/vscode-e2e.sh (e2e/questions.mjs):
the real `codex` (the openai-codex-cli-bin wheel) of a Codex session talks to it. A session
proposes a fork of two tasks; each child answers its own; the parent sums them up.

    python client-vscode/e2e/codex_model.py CODEX_HOME ENV_FILE

Makes CODEX_HOME (a config.toml that points codex here, offline), writes the variables that send
a codex there to ENV_FILE (NAME=VALUE lines, written last: its presence means ready) and serves
until SIGTERM or SIGINT."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

from coven_ls.testing.scripted_responses import ScriptedResponses


def main(codex_home: str, env_file: str) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with ScriptedResponses() as model:
        model.on(
            "Count the release files with Codex",
            "Two counts, in parallel.\n<fork>\n- Count the notes\n- Count the guides\n</fork>",
            latency=0.5,
        )
        model.on(
            "You were assigned 'Count the notes'", "RELEASE.md has a handful of lines.", latency=1.0
        )
        model.on(
            "You were assigned 'Count the guides'", "There is one guide, UPGRADE.md.", latency=1.5
        )
        model.on("<fork-results>", "Counted with Codex: the notes and one guide.", latency=0.5)
        env = model.codex_env(codex_home)
        partial = Path(f"{env_file}.partial")
        partial.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
        partial.rename(env_file)
        print(f"scripted Responses API on {model.url}", flush=True)
        stop.wait()


if __name__ == "__main__":
    main(*sys.argv[1:3])
