"""The Neovim plugin, headless: `require('coven').setup{}` starts coven-ls with Neovim's own LSP
client, :CovenStart runs a session on the scripted model, the model proposes a fork,
:CovenApprove approves it, and the tree buffer ends up holding the nested tree.

The scenario runs inside Neovim (a Lua script reacting to the plugin's events), which writes the
tree buffer to a file and quits when the parent's turn after the fork is over, or after a
deadline; the test then reads the file.

The tree renderer (coven/tree.lua) is also fed the golden fixtures (tests/fixtures/events/,
recorded from a real server by tests/fixtures/record.py): every event the plugin would have
received, in order, and the rendered lines are checked whole."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from coven_ls.protocol.describe import compact_count, context_gauge, disk_size, fork_cost_brief
from coven_ls.protocol.types import ContextUsage, ForkEstimate
from coven_ls.testing.scripted_model import (
    HttpError,
    Reply,
    ScriptedModel,
    Text,
    ToolUse,
    Usage,
    reply,
)

from ..fixtures.record import EVENTS_DIR, read
from ..gitrepo import NOTES, append, git, git_env, make_repo, status
from ..harness import processes_with_env

PLUGIN = Path(__file__).resolve().parents[2] / "editors" / "nvim"
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
coven.setup({ cmd = SERVER, init_options = INIT_OPTIONS, SETUP })

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


def run_nvim(
    tmp_path: Path,
    model: ScriptedModel,
    steps: str,
    *,
    init_options: str = "{ forkMode = 'approve' }",
    prepare: Callable[[Path, dict[str, str]], dict[str, str]] | None = None,
    setup: str = "",
    server_pid: int | None = None,
) -> list[str]:
    """Run Neovim headless on the scenario; returns the tree buffer's lines once it quit, and
    checks that no `claude` process outlived it. `init_options` is a Lua table; `prepare` gets
    the workspace and Neovim's environment before it starts, and returns the environment;
    `setup` adds Lua fields to setup{}; `server_pid` is a server Neovim connects to rather than
    starts (whose environment also names this test's config dir)."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    out = tmp_path / "result"
    server = "{" + ", ".join(lua_string(a) for a in (sys.executable, "-m", "coven_ls")) + "}"
    script = (
        INIT.replace("PLUGIN", lua_string(str(PLUGIN)))
        .replace("SERVER", server)
        .replace("INIT_OPTIONS", init_options)
        .replace("OUT", lua_string(str(out)))
        .replace("SETUP", setup)
        .replace("STEPS", steps)
    )
    init = tmp_path / "init.lua"
    init.write_text(script)
    config_dir = tmp_path / "claude-config"
    env = {k: v for k, v in os.environ.items() if k not in ("CLAUDECODE", "CLAUDE_CODE_SESSION_ID")}
    env.update(model.cli_env(config_dir))  # Neovim passes its environment on to the server
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        env[name] = str(tmp_path / name.lower())
    if prepare is not None:
        env = prepare(workspace, env)

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
    while processes_with_env(str(config_dir), exclude=(server_pid,) if server_pid else ()):
        assert time.monotonic() < deadline, "agent processes outlived Neovim"
        time.sleep(0.1)
    return tree.splitlines()


def nvim_version() -> tuple[int, ...]:
    if NVIM is None:
        return (0,)
    first = subprocess.run([NVIM, "--version"], capture_output=True, text=True, timeout=30).stdout
    found = re.search(r"NVIM v(\d+)\.(\d+)", first)
    return (int(found.group(1)), int(found.group(2))) if found else (0,)


@pytest.mark.skipif(nvim_version() < (0, 8), reason="vim.lsp.rpc.connect needs Neovim 0.8")
def test_the_plugin_connects_to_a_tcp_server_with_its_token(
    tmp_path: Path, model: ScriptedModel
) -> None:
    model.on("hello over tcp", "Hi over TCP.")
    token_file = tmp_path / "token"
    token_file.write_text("nvim-s3cret\n")
    token_file.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if k != "COVEN_TOKEN"}
    env.update(model.cli_env(tmp_path / "claude-config"))
    server = subprocess.Popen(
        [sys.executable, "-m", "coven_ls", "--tcp", "127.0.0.1:0", "--token-file", str(token_file)],
        env=env,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stderr is not None
        line = server.stderr.readline()  # the server prints it first, or ends (then: "")
        found = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        assert found, line
        lines = run_nvim(
            tmp_path,
            model,
            r"""
coven.on_event(function(ev)
  if ev.kind == 'turnResult' and ev.text == 'Hi over TCP.' then finish_soon() end
end)
vim.cmd('CovenStart Say hello over tcp')
""",
            setup=f"tcp = '127.0.0.1:{found.group(1)}', token_file = {lua_string(str(token_file))}",
            server_pid=server.pid,
        )
        assert any("Hi over TCP." in line for line in lines), lines
        assert server.poll() is None, "Neovim's exit ended the shared server"
    finally:
        server.terminate()
        server.wait(60)


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
    if coven.protocol_version() ~= 2 then
      finish('protocol version ' .. tostring(coven.protocol_version()))
    end
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
    assert "✓ idle  · " in lines[root], tree  # and the tokens of its turns
    assert root < fork < docs < docs_answer < bugs < bugs_answer < finished < after, tree
    # The children sit under the fork line, their lines under their own headers; the parent's
    # own lines go on at the parent's level.
    assert indent(lines[root]) < indent(lines[fork]) < indent(lines[docs]) == indent(lines[bugs])
    assert indent(lines[docs_answer]) > indent(lines[docs]), tree
    assert indent(lines[finished]) == indent(lines[after]) == indent(lines[fork]), tree
    assert "✓ idle" in lines[docs] and "✓ idle" in lines[bugs], tree
    # The fork's line says its state as the server's events said it.
    assert lines[fork].endswith("  [finished]"), tree


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
    assert "✓ idle" in lines[0], tree


STORY = (
    "Streaming works: this answer arrives in small pieces, one after the other, long before "
    "the whole message is done."
)


def test_the_plugin_streams_text_into_the_tree(tmp_path: Path, model: ScriptedModel) -> None:
    model.on(
        "Tell me a story", Reply(error=HttpError(529, "Overloaded", "overloaded_error")), times=1
    )
    # ~30 pieces of 5 characters, 50 ms apart.
    model.on("Tell me a story", STORY, chunk_chars=5, chunk_delay=0.05)

    lines = run_nvim(
        tmp_path,
        model,
        r"""
local mid_written = false
coven.on_delta(function(d)
  -- Once a third of the answer is in: the tree buffer as drawn (after the plugin's redraw).
  local streamed = 0
  for _, line in ipairs(coven.lines()) do
    if line:find('⏺ ', 1, true) then streamed = #line end
  end
  if not mid_written and streamed > 40 then
    mid_written = true
    vim.schedule(function()
      vim.fn.writefile(vim.api.nvim_buf_get_lines(coven.tree_buffer(), 0, -1, false), OUT .. '.mid')
    end)
  end
end)
coven.on_event(function(ev)
  if ev.kind == 'turnResult' then
    vim.fn.writefile({ vim.fn.json_encode(ev) }, OUT .. '.result')
  elseif ev.sessionId == root and ev.kind == 'status' and ev.status == 'idle' then
    finish_soon()
  end
end)
vim.cmd('CovenStart Tell me a story')
""".replace("OUT", lua_string(str(tmp_path / "result"))),
    )

    mid = (tmp_path / "result.mid").read_text().splitlines()
    result = json.loads((tmp_path / "result.result").read_text())
    tree = "\n".join(mid)
    # Mid-stream: the retry, and the answer's line holding the pieces so far.
    assert mid[0] == "● Tell me a story  ▶ running", tree
    assert re.fullmatch(r"  ⟳ API overloaded — retrying in [\d.]+ s \(1/\d+\)", mid[2]), tree
    partial = mid[3].removeprefix("  ⏺ ")
    assert mid[3].startswith("  ⏺ ") and STORY.startswith(partial) and partial != STORY, tree
    assert len(mid) == 4, tree
    # After: the text event replaced the pieces with the whole answer, once; the header has the
    # turn's tokens and how full the context is (the gauge: 5k of the scripted model's 1M).
    usage = result["usage"]
    tokens_in = usage["inputTokens"] + usage["cacheReadTokens"] + usage["cacheCreationTokens"]
    context = msgspec.convert(result["contextUsage"], ContextUsage)
    assert context.window == 1_000_000 and context.tokens > 0
    assert lines[0] == (
        f"● Tell me a story  ✓ idle  · {compact_count(tokens_in)} in · "
        f"{compact_count(usage['outputTokens'])} out  · context {context_gauge(context)}"
    )
    assert lines[3:5] == [f"  ⏺ {STORY}", lines[4]] and lines[4].startswith("  ✓ turn done (")
    assert sum(STORY[:20] in line for line in lines) == 1


def test_the_plugin_lists_diffs_applies_and_discards_a_reviewed_childs_changes(
    tmp_path: Path, model: ScriptedModel
) -> None:
    docs, extra = "Write the docs", "Add a file"
    model.on("Plan the release", f"Splitting.\n<fork>\n- {docs}\n- {extra}\n</fork>")
    model.on(f"You were assigned '{docs}'", ToolUse("Bash", append("docs", "notes.txt", "docs-ok")))
    model.on("docs-ok", "Docs are written.")
    model.on(f"You were assigned '{extra}'", ToolUse("Bash", append("new", "added.txt", "file-ok")))
    model.on("file-ok", "File added.")
    model.on("<fork-results>", "Both reported.")
    repo_env: dict[str, str] = {}

    def in_a_repo(workspace: Path, env: dict[str, str]) -> dict[str, str]:
        repo_env.update(git_env(tmp_path, env))
        make_repo(workspace, env=repo_env)
        return repo_env

    lines = run_nvim(
        tmp_path,
        model,
        r"""
-- The children's Bash calls are asked with Neovim's prompt: a user who picks "Allow".
vim.lsp.handlers['window/showMessageRequest'] = function(_, params)
  if params.message:find('wants to use Bash', 1, true) then return { title = 'Allow' } end
  return vim.NIL
end
local function dump(name, lines) vim.fn.writefile(lines, OUT .. '.' .. name) end
local fork_done = false
coven.on_event(function(ev)
  if ev.kind == 'forkReviewing' then
    vim.schedule(function()
      vim.cmd('CovenChanges')
      vim.wait(30000, function() return #vim.fn.getqflist() > 0 end)
      local qf = { vim.fn.getqflist({ title = 1 }).title }
      for _, item in ipairs(vim.fn.getqflist()) do
        table.insert(qf, vim.fn.fnamemodify(vim.fn.bufname(item.bufnr), ':p') .. '|' .. item.text)
      end
      dump('qf', qf)
      -- :CovenChanges left the cursor in the quickfix window: the diff key on its first entry.
      vim.cmd('normal! 1G')
      vim.cmd('normal D')
      vim.wait(30000, function() return vim.fn.tabpagenr('$') > 1 end)
      local diff = {}
      for _, win in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
        local buf = vim.api.nvim_win_get_buf(win)
        table.insert(diff, vim.api.nvim_buf_get_name(buf) .. ' diff=' .. tostring(vim.wo[win].diff))
        vim.list_extend(diff, vim.api.nvim_buf_get_lines(buf, 0, -1, false))
      end
      dump('diff', diff)
      vim.cmd('tabclose')
      vim.cmd('CovenApply')
    end)
  elseif ev.kind == 'changes' and ev.changes.merge == 'applied' then
    vim.schedule(function() vim.cmd('CovenDiscard') end)
  elseif ev.kind == 'forkFinished' then
    fork_done = true
  elseif ev.sessionId == root and fork_done and ev.kind == 'status' and ev.status == 'idle' then
    finish_soon()
  end
end)
vim.cmd('CovenStart Plan the release')
""".replace("OUT", lua_string(str(tmp_path / "result"))),
        init_options="{ forkMode = 'auto', mergeMode = 'review' }",
        prepare=in_a_repo,
    )

    repo = (tmp_path / "workspace").resolve()
    tree = "\n".join(lines)
    # The quickfix list: the first child waiting for review, its file in the user's repository.
    qf = (tmp_path / "result.qf").read_text().splitlines()
    assert qf == [f"coven: '{docs}' +1 −0 · 1 file · pending", f"{repo}/notes.txt|+1 −0 modified"]
    # Its diff: the file as the fork started, and as the child left it.
    base, base_text, child, *child_text = (tmp_path / "result.diff").read_text().splitlines()
    assert re.fullmatch(r"coven://s-\w+/base/notes\.txt diff=true", base), base
    assert re.fullmatch(r"coven://s-\w+/child/notes\.txt diff=true", child), child
    assert [base_text, *child_text] == [*NOTES.splitlines(), *NOTES.splitlines(), "docs"]
    # :CovenApply applied the docs, :CovenDiscard left the new file out.
    assert (repo / "notes.txt").read_text() == NOTES + "docs\n"
    assert not (repo / "added.txt").exists()
    assert [line[3:] for line in status(repo, repo_env)] == ["notes.txt"]
    header = lines[find(lines, f"⑂ {docs}")]
    assert "✓ idle  ± +1 −0 · 1 file · applied" in header, tree
    assert "✓ idle  ± +1 −0 · 1 file · discarded" in lines[find(lines, f"⑂ {extra}")], tree
    finished = find(lines, "⑂ Fork done  2 of 2 tasks succeeded")
    assert lines[finished + 1].strip() == f"✓ {docs}: applied +1 −0 · 1 file", tree
    kept = re.fullmatch(
        rf"    ■ {extra}: discarded \+1 −0 · 1 file — work kept on branch (coven/\S+)",
        lines[finished + 2],
    )
    assert kept is not None, tree
    assert git(repo, "show", f"{kept.group(1)}:added.txt", env=repo_env) == "new\n"
    assert "⏺ Both reported." in tree


@pytest.mark.parametrize("where", ["option", "conductor"])
def test_the_plugin_passes_its_worktree_setup_and_asks_about_the_repositorys(
    tmp_path: Path, model: ScriptedModel, where: str
) -> None:
    """worktree_setup = '...' runs as given; a repository's conductor.json setup runs once the
    user picked "Allow Setup" in Neovim's prompt (the standard window/showMessageRequest)."""
    task = "Check the setup"
    model.on("Plan the release", f"Splitting.\n<fork>\n- {task}\n</fork>")
    model.on(f"You were assigned '{task}'", "Checked.")
    model.on("<fork-results>", "All set.")
    repo_env: dict[str, str] = {}

    def in_a_repo(workspace: Path, env: dict[str, str]) -> dict[str, str]:
        repo_env.update(git_env(tmp_path, env))
        make_repo(workspace, env=repo_env)
        if where == "conductor":
            setup = {"scripts": {"setup": "echo nvim-setup $COVEN_CHILD_INDEX $CONDUCTOR_PORT"}}
            (workspace / "conductor.json").write_text(json.dumps(setup))
        return repo_env

    lines = run_nvim(
        tmp_path,
        model,
        r"""
vim.lsp.handlers['window/showMessageRequest'] = function(_, params)
  if params.message:find('worktree setup in conductor.json', 1, true) then
    vim.fn.writefile({ params.message }, OUT .. '.asked')
    return { title = 'Allow Setup' }
  end
  return vim.NIL
end
local fork_done = false
coven.on_event(function(ev)
  if ev.kind == 'forkFinished' then
    fork_done = true
  elseif ev.sessionId == root and fork_done and ev.kind == 'status' and ev.status == 'idle' then
    finish_soon()
  end
end)
vim.cmd('CovenStart Plan the release')
""".replace("OUT", lua_string(str(tmp_path / "result"))),
        init_options="{ forkMode = 'auto' }",
        setup="worktree_setup = 'echo nvim-setup $COVEN_CHILD_INDEX'" if where == "option" else "",
        prepare=in_a_repo,
    )
    tree = "\n".join(lines)
    output = lines[find(lines, "│ nvim-setup 1")]
    if where == "conductor":
        assert re.search(r"│ nvim-setup 1 \d+$", output), tree  # with Conductor's port variable
        asked = (tmp_path / "result.asked").read_text()
        assert "echo nvim-setup $COVEN_CHILD_INDEX $CONDUCTOR_PORT" in asked
        assert "setup from conductor.json: echo nvim-setup" in tree
    else:
        assert not (tmp_path / "result.asked").exists()
    assert "✓ worktree setup done" in tree
    assert "⏺ All set." in tree


def test_the_plugin_asks_before_discarding_work_when_it_deletes(
    tmp_path: Path, model: ScriptedModel
) -> None:
    docs, extra = "Write the docs", "Add a file"
    model.on("Plan the release", f"Splitting.\n<fork>\n- {docs}\n- {extra}\n</fork>")
    model.on(f"You were assigned '{docs}'", ToolUse("Bash", append("docs", "notes.txt", "docs-ok")))
    model.on("docs-ok", "Docs are written.")
    model.on(f"You were assigned '{extra}'", ToolUse("Bash", append("new", "added.txt", "file-ok")))
    model.on("file-ok", "File added.")
    repo_env: dict[str, str] = {}

    def in_a_repo(workspace: Path, env: dict[str, str]) -> dict[str, str]:
        repo_env.update(git_env(tmp_path, env))
        make_repo(workspace, env=repo_env)
        return repo_env

    run_nvim(
        tmp_path,
        model,
        r"""
vim.lsp.handlers['window/showMessageRequest'] = function(_, params)
  if params.message:find('wants to use Bash', 1, true) then return { title = 'Allow' } end
  return vim.NIL
end
-- The user keeps the first child's work, then discards the rest when deleting the root.
local asked, told, answers = {}, {}, { 1, 2 }
vim.fn.confirm = function(message, choices)
  table.insert(asked, message .. ' [' .. choices:gsub('\n', '|') .. ']')
  return table.remove(answers, 1)
end
local notify = vim.notify
vim.notify = function(message, ...)
  table.insert(told, message)
  return notify(message, ...)
end
local deleted = 0
coven.on_event(function(ev)
  if ev.kind == 'forkReviewing' then
    vim.schedule(function() vim.cmd('CovenDelete Add a file') end)
  elseif ev.kind == 'deleted' then
    deleted = deleted + 1
    vim.schedule(function()
      if deleted == 1 then
        vim.cmd('CovenDelete')
      else
        vim.wait(10000, function() return #told >= 2 end)
        vim.fn.writefile(asked, OUT .. '.asked')
        local said = vim.tbl_filter(function(m) return m:find('deleted', 1, true) end, told)
        vim.fn.writefile(said, OUT .. '.told')
        finish_soon()
      end
    end)
  end
end)
vim.cmd('CovenStart Plan the release')
""".replace("OUT", lua_string(str(tmp_path / "result"))),
        init_options="{ forkMode = 'auto', mergeMode = 'review' }",
        prepare=in_a_repo,
    )

    repo = (tmp_path / "workspace").resolve()
    asked = (tmp_path / "result.asked").read_text().splitlines()
    assert asked == [
        f"coven: 1 fork child holds work never applied: {extra} (waiting for review). Keep the "
        "branches (coven-ls prune --discard-work deletes them later), or discard the work? "
        "[&Keep branches|&Discard work|&Cancel]",
        f"coven: 1 fork child holds work never applied: {docs} (waiting for review). Keep the "
        "branches (coven-ls prune --discard-work deletes them later), or discard the work? "
        "[&Keep branches|&Discard work|&Cancel]",
    ]
    branches = git(repo, "branch", "--format=%(refname:short)", env=repo_env).split()
    [kept] = [b for b in branches if b.startswith("coven/")]
    assert kept.endswith("/2-add-a-file")
    told = (tmp_path / "result.told").read_text().splitlines()
    assert told == [
        f"coven: deleted '{extra}'; kept 1 branch with work never applied: {kept} (changes "
        "waiting for review)",
        "coven: deleted 'Plan the release'",
    ]
    assert git(repo, "show", f"{kept}:added.txt", env=repo_env) == "new\n"
    assert not (repo / "added.txt").exists()


# --- the golden fixtures, replayed into the tree renderer ----------------------------------------

# Feeds a fixture's events to tree.apply in arrival order: the `coven/event`s the plugin gets live
# (it never calls coven/getEvents, so the fetched events of a restart are not its). After the
# first event of kind SNAPSHOT_AFTER (if any) the tree is written to OUT.mid, at the end to OUT.end.
REPLAY = r"""
vim.opt.runtimepath:prepend(PLUGIN)
local tree = require('coven.tree')
local t = tree.new()
local snapped = false
for _, line in ipairs(vim.fn.readfile(FIXTURE)) do
  local ev = vim.json.decode(line)
  if ev.kind ~= nil then
    tree.apply(t, ev)
    if not snapped and ev.kind == SNAPSHOT_AFTER then
      snapped = true
      vim.fn.writefile(tree.render(t), OUT .. '.mid')
    end
  end
end
vim.fn.writefile(tree.render(t), OUT .. '.end')
vim.cmd('qall!')
"""

TURN_NUMBERS = re.compile(r"\((\d+\.\d) s, \$(\d+\.\d{4})\)")
HEADER_USAGE = re.compile(r"  · (\S+) in · (\S+) out(?=  · context |$)")
HEADER_CONTEXT = re.compile(r"  · context (.+)$")


def session_context(events: list[dict]) -> list[str]:
    """Each session's context as its header shows it, from its last turnResult that has one."""
    last: dict[str, dict] = {}
    for e in events:
        if e.get("kind") == "turnResult" and e.get("contextUsage"):
            last[e["sessionId"]] = e["contextUsage"]
    return sorted(context_gauge(msgspec.convert(c, ContextUsage)) for c in last.values())


def session_usage(events: list[dict]) -> list[tuple[str, str]]:
    """Each session's tokens as its header shows them (in, out), from its turnResults."""
    totals: dict[str, list[int]] = {}
    for e in events:
        if e.get("kind") == "turnResult" and e.get("usage"):
            u, total = e["usage"], totals.setdefault(e["sessionId"], [0, 0])
            total[0] += u["inputTokens"] + u["cacheReadTokens"] + u["cacheCreationTokens"]
            total[1] += u["outputTokens"]
    return sorted((compact_count(i), compact_count(o)) for i, o in totals.values())


def render_fixture(
    tmp_path: Path, name: str, snapshot_after: str = ""
) -> tuple[list[str], list[str]]:
    """The tree lines after the first `snapshot_after` event (empty without one) and at the end,
    with each turn's "(1.2 s, $0.0377)" written "(…)" and the headers' tokens left out, once
    checked against the fixture."""
    out = tmp_path / name
    init = tmp_path / f"{name}.lua"
    init.write_text(
        REPLAY.replace("PLUGIN", lua_string(str(PLUGIN)))
        .replace("FIXTURE", lua_string(str(EVENTS_DIR / f"{name}.jsonl")))
        .replace("SNAPSHOT_AFTER", lua_string(snapshot_after))
        .replace("OUT", lua_string(str(out)))
    )
    env = {**os.environ}
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        env[var] = str(tmp_path / var.lower())
    done = subprocess.run(
        [NVIM, "--headless", "--noplugin", "-n", "-i", "NONE", "-u", str(init)],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    end = out.with_suffix(".end")
    assert done.returncode == 0 and end.exists(), done.stderr[-2000:]
    mid = out.with_suffix(".mid")
    mid_lines = mid.read_text().splitlines() if mid.exists() else []
    end_lines = end.read_text().splitlines()
    # Every turn's duration and cost is the fixture's (a cancelled turn shows neither).
    events = read(EVENTS_DIR / f"{name}.jsonl")
    results = [e for e in events if e.get("kind") == "turnResult" and not e.get("cancelled")]
    shown = TURN_NUMBERS.findall("\n".join(end_lines))
    recorded = [(f"{r['durationMs'] / 1000:.1f}", f"{r['costUsd']:.4f}") for r in results]
    assert sorted(shown) == sorted(recorded), (shown, recorded)
    # Each session's header: the tokens of its turns (when the recording has them).
    headers = sorted(m.groups() for m in map(HEADER_USAGE.search, end_lines) if m)
    assert headers == session_usage(events), end_lines
    # And how full its context is: its last model request against the window (the gauge).
    contexts = sorted(m.group(1) for m in map(HEADER_CONTEXT.search, end_lines) if m)
    assert contexts == session_context(events), end_lines

    def plain(line: str) -> str:
        return HEADER_USAGE.sub("", HEADER_CONTEXT.sub("", TURN_NUMBERS.sub("(…)", line)))

    return [plain(line) for line in mid_lines], [plain(line) for line in end_lines]


SPLIT_ANSWER = [
    "  ⏺ Splitting.",
    "    <fork>",
    "    - Write the docs",
    "    - Fix the bugs",
    "    </fork>",
    "  ✓ turn done (…)",
]
# The fixtures' workspace is no git repository: the children share its folder. The fork's line
# ends with its state, as its latest event said it.
SHARED_FORK = "  ⑂ Fork  2 tasks · shared folder: not a git repository  [{}]"
RESULTS_PROMPT = (
    '  › forkResults: <fork-results> <task label="Write the docs"> Docs written. </task> '
    '<task label="Fix the bugs"> Bugs…'
)


def test_the_tree_draws_a_recorded_fork(tmp_path: Path) -> None:
    _, lines = render_fixture(tmp_path, "fork")
    # The proposal says what the fork costs: the parent's context, as the server estimated it.
    [proposed] = [e for e in read(EVENTS_DIR / "fork.jsonl") if e.get("kind") == "forkProposed"]
    cost = fork_cost_brief(msgspec.convert(proposed["estimate"], ForkEstimate))
    assert cost.startswith("context ") and "/ 1M tokens" in cost
    assert lines == [
        "● Plan the release  ✓ idle",
        "  › you: Plan the release",
        *SPLIT_ANSWER,
        "  ⑂ Fork proposed  2 tasks: Write the docs; Fix the bugs"
        f" · {cost}  (:CovenApprove / :CovenReject)",
        SHARED_FORK.format("finished"),
        "    ⑂ Write the docs  ✓ idle",
        "      › fork: You were assigned 'Write the docs'",
        "      ⏺ Docs written.",
        "      ✓ turn done (…)",
        "    ⑂ Fix the bugs  ✓ idle",
        "      › fork: You were assigned 'Fix the bugs'",
        "      ⏺ Bugs fixed.",
        "      ✓ turn done (…)",
        "  ⑂ Fork done  2 of 2 tasks succeeded",
        RESULTS_PROMPT,
        "  ⏺ Both done.",
        "  ✓ turn done (…)",
    ]


def test_the_tree_draws_a_recorded_restart_mid_fork(tmp_path: Path) -> None:
    """The server is killed while the children run; a restarted one says the fork was cut off
    (forkInterrupted), the client resumes it, and it runs to the parent's answer."""
    waiting, lines = render_fixture(tmp_path, "restart", snapshot_after="forkInterrupted")
    assert waiting == [
        "● Plan the release  ! interrupted",
        "  › you: Plan the release",
        *SPLIT_ANSWER,
        SHARED_FORK.format("interrupted"),
        "    ⑂ Write the docs  ! interrupted",
        "      › fork: You were assigned 'Write the docs'",
        "    ⑂ Fix the bugs  ! interrupted",
        "      › fork: You were assigned 'Fix the bugs'",
        "  ⑂ Fork interrupted  2 unfinished: resume or abandon it",
    ]
    assert lines == [
        "● Plan the release  ✓ idle",
        "  › you: Plan the release",
        *SPLIT_ANSWER,
        SHARED_FORK.format("finished"),
        "    ⑂ Write the docs  ✓ idle",
        "      › fork: You were assigned 'Write the docs'",
        "      › fork: You were assigned 'Write the docs'",  # run again after the restart
        "      ⏺ Docs written.",
        "      ✓ turn done (…)",
        "    ⑂ Fix the bugs  ✓ idle",
        "      › fork: You were assigned 'Fix the bugs'",
        "      › fork: You were assigned 'Fix the bugs'",
        "      ⏺ Bugs fixed.",
        "      ✓ turn done (…)",
        "  ⑂ Fork interrupted  2 unfinished: resume or abandon it",
        "  ⑂ Fork resumed  2 tasks again",
        "  ⑂ Fork done  2 of 2 tasks succeeded",
        RESULTS_PROMPT,
        "  ⏺ Both done after the restart.",
        "  ✓ turn done (…)",
    ]


def test_the_tree_draws_recorded_tool_cancel_and_crash_turns(tmp_path: Path) -> None:
    _, tool = render_fixture(tmp_path, "tool")
    assert tool == [
        "● Make a file  ✓ idle",
        "  › you: Make a file",
        "  ✻ A touch will do.",
        "  ⏺ I'll make it.",
        "  ⚙ Bash  touch made.txt && echo made-it",
        "  ? Bash asks for permission",
        "    allowed Bash",
        "    ↳ made-it",
        "  ⏺ Made the file.",
        "  ✓ turn done (…)",
    ]
    _, cancel = render_fixture(tmp_path, "cancel")
    assert cancel == [
        "● Start the endless task  ✓ idle",
        "  › you: Start the endless task",
        "  ⏺ Working on it.",
        "  ■ turn cancelled",
        "  › you: Are you there?",
        "  ⏺ Still here.",
        "  ✓ turn done (…)",
    ]
    _, crash = render_fixture(tmp_path, "crash")
    [error] = [e for e in read(EVENTS_DIR / "crash.jsonl") if e.get("kind") == "error"]
    assert crash == [
        "● Say hello  ✓ idle",
        "  › you: Say hello",
        "  ⏺ Hello.",
        "  ✓ turn done (…)",
        "  › you: Start the long task",
        "  ✗ error: " + " ".join(error["message"].split()),
        "  › you: Are you back?",
        "  ⏺ Back again.",
        "  ✓ turn done (…)",
    ]


def test_the_tree_draws_a_recorded_review(tmp_path: Path) -> None:
    """Two worktree children in merge mode `review`: the fork waits with both children's
    changes pending, the first is applied, the second discarded."""
    waiting, lines = render_fixture(tmp_path, "review", snapshot_after="forkReviewing")
    [finished] = [e for e in read(EVENTS_DIR / "review.jsonl") if e.get("kind") == "forkFinished"]
    branch = finished["results"][1]["branch"]

    def child(label: str, name: str, merge: str) -> list[str]:
        command = f"printf '# {label}\\n' > {name} && echo wrote-{name}"
        return [
            # Recorded with bubblewrap: the worktree children ran in Claude Code's sandbox.
            f"    ⑂ {label}  ✓ idle  ± +1 −0 · 1 file · {merge}"
            "  · fenced by claude (network: full)",
            f"      › fork: You were assigned '{label}'",
            f"      ⚙ Bash  {command}",
            "      ? Bash asks for permission",
            "        allowed Bash",
            f"        ↳ wrote-{name}",
            f"      ⏺ Wrote {name}.",
            "      ✓ turn done (…)",
        ]

    head = ["  › you: Get ready", "  ⏺ Ready.", "  ✓ turn done (…)"]
    fork = "  ⑂ Fork  2 tasks · worktrees, changes reviewed  [{}]"
    review = (
        "  ⑂ Fork review  changes of 2 tasks wait  (:CovenChanges, :CovenApply / :CovenDiscard)"
    )
    assert waiting == [
        "● Get ready  ? reviewing",
        *head,
        fork.format("reviewing"),
        *child("Write the docs", "docs.md", "pending"),
        *child("Write a changelog", "CHANGES.md", "pending"),
        review,
    ]
    disk = f"worktrees take {disk_size(finished['diskBytes'])}"  # as coven-ls run says it
    assert lines[: len(waiting) + 3] == [
        "● Get ready  ✓ idle",
        *head,
        fork.format("finished"),
        *child("Write the docs", "docs.md", "applied"),
        *child("Write a changelog", "CHANGES.md", "discarded"),
        review,
        f"  ⑂ Fork done  2 of 2 tasks succeeded · {disk}",
        "    ✓ Write the docs: applied +1 −0 · 1 file",
        f"    ■ Write a changelog: discarded +1 −0 · 1 file — work kept on branch {branch}",
    ]
    assert lines[-2:] == ["  ⏺ One applied, one discarded.", "  ✓ turn done (…)"]


# --- deltas, retries, tasks and queues, fed by hand ----------------------------------------------

# Feeds STEPS (one JSON object a line: {"event": …}, {"delta": …} or {"snapshot": NAME}) to the
# tree as the plugin does, writing the rendered tree to OUT.NAME at each snapshot.
FEED = r"""
vim.opt.runtimepath:prepend(PLUGIN)
local tree = require('coven.tree')
local t = tree.new()
for _, line in ipairs(vim.fn.readfile(STEPS)) do
  local step = vim.json.decode(line)
  if step.event then
    tree.apply(t, step.event)
  elseif step.delta then
    tree.apply_delta(t, step.delta)
  else
    vim.fn.writefile(tree.render(t), OUT .. '.' .. step.snapshot)
  end
end
vim.cmd('qall!')
"""


def feed_tree(tmp_path: Path, steps: list[dict]) -> dict[str, list[str]]:
    """The tree's lines at each {"snapshot": name} of `steps`."""
    steps_file, out = tmp_path / "steps.jsonl", tmp_path / "fed"
    steps_file.write_text("".join(json.dumps(step) + "\n" for step in steps))
    init = tmp_path / "feed.lua"
    init.write_text(
        FEED.replace("PLUGIN", lua_string(str(PLUGIN)))
        .replace("STEPS", lua_string(str(steps_file)))
        .replace("OUT", lua_string(str(out)))
    )
    env = {**os.environ}
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        env[var] = str(tmp_path / var.lower())
    done = subprocess.run(
        [NVIM, "--headless", "--noplugin", "-n", "-i", "NONE", "-u", str(init)],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    names = [step["snapshot"] for step in steps if "snapshot" in step]
    return {name: out.with_suffix(f".{name}").read_text().splitlines() for name in names}


class Steps:
    """Events (seq numbered per session) and deltas as the server would send them, for the
    session `sid` names (`of()` switches)."""

    def __init__(self, sid: str = "s-1") -> None:
        self.sid, self.seqs, self.steps = sid, {sid: 0}, []

    def of(self, sid: str) -> Steps:
        self.sid = sid
        self.seqs.setdefault(sid, 0)
        return self

    def event(self, kind: str, **fields) -> Steps:
        self.seqs[self.sid] += 1
        seq = self.seqs[self.sid]
        event = {"sessionId": self.sid, "seq": seq, "kind": kind, "time": "", **fields}
        self.steps.append({"event": event})
        return self

    def delta(self, block: str, text: str, kind: str = "text", **fields) -> Steps:
        head = {"sessionId": self.sid, "afterSeq": self.seqs[self.sid], "blockId": block}
        self.steps.append({"delta": {**head, "kind": kind, "text": text, **fields}})
        return self

    def snapshot(self, name: str) -> Steps:
        self.steps.append({"snapshot": name})
        return self


USAGE = {
    "inputTokens": 24,
    "outputTokens": 4480,
    "cacheReadTokens": 12000,
    "cacheCreationTokens": 310,
}


def test_the_tree_grows_with_deltas_and_the_text_event_replaces_them(tmp_path: Path) -> None:
    s = Steps()
    s.event("status", status="running").event("prompt", text="Count the files", origin="user")
    s.delta("m1:0", "The user wants", kind="thinking").delta("m1:0", " a count.", kind="thinking")
    s.event("thinking", text="The user wants a count.", blockId="m1:0")
    s.delta("m1:1", "There are 4").snapshot("first")
    s.delta("m1:1", "2 files\nin s").snapshot("second")
    s.event("text", text="There are 42 files\nin src/.", blockId="m1:1").snapshot("whole")
    s.event("turnResult", text="There are 42 files\nin src/.", isError=False, subtype="success")
    s.steps[-1]["event"].update(costUsd=0.0123, durationMs=2100, usage=USAGE)
    s.event("status", status="idle")
    # A follow-up, cancelled mid-answer: its pieces go, the turn reads as cancelled.
    s.event("prompt", text="Go on", origin="user").event("status", status="running")
    s.delta("m2:0", "Going o").snapshot("cancelling")
    s.event("turnResult", text="", isError=False, subtype="cancelled", cancelled=True)
    s.event("status", status="idle").snapshot("cancelled")

    shot = feed_tree(tmp_path, s.steps)

    head = [
        "● Count the files  ▶ running",
        "  › you: Count the files",
        "  ✻ The user wants a count.",
    ]
    assert shot["first"] == [*head, "  ⏺ There are 4"]
    assert shot["second"] == [*head, "  ⏺ There are 42 files", "    in s"]
    assert shot["whole"] == [*head, "  ⏺ There are 42 files", "    in src/."]
    answer = ["  ⏺ There are 42 files", "    in src/.", "  ✓ turn done (2.1 s, $0.0123)"]
    assert shot["cancelling"][-2:] == ["  › you: Go on", "  ⏺ Going o"]
    assert shot["cancelled"] == [
        # 24 + 12000 + 310 tokens in, 4480 out
        "● Count the files  ✓ idle  · 12.3k in · 4.5k out",
        *head[1:],
        *answer,
        "  › you: Go on",
        "  ■ turn cancelled",
    ]


def test_the_tree_shows_retries_tasks_and_queue_positions(tmp_path: Path) -> None:
    parent = Steps("s-parent")
    parent.event("prompt", text="Research the code", origin="user")
    retry = {"maxRetries": 10, "errorStatus": 529, "error": "overloaded"}
    parent.event("apiRetry", attempt=1, retryDelayMs=600, **retry).snapshot("retry")
    parent.event("apiRetry", attempt=2, retryDelayMs=1200, **retry).snapshot("retry2")
    agent = {"description": "Find TODOs", "prompt": "Look for TODOs"}
    parent.event("toolUse", toolUseId="tu-1", name="Agent", input=agent)
    parent.event("task", taskId="t-1", status="started", toolUseId="tu-1", description="Find TODOs")
    parent.event("toolResult", toolUseId="tu-1", content="Async agent launched", isError=False)
    parent.event("task", taskId="t-1", status="running", lastToolName="Grep", toolUses=2)
    parent.event("text", text="Found 3 TODOs.", parentToolUseId="tu-1").snapshot("running")
    parent.event("task", taskId="t-1", status="completed", summary="Found 3 TODOs.")
    parent.event("prompt", text="Background task completed: Find TODOs", origin="task")
    parent.snapshot("completed")
    # A fork child waiting for a slot.
    parent.event(
        "forkStarted",
        forkId="f-1",
        source="user",
        tasks=["Fix the bugs"],
        children=[{"sessionId": "s-child", "label": "Fix the bugs"}],
    )
    child = parent.of("s-child")
    child.event("status", status="queued").event("queuePosition", position=2).snapshot("queued")
    child.event("queuePosition", position=1).snapshot("next")
    child.event("status", status="running").snapshot("started")

    shot = feed_tree(tmp_path, parent.steps)

    retrying = "  ⟳ API overloaded — retrying in {} ({}/10)"
    assert shot["retry"][-1] == retrying.format("0.6 s", 1)
    # The latest retry takes the place of the one before.
    assert shot["retry2"][2:] == [retrying.format("1.2 s", 2)]
    assert shot["running"] == [
        "● Research the code",
        "  › you: Research the code",
        retrying.format("1.2 s", 2),
        "  ⚙ Agent  Look for TODOs",
        "    ◇ task Find TODOs  ▶ running (Grep, 2 tool uses)",
        "      ⏺ Found 3 TODOs.",
        "    ↳ Async agent launched",
    ]
    assert shot["completed"][4:] == [
        "    ◇ task Find TODOs  ✓ completed — Found 3 TODOs.",
        "      ⏺ Found 3 TODOs.",
        "    ↳ Async agent launched",
        "  › task: Background task completed: Find TODOs",
    ]
    assert shot["queued"][-2:] == ["  ⑂ Fork  1 task", "    ⑂ Fix the bugs  · queued (2nd in line)"]
    assert shot["next"][-1] == "    ⑂ Fix the bugs  · queued (next)"
    assert shot["started"][-1] == "    ⑂ Fix the bugs  ▶ running"


def test_the_tree_shows_an_acp_agents_options_modes_restarts_and_plans(tmp_path: Path) -> None:
    s = Steps()
    s.event("prompt", text="Run the tests", origin="user")
    options = [
        {"optionId": "once", "kind": "allow_once", "name": "Allow once"},
        {"optionId": "always", "kind": "allow_always", "name": "Always allow"},
        {"optionId": "reject", "kind": "reject_once", "name": "Reject"},
    ]
    s.event("permissionRequest", toolName="Bash", input={"command": "npm test"}, options=options)
    s.event("permissionDecision", toolName="Bash", allow=True, optionId="always")
    s.event("modeChanged", mode="plan")
    reason = "The ACP agent 'opencode' was killed by SIGKILL."
    s.event("agentRestarted", reason=reason, restart=1, maxRestarts=3)
    entries = [
        {"content": "Read the test", "status": "completed", "priority": "high"},
        {"content": "Fix the parser", "status": "in_progress", "priority": "high"},
    ]
    s.event("plan", entries=entries)
    s.event("toolUpdate", toolUseId="c9", content="def parse(")  # output alone: not shown
    location = {"path": "/w/parser.py", "line": 12}
    s.event("toolUpdate", toolUseId="c9", status="in_progress", locations=[location])
    s.snapshot("after")

    shot = feed_tree(tmp_path, s.steps)

    assert shot["after"][2:] == [
        "  ? Bash asks for permission (Allow once / Always allow / Reject)",
        "    allowed Bash (always)",
        "  ◆ mode: plan",
        f"  ↻ agent started again (1 of 3): {reason}",
        "  ☰ plan 1/2 done · [>] Fix the parser",
        "    ↳ tool c9: in_progress · /w/parser.py:12",
    ]


def worktree_changes(merge: str, *files: tuple[str, int, int]) -> dict:
    listed = [
        {"path": p, "status": "modified", "oldPath": None, "binary": False}
        | {"linesAdded": a, "linesRemoved": r}
        for p, a, r in files
    ]
    return {
        "merge": merge,
        "files": listed,
        "linesAdded": sum(a for _, a, _ in files),
        "linesRemoved": sum(r for _, _, r in files),
        "conflicts": [],
        "commit": "c0ffee" if files else None,
    }


def test_the_tree_shows_worktree_children_changes_and_the_review(tmp_path: Path) -> None:
    s = Steps("s-parent")
    s.event("prompt", text="Plan the release", origin="user")
    children = [{"sessionId": "s-docs", "label": "Docs"}, {"sessionId": "s-bugs", "label": "Bugs"}]
    base = {"forkId": "f-1", "source": "user", "tasks": ["Docs", "Bugs"], "children": children}
    s.event("forkStarted", **base, isolation="worktree", mergeMode="review", base="9c1e")
    tree = {"base": "9c1e", "repository": "/repo"}
    docs = worktree_changes("pending", ("docs/guide.md", 38, 2), ("README.md", 2, 0))
    s.of("s-docs").event("status", status="idle")
    s.event(
        "changes", worktree={"path": "/w/1", "branch": "coven/f-1/1-docs", **tree}, changes=docs
    )
    bugs = worktree_changes("pending", ("src/app.py", 3, 1))
    s.of("s-bugs").event("status", status="idle")
    s.event(
        "changes", worktree={"path": "/w/2", "branch": "coven/f-1/2-bugs", **tree}, changes=bugs
    )
    s.of("s-parent").event("status", status="reviewing")
    s.event("forkReviewing", forkId="f-1", pending=["s-docs", "s-bugs"]).snapshot("reviewing")
    s.of("s-docs").event("changes", worktree={}, changes={**docs, "merge": "applied"})
    conflict = [{"path": "src/app.py", "reason": "changed on the same lines"}]
    s.of("s-bugs").event("changes", worktree={}, changes={**bugs, "merge": "conflict"})
    results = [
        {"label": "Docs", "sessionId": "s-docs", "ok": True, "merge": "applied"},
        {"label": "Bugs", "sessionId": "s-bugs", "ok": True, "merge": "conflict"}
        | {"branch": "coven/f-1/2-bugs", "conflicts": conflict},
    ]
    s.of("s-parent").event("forkFinished", forkId="f-1", results=results, diskBytes=40960)
    shared = {"forkId": "f-2", "source": "user", "tasks": ["More"], "isolation": "shared"}
    more = [{"sessionId": "s-more", "label": "More"}]
    s.event("forkStarted", **shared, children=more, isolationReason="not a git repository")
    s.snapshot("done")

    shot = feed_tree(tmp_path, s.steps)

    assert shot["reviewing"] == [
        "● Plan the release  ? reviewing",
        "  › you: Plan the release",
        "  ⑂ Fork  2 tasks · worktrees, changes reviewed",
        "    ⑂ Docs  ✓ idle  ± +40 −2 · 2 files · pending",
        "    ⑂ Bugs  ✓ idle  ± +3 −1 · 1 file · pending",
        "  ⑂ Fork review  changes of 2 tasks wait  (:CovenChanges, :CovenApply / :CovenDiscard)",
    ]
    assert shot["done"][3:] == [
        "    ⑂ Docs  ✓ idle  ± +40 −2 · 2 files · applied",
        "    ⑂ Bugs  ✓ idle  ± +3 −1 · 1 file · conflict",
        "  ⑂ Fork review  changes of 2 tasks wait  (:CovenChanges, :CovenApply / :CovenDiscard)",
        "  ⑂ Fork done  2 of 2 tasks succeeded · worktrees take 40 KB",
        "    ✓ Docs: applied +40 −2 · 2 files",
        "    ✗ Bugs: conflict in src/app.py — work kept on branch coven/f-1/2-bugs",
        "  ⑂ Fork  1 task · shared folder: not a git repository",
        "    ⑂ More",
    ]


def test_the_tree_says_how_each_child_is_held(tmp_path: Path) -> None:
    s = Steps("s-parent")
    s.event("prompt", text="Plan the release", origin="user")
    fenced = {"fenced": True, "by": "claude", "reason": None, "network": "loopback"}
    why = "bubblewrap (bwrap) not found on PATH"
    unfenced = {"fenced": False, "by": None, "reason": why, "network": None}
    children = [
        {"sessionId": "s-docs", "label": "Docs", "sandbox": fenced},
        {"sessionId": "s-bugs", "label": "Bugs", "sandbox": unfenced},
        {"sessionId": "s-old", "label": "Old"},  # from a server before the sandbox
    ]
    base = {"forkId": "f-1", "source": "user", "tasks": ["Docs", "Bugs", "Old"]}
    s.event("forkStarted", **base, children=children, isolation="worktree", mergeMode="auto")
    s.snapshot("started")

    shot = feed_tree(tmp_path, s.steps)

    assert shot["started"][3:] == [
        "    ⑂ Docs  · fenced by claude (network: loopback)",
        f"    ⑂ Bugs  · unfenced: {why}",
        "    ⑂ Old",
    ]


def test_covenstart_takes_the_agent(tmp_path: Path, model: ScriptedModel) -> None:
    """`:CovenStart ++agent=codex {prompt}` starts a Codex session; the prompt is what follows."""
    from coven_ls.agents.codex import resolve_codex
    from coven_ls.testing.scripted_responses import ScriptedResponses

    try:
        resolve_codex(None)
    except Exception:
        pytest.skip("no codex binary (pip install coven-ls[codex])")
    with ScriptedResponses() as responses:
        responses.on("Hello from nvim", "Codex in Neovim.")

        def prepare(workspace: Path, env: dict[str, str]) -> dict[str, str]:
            return {**env, **responses.codex_env(tmp_path / "codex-home")}

        lines = run_nvim(
            tmp_path,
            model,
            r"""
coven.on_event(function(ev)
  if ev.kind == 'turnResult' and ev.text == 'Codex in Neovim.' then finish_soon() end
end)
vim.cmd('CovenStart ++agent=codex Hello from nvim')
""",
            prepare=prepare,
        )
    assert lines[0].startswith("● Hello from nvim"), lines
    assert [r.last_user_text for r in responses.requests] == ["Hello from nvim"]
    assert model.requests == []


def test_covenstart_completes_the_servers_agents_and_runs_an_acp_one(
    tmp_path: Path, model: ScriptedModel
) -> None:
    """`:CovenStart ++agent=<Tab>` completes the agents the server offers (codex-acp, a known ACP
    agent found on PATH, among them); a name it does not offer is refused with them, before any
    request; `++agent=codex-acp` runs the session on it."""
    from coven_ls.testing.scripted_responses import ScriptedResponses

    from .test_acp_agents_e2e import CODEX_ACP

    if not CODEX_ACP.is_file():
        pytest.skip("codex-acp not installed (scripts/test.sh runs npm ci in tests/e2e/acp_agents)")
    with ScriptedResponses() as responses:
        responses.on("Hello from nvim", "codex-acp in Neovim.")

        def prepare(workspace: Path, env: dict[str, str]) -> dict[str, str]:
            path = f"{CODEX_ACP.parent}{os.pathsep}{env.get('PATH', '')}"
            return {**env, **responses.codex_env(tmp_path / "codex-home"), "PATH": path}

        lines = run_nvim(
            tmp_path,
            model,
            r"""
local said = {}
vim.notify = function(message) table.insert(said, message) end
-- A Tab before the server answered initialize starts it; once it has, the names complete.
local early = coven.complete_start('++agent=')
if not vim.wait(60000, function() return coven.agents() ~= nil end, 50) then finish('not ready') end
local offered = vim.fn.getcompletion('CovenStart ++agent=codex-', 'cmdline')
if not vim.tbl_contains(offered, '++agent=codex-acp') or vim.tbl_contains(offered, '++agent=claude')
  or not vim.tbl_isempty(early) then
  finish('completion: ' .. vim.inspect({ early, offered }))
end
local listed = {}
for _, offer in ipairs(coven.agents() or {}) do listed[offer.name] = offer end
if not (listed.claude and listed['codex-acp'] and listed['codex-acp'].kind ~= 'claude') then
  finish('agents: ' .. vim.inspect(coven.agents()))
end
vim.cmd('CovenStart ++agent=nosuch Hello')
local refusal = table.concat(said, '\n')
if not refusal:find("unknown agent 'nosuch': this server offers claude", 1, true)
  or not refusal:find('codex-acp', 1, true) then
  finish('refusal: ' .. refusal)
end
coven.on_event(function(ev)
  if ev.kind == 'turnResult' and ev.text == 'codex-acp in Neovim.' then finish_soon() end
end)
vim.cmd('CovenStart ++agent=codex-acp Hello from nvim')
""",
            prepare=prepare,
        )
    assert lines[0].startswith("● Hello from nvim"), lines
    assert [r for r in responses.requests if "Hello from nvim" in r.all_text]
    assert not [r for r in responses.requests if r.all_text.strip() == "Hello"]
    assert model.requests == []


def test_the_plugin_reads_the_servers_agents_in_either_shape(tmp_path: Path) -> None:
    """`experimental.coven.agents`: a list of {name, kind, fork, cost} (JSON null as vim.NIL, a
    false cost kept), or of names from a server of protocol version 1."""
    script = tmp_path / "offers.lua"
    out = tmp_path / "offers.json"
    script.write_text(
        f"vim.opt.runtimepath:prepend({lua_string(str(PLUGIN))})\n"
        r"""
local coven = require('coven')
local v2 = vim.fn.json_decode('{"agents": [{"name": "claude", "kind": "claude", "fork": "inherit",'
  .. ' "cost": true}, {"name": "codex-acp", "kind": "acp", "fork": "transcript", "cost": false},'
  .. ' {"name": "opencode", "kind": "acp", "fork": null, "cost": null}]}')
local seen = {
  v2 = coven.offers_of(v2),
  v1 = coven.offers_of({ agents = { 'claude', 'codex', 'mine' } }),
  none = coven.offers_of({ protocolVersion = 1 }) == nil,
}
"""
        f"vim.fn.writefile({{vim.fn.json_encode(seen)}}, {lua_string(str(out))})\n"
        "vim.cmd('qall!')\n"
    )
    subprocess.run(
        [NVIM, "--headless", "--noplugin", "-n", "-i", "NONE", "-u", str(script)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    seen = json.loads(out.read_text())
    assert seen["v2"] == [
        {"name": "claude", "kind": "claude", "fork": "inherit", "cost": True},
        {"name": "codex-acp", "kind": "acp", "fork": "transcript", "cost": False},
        {"name": "opencode", "kind": "acp"},
    ]
    assert seen["v1"] == [
        {"name": "claude", "kind": "claude"},
        {"name": "codex", "kind": "codex"},
        {"name": "mine"},
    ]
    assert seen["none"] is True


def test_the_tree_draws_a_recorded_codex_session_and_its_fork(tmp_path: Path) -> None:
    """The Codex fixture: its command asks to leave the sandbox, its fork's children are thread
    forks; the tree draws them as it draws Claude's."""
    _, lines = render_fixture(tmp_path, "codex")
    assert lines[:4] == [
        "● Tidy the notes  ✓ idle",
        "  › you: Tidy the notes",
        "  ✻ A command first.",
        "  ⚙ Bash  /bin/bash -lc 'echo tidied > tidy.txt'",
    ]
    assert "  ? Bash asks for permission" in lines and "    allowed Bash" in lines
    assert SHARED_FORK.format("finished") in lines
    for label, answer in (("Write the docs", "Docs written."), ("Fix the bugs", "Bugs fixed.")):
        at = lines.index(f"    ⑂ {label}  ✓ idle")
        assert lines[at + 1 : at + 4] == [
            f"      › fork: You were assigned '{label}'",
            f"      ⏺ {answer}",
            "      ✓ turn done (…)",
        ]
    assert lines[-4:] == [
        "  ⑂ Fork done  2 of 2 tasks succeeded",
        RESULTS_PROMPT,
        "  ⏺ Both done.",
        "  ✓ turn done (…)",
    ]


def test_the_plugins_fork_limits_stop_a_child_that_never_ends(
    tmp_path: Path, model: ScriptedModel
) -> None:
    """fork_limits = { child_tokens = ... } reaches the server as initializationOptions.forkLimits:
    a child that keeps calling tools is stopped at its limit and the parent goes on."""
    loop, quick = "Keep polishing", "Say hello"
    model.on("Plan the release", f"Splitting.\n<fork>\n- {loop}\n- {quick}\n</fork>")
    model.on(
        lambda r: (
            f"You were assigned '{loop}'" in r.all_text and "<fork-results>" not in r.all_text
        ),
        lambda _r: reply(
            "One more pass.",
            ToolUse("Bash", {"command": "echo pass"}),
            usage=Usage(input_tokens=1500, output_tokens=500),
        ),
    )
    model.on(f"You were assigned '{quick}'", "Hello.", usage=Usage(10, 5))
    model.on("<fork-results>", "Going on without more polish.", usage=Usage(10, 5))

    lines = run_nvim(
        tmp_path,
        model,
        r"""
vim.lsp.handlers['window/showMessageRequest'] = function(_, params)
  if params.message:find('wants to use Bash', 1, true) then return { title = 'Allow' } end
  return vim.NIL
end
local fork_done = false
coven.on_event(function(ev)
  if ev.kind == 'forkStarted' or ev.kind == 'forkFinished' then
    vim.fn.writefile({ vim.json.encode(ev) }, OUT .. '.' .. ev.kind)
    fork_done = ev.kind == 'forkFinished'
  elseif ev.sessionId == root and fork_done and ev.kind == 'status' and ev.status == 'idle' then
    finish_soon()
  end
end)
vim.cmd('CovenStart Plan the release')
""".replace("OUT", lua_string(str(tmp_path / "result"))),
        init_options="{ forkMode = 'auto' }",
        setup="fork_limits = { child_tokens = 3000 }",
    )
    started = json.loads((tmp_path / "result.forkStarted").read_text())
    finished = json.loads((tmp_path / "result.forkFinished").read_text())
    assert started["limits"] == {"childTokens": 3000}
    stopped, hello = finished["results"]
    assert (stopped["label"], stopped["stopped"], stopped["limit"]) == (
        loop,
        "limit",
        "childTokens",
    )
    assert hello["ok"] is True
    assert "⏺ Going on without more polish." in "\n".join(lines)
