"""The Neovim plugin, headless: `require('coven').setup{}` starts coven-ls with Neovim's own LSP
client, :CovenStart runs a session on the scripted model, the model proposes a fork,
:CovenApprove approves it, and the tree buffer ends up holding the nested tree.

The scenario runs inside Neovim (a Lua script reacting to the plugin's events), which writes the
tree buffer to a file and quits when the parent's turn after the fork is over, or after a
deadline; the test then reads the file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coven_ls.testing.scripted_model import ScriptedModel, Text, reply

from .harness import processes_with_env

PLUGIN = Path(__file__).resolve().parent.parent / "editors" / "nvim"
NVIM = os.environ.get("COVEN_TEST_NVIM") or shutil.which("nvim")

# CI installs Neovim, so there a missing nvim is a failure, not a reason to skip.
pytestmark = pytest.mark.skipif(
    NVIM is None and not os.environ.get("CI"),
    reason="nvim is not installed (apt-get install neovim; .ci/run installs it)",
)

# Loaded with `-u`: the plugin from this checkout, the server from this Python, and a scenario
# (STEPS) that reacts to the plugin's events by typing commands, as a user would.
INIT = r"""
vim.opt.runtimepath:prepend(PLUGIN)
local coven = require('coven')
coven.setup({ cmd = SERVER, init_options = { forkMode = 'approve' } })

local finished = false
local function finish(outcome)
  if finished then return end
  finished = true
  vim.fn.writefile(vim.api.nvim_buf_get_lines(coven.tree_buffer(), 0, -1, false), OUT .. '.tree')
  vim.fn.writefile({ outcome }, OUT .. '.outcome')
  vim.cmd('qall!')
end
-- Scheduled after the plugin's own redraw of the current event, so the buffer shows it.
local function finish_soon() vim.schedule(function() finish('done') end) end

local deadline = (vim.uv or vim.loop).new_timer()
deadline:start(150000, 0, vim.schedule_wrap(function() finish('timeout') end))

