"""Neovim's :CovenBranch, headless, with the real CLI against the scripted model: a branch of the
current session holds its conversation, becomes the current session, draws at the top level
marked as a branch, and its parent never hears of it; `coven.branch()` branches at an earlier
message."""

from __future__ import annotations

from pathlib import Path

from coven_ls.testing.scripted_model import ScriptedModel, reply

from .test_nvim_e2e import find, indent, pytestmark, run_nvim  # noqa: F401  (pytestmark: skip without nvim)


def saw(words: list[str]) -> object:
    """A reply naming which of `words` the request's whole conversation holds."""
    return lambda r: reply(" ".join(f"saw-{w}={w in r.all_text}" for w in words))


def test_covenbranch_branches_the_current_session_and_switches_to_it(
    tmp_path: Path, model: ScriptedModel
) -> None:
    model.on("first question", "The first answer is zebra.")
    model.on("Branch question", saw(["zebra"]))
    model.on("Follow-up", saw(["Branch"]))

    lines = run_nvim(
        tmp_path,
        model,
        r"""
local branch = nil
local branched = false
coven.on_event(function(ev)
  if ev.sessionId == root and ev.kind == 'status' and ev.status == 'idle' and not branched then
    branched = true
    vim.schedule(function() vim.cmd('CovenBranch Branch question') end)
  elseif ev.sessionId ~= root and ev.kind == 'turnResult' and not branch then
    branch = ev.sessionId
    -- The branch is the current session now: :CovenSend goes to it.
    vim.schedule(function() vim.cmd('CovenSend Follow-up') end)
  elseif ev.sessionId == branch and ev.kind == 'turnResult' then
    finish_soon()
  end
end)
vim.cmd('CovenStart A first question')
""",
    )

    tree = "\n".join(lines)
    root = find(lines, "● A first question")
    head = find(lines, "⎇ Branch question  (branch of A first question)")
    assert indent(lines[root]) == indent(lines[head]) == 0, tree
    assert root < find(lines, "The first answer is zebra.") < head, tree
    # The branch had the parent's conversation; the follow-up went to the branch, which knows its
    # own first message.
    assert head < find(lines, "saw-zebra=True") < find(lines, "saw-Branch=True"), tree
    parent_lines = lines[root:head]
    assert not any("saw-" in line for line in parent_lines), tree
    [branch_request] = [r for r in model.requests if r.last_user_text == "Branch question"]
    assert "The first answer is zebra." in branch_request.all_text


def test_coven_branch_at_an_earlier_message_waits_for_a_message(
    tmp_path: Path, model: ScriptedModel
) -> None:
    model.on("first question", "The first answer is zebra.")
    model.on("second question", "The second answer is quokka.")
    model.on("Early branch", saw(["zebra", "quokka"]))

    lines = run_nvim(
        tmp_path,
        model,
        r"""
local early = nil
local idles = 0
coven.on_event(function(ev)
  if ev.sessionId == root and ev.kind == 'text' and not early then early = ev.messageId end
  if ev.sessionId == root and ev.kind == 'status' and ev.status == 'idle' then
    idles = idles + 1
    if idles == 1 then
      vim.schedule(function() vim.cmd('CovenSend A second question') end)
    elseif idles == 2 then
      vim.schedule(function()
        coven.branch(nil, early, function() vim.cmd('CovenSend Early branch') end)
      end)
    end
  elseif ev.sessionId ~= root and ev.kind == 'turnResult' then
    finish_soon()
  end
end)
vim.cmd('CovenStart A first question')
""",
    )

    tree = "\n".join(lines)
    # No prompt: the branch has no title of its own until its first message (its id, then).
    head = next(i for i, line in enumerate(lines) if line.startswith("⎇ "))
    assert "(branch of A first question)" in lines[head], tree
    assert (
        find(lines, "The second answer is quokka.")
        < head
        < find(lines, "saw-zebra=True saw-quokka=False")
    ), tree


def test_covenbranch_at_a_message_named_or_under_the_cursor_in_the_tree(
    tmp_path: Path, model: ScriptedModel
) -> None:
    """`:CovenBranch ++at=ID` branches the current session at that message; in the tree window,
    `:CovenBranch` branches the session of the line under the cursor at that line's message
    (here the root, while the current session is the first branch)."""
    model.on("first question", "The first answer is zebra.")
    model.on("second question", "The second answer is quokka.")
    model.on("Atbranch question", saw(["zebra", "quokka"]))
    model.on("Cursorbranch question", saw(["zebra", "quokka", "Atbranch"]))

    lines = run_nvim(
        tmp_path,
        model,
        r"""
local early = nil
local idles = 0
local branches = 0
local function cursor_on(text)
  coven.render()
  local buf = coven.tree_buffer()
  local win = vim.fn.bufwinid(buf)
  vim.api.nvim_set_current_win(win)
  for i, line in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
    if line:find(text, 1, true) then
      vim.api.nvim_win_set_cursor(win, { i, 0 })
      return
    end
  end
  error('no line shows ' .. text)
end
coven.on_event(function(ev)
  if ev.sessionId == root and ev.kind == 'text' and not early then early = ev.messageId end
  if ev.sessionId == root and ev.kind == 'status' and ev.status == 'idle' then
    idles = idles + 1
    if idles == 1 then
      vim.schedule(function() vim.cmd('CovenSend A second question') end)
    elseif idles == 2 then
      vim.schedule(function() vim.cmd('CovenBranch ++at=' .. early .. ' Atbranch question') end)
    end
  elseif ev.sessionId ~= root and ev.kind == 'turnResult' then
    branches = branches + 1
    if branches == 1 then
      vim.schedule(function()
        cursor_on('The first answer is zebra.')
        vim.cmd('CovenBranch Cursorbranch question')
      end)
    else
      finish_soon()
    end
  end
end)
vim.cmd('CovenStart A first question')
""",
    )

    tree = "\n".join(lines)
    at = find(lines, "⎇ Atbranch question  (branch of A first question)")
    under = find(lines, "⎇ Cursorbranch question  (branch of A first question)")
    assert find(lines, "The second answer is quokka.") < at, tree
    assert at < find(lines, "saw-zebra=True saw-quokka=False") < under, tree
    # The root's branch at its first answer: not the current session's (which knows Atbranch).
    assert under < find(lines, "saw-zebra=True saw-quokka=False saw-Atbranch=False"), tree
    [request] = [r for r in model.requests if r.last_user_text == "Cursorbranch question"]
    assert "zebra" in request.all_text and "quokka" not in request.all_text