local root = nil
coven.on_event(function(ev)
  root = root or ev.sessionId
  if ev.kind == 'error' then finish('error: ' .. ev.message) end
end)
STEPS
"""


def lua_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid Lua string literal for these paths


def run_nvim(tmp_path: Path, model: ScriptedModel, steps: str) -> list[str]:
    """Run Neovim headless on the scenario; returns the tree buffer's lines once it quit, and
    checks that no `claude` process outlived it."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    out = tmp_path / "result"
    server = "{" + ", ".join(lua_string(a) for a in (sys.executable, "-m", "coven_ls")) + "}"
    script = (
        INIT.replace("PLUGIN", lua_string(str(PLUGIN)))
        .replace("SERVER", server)
        .replace("OUT", lua_string(str(out)))
        .replace("STEPS", steps)
    )
    init = tmp_path / "init.lua"
    init.write_text(script)
    config_dir = tmp_path / "claude-config"
    env = {k: v for k, v in os.environ.items() if k not in ("CLAUDECODE", "CLAUDE_CODE_SESSION_ID")}
    env.update(model.cli_env(config_dir))  # Neovim passes its environment on to the server
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        env[name] = str(tmp_path / name.lower())

    done = subprocess.run(
        [NVIM, "--headless", "--noplugin", "-n", "-i", "NONE", "-u", str(init)],
        cwd=workspace,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    outcome_file, tree_file = out.with_suffix(".outcome"), out.with_suffix(".tree")
    outcome = outcome_file.read_text().strip() if outcome_file.exists() else None
    tree = tree_file.read_text() if tree_file.exists() else ""
    assert outcome == "done", f"{outcome}\n{tree}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert done.returncode == 0, done.stderr[-2000:]

    # Quitting Neovim shut the server down, and with it every `claude` process.
    deadline = time.monotonic() + 30
    while processes_with_env(str(config_dir)):
        assert time.monotonic() < deadline, "agent processes outlived Neovim"
        time.sleep(0.1)
    return tree.splitlines()


def indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def find(lines: list[str], text: str) -> int:
    return next(i for i, line in enumerate(lines) if text in line)


def test_the_plugin_approves_a_fork_and_draws_the_nested_tree(
    tmp_path: Path, model: ScriptedModel
) -> None:
    model.on(
        "Plan the release", "I will split this.\n<fork>\n- Write the docs\n- Fix the bugs\n</fork>"
    )
    model.on("You were assigned 'Write the docs'", "Docs are written.")
    model.on("You were assigned 'Fix the bugs'", "Bugs are fixed.")
    model.on("<fork-results>", "Both parts are done.")

    lines = run_nvim(
        tmp_path,
        model,
        r"""
local fork_done = false
coven.on_event(function(ev)
  if ev.kind == 'forkProposed' then
    vim.cmd('CovenApprove')
  elseif ev.kind == 'forkFinished' then
    fork_done = true
  elseif ev.sessionId == root and fork_done and ev.kind == 'status' and ev.status == 'idle' then
    finish_soon()
  end
end)
vim.cmd('CovenStart Plan the release')
""",
    )

    tree = "\n".join(lines)
    root = find(lines, "● Plan the release")
    fork = find(lines, "⑂ Fork  2 tasks")
    docs, docs_answer = find(lines, "⑂ Write the docs"), find(lines, "⏺ Docs are written.")
    bugs, bugs_answer = find(lines, "⑂ Fix the bugs"), find(lines, "⏺ Bugs are fixed.")
    finished = find(lines, "⑂ Fork done  2 of 2 tasks succeeded")
    after = find(lines, "⏺ Both parts are done.")
    assert lines[root].endswith("✓ idle"), tree
    assert root < fork < docs < docs_answer < bugs < bugs_answer < finished < after, tree
    # The children sit under the fork line, their lines under their own headers; the parent's
    # own lines go on at the parent's level.
    assert indent(lines[root]) < indent(lines[fork]) < indent(lines[docs]) == indent(lines[bugs])
    assert indent(lines[docs_answer]) > indent(lines[docs]), tree
    assert indent(lines[finished]) == indent(lines[after]) == indent(lines[fork]), tree
    assert "✓ idle" in lines[docs] and "✓ idle" in lines[bugs], tree


def test_the_plugin_rejects_forks_by_hand_sends_and_cancels(
    tmp_path: Path, model: ScriptedModel
) -> None:
    model.on(
        "Plan the release", "Split?\n<fork>\n- Write the docs\n- Fix the bugs\n</fork>", times=1
    )
    model.on("declined your proposed fork", "Alone then.")
    model.on("You were assigned 'Check it'", "Checked.")
    model.on("<fork-results>", "Merged the check.")
    # The first block arrives at once (the cue to cancel: the model is mid-answer), the second
    # never does.
    model.on(
        "the endless task",
        reply(Text("Working on it."), Text("Done at last."), chunk_chars=100, chunk_delay=120.0),
        times=1,
    )

    lines = run_nvim(
        tmp_path,
        model,
        r"""
local step = 'start'
coven.on_event(function(ev)
  if ev.sessionId ~= root then return end
  if ev.kind == 'forkProposed' then
    vim.cmd('CovenReject Too risky today')
  elseif ev.kind == 'turnResult' and ev.text == 'Alone then.' then
    step = 'fork'
  elseif ev.kind == 'forkFinished' then
    step = 'forked'
  elseif ev.kind == 'turnResult' and ev.text == 'Merged the check.' then
    step = 'send'
  elseif ev.kind == 'status' and ev.status == 'idle' and step == 'fork' then
    step = 'forking'
    vim.cmd('CovenFork Check it')
  elseif ev.kind == 'status' and ev.status == 'idle' and step == 'send' then
    step = 'sent'
    vim.cmd('CovenSend Start the endless task')
  elseif ev.kind == 'text' and ev.text == 'Working on it.' and step == 'sent' then
    step = 'cancelling'
    vim.cmd('CovenCancel')
  elseif ev.kind == 'status' and ev.status == 'idle' and step == 'cancelling' then
    finish_soon()
  end
end)
vim.cmd('CovenStart Plan the release')
""",
    )

    tree = "\n".join(lines)
    rejected = find(lines, "⑂ Fork rejected: Too risky today")
    alone = find(lines, "⏺ Alone then.")
    fork = find(lines, "⑂ Fork  1 task")
    child = find(lines, "⑂ Check it")
    merged = find(lines, "⏺ Merged the check.")
    sent = find(lines, "› you: Start the endless task")
    cancelled = find(lines, "■ turn cancelled")
    assert rejected < alone < fork < child < merged < sent < cancelled, tree
    assert indent(lines[child]) > indent(lines[fork]), tree
    assert lines[0].endswith("✓ idle"), tree
