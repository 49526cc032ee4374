-- The session tree: `coven/event`s (and `coven/delta` pieces) folded into sessions, and sessions
-- drawn as buffer lines. Nothing here talks to the server or touches a buffer, so the drawing can
-- be checked alone.
--
-- A session's lines sit under its header (status, the tokens of its turns so far, then how full its
-- context is: its last model request against its model's window); a fork's
-- children are drawn right under the parent's "⑂ Fork" line, one level deeper, each with its own
-- header:
--
--   ● Plan the release  ✓ idle  · 12.3k in · 450 out  · context 5k / 1M tokens (0%)
--     › you: Plan the release
--     ⏺ I will split this.
--     ⑂ Fork  2 tasks
--       ⑂ Write the docs  ✓ idle
--         ⏺ Docs are written.
--       ⑂ Fix the bugs  ✓ idle
--         ⏺ Bugs are fixed.
--     ⑂ Fork done  2 of 2 tasks succeeded
--     ⏺ Both parts are done.
--
-- A child that worked in a git worktree has its changes in its header (`± +40 −2 · 2 files ·
-- applied`), and the "Fork done" line is followed by what became of each child's changes.

local M = {}

-- Marks and names shared with coven-ls's own renderers (coven_ls/protocol/labels.json).
local labels = require('coven.labels')

M.STATUS_MARKS = labels.statusMarks

-- Collapse whitespace and cut to `limit` characters (not bytes: labels are UTF-8).
local function one_line(text, limit)
  local flat = vim.trim((tostring(text or ''):gsub('%s+', ' ')))
  if vim.fn.strchars(flat) > limit then
    flat = vim.fn.strcharpart(flat, 0, limit - 1) .. '…'
  end
  return flat
end
M.one_line = one_line

local function plural(n, word)
  return n .. ' ' .. word .. (n == 1 and '' or 's')
end

-- 950, 12.3k, 4.5M
local function compact(n)
  n = tonumber(n) or 0
  if n < 1000 then
    return tostring(math.floor(n))
  elseif n < 999950 then
    return (string.format('%.1fk', n / 1000):gsub('%.0k$', 'k'))
  end
  return (string.format('%.1fM', n / 1000000):gsub('%.0M$', 'M'))
end
M.compact = compact

local function seconds(ms)
  local value = (tonumber(ms) or 0) / 1000
  if value >= 10 or value == math.floor(value) then
    return string.format('%d s', math.floor(value + 0.5))
  end
  return string.format('%.1f s', value)
end

local API_FAILURES = labels.apiFailures

local function api_retry(ev)
  local status = tonumber(ev.errorStatus)
  local err = type(ev.error) == 'string' and ev.error or ''
  local what
  if status and API_FAILURES[status] then
    what = API_FAILURES[status]
  elseif err:lower():find('overloaded', 1, true) then
    what = 'API overloaded'
  elseif status then
    what = 'API error ' .. status
  elseif err ~= '' then
    what = 'API call failed (' .. one_line(err, 40) .. ')'
  else
    what = 'API call failed'
  end
  return string.format('⟳ %s — retrying in %s (%s/%s)', what, seconds(ev.retryDelayMs),
    tostring(ev.attempt), tostring(ev.maxRetries))
end

local TASK_MARKS = { started = '▶', running = '▶', completed = '✓', failed = '✗', stopped = '■' }

-- A background task (the CLI's subagent) as one line that its events update: what it is, its
-- status, and its progress or how it ended.
local function task_line(task)
  local status = task.status or 'started'
  local line = '◇ task ' .. one_line(task.description or task.taskId, 60) .. '  '
    .. (TASK_MARKS[status] or '·') .. ' ' .. (status == 'started' and 'running' or status)
  if status == 'started' or status == 'running' then
    local progress = {}
    if type(task.lastToolName) == 'string' then
      table.insert(progress, task.lastToolName)
    end
    if tonumber(task.toolUses) then
      table.insert(progress, plural(task.toolUses, 'tool use'))
    end
    if tonumber(task.totalTokens) then
      table.insert(progress, compact(task.totalTokens) .. ' tokens')
    end
    if #progress > 0 then
      line = line .. ' (' .. table.concat(progress, ', ') .. ')'
    end
  elseif type(task.summary) == 'string' and task.summary ~= '' then
    line = line .. ' — ' .. one_line(task.summary, 80)
  end
  return line
end

local function ordinal(n)
  local last2, last = n % 100, n % 10
  if last2 >= 11 and last2 <= 13 then
    return n .. 'th'
  end
  return n .. (({ 'st', 'nd', 'rd' })[last] or 'th')
end

-- `+40 −2 · 2 files`: a worktree child's changes at a glance.
local function change_counts(changes)
  local files = type(changes.files) == 'table' and #changes.files or 0
  return string.format('+%d −%d · %s', tonumber(changes.linesAdded) or 0,
    tonumber(changes.linesRemoved) or 0, plural(files, 'file'))
end
M.change_counts = change_counts

local function present(value)
  return value ~= nil and value ~= vim.NIL
end

-- A session's context (`contextUsage`, or a fork estimate's parent context): `5k / 1M tokens
-- (0%)`, or the tokens alone and why for a model coven-ls's price table does not know.
local function context_gauge(tokens, window, model)
  if present(window) and tonumber(window) and tonumber(window) > 0 then
    return compact(tokens) .. ' / ' .. compact(window) .. ' tokens ('
      .. math.floor(tonumber(tokens) * 100 / tonumber(window)) .. '%)'
  end
  local name = present(model) and tostring(model) or 'the model'
  return compact(tokens) .. ' tokens (window unknown: ' .. name .. ' is not in the table)'
end
M.context_gauge = context_gauge

-- A proposed fork's estimate in one line: the parent's context, what the children read, the cost.
local function fork_cost(e)
  -- Under a cent to a hundredth of one: a fork that costs $0.0027 is not "$0.00".
  local cost = present(e.costUsd) and string.format(e.costUsd >= 0.01 and '≈ $%.2f' or '≈ $%.4f', e.costUsd)
    or 'cost unknown'
  return 'context ' .. context_gauge(e.contextTokens, e.window, e.model) .. ' · fork '
    .. compact(e.tokens) .. ' tokens ' .. cost .. (present(e.warning) and ' ⚠ context nearly full' or '')
end
M.fork_cost = fork_cost

-- What became of one child's changes (its forkFinished result, its latest `changes`); nil for a
-- child that shared its parent's folder. The same words as `coven-ls run`'s summary.
function M.merge_line(result, changes)
  local merge = present(result.merge) and result.merge or (changes and changes.merge)
  if not present(merge) then
    return nil
  end
  local label = one_line(result.label or result.sessionId, 60)
  local counts = changes and (' ' .. change_counts(changes)) or ''
  local branch = present(result.branch) and result.branch or nil
  local on_branch = branch and (' — work kept on branch ' .. branch) or ''
  if merge == 'applied' then
    return '✓ ' .. label .. ': applied' .. counts
  elseif merge == 'conflict' then
    local conflicts = present(result.conflicts) and result.conflicts or (changes and changes.conflicts) or {}
    local paths = {}
    for i, c in ipairs(conflicts) do
      if i <= 3 then
        table.insert(paths, tostring(c.path))
      end
    end
    local where = #paths > 0 and (' in ' .. table.concat(paths, ', ')) or ''
    if #conflicts > 3 then
      where = where .. ' and ' .. (#conflicts - 3) .. ' more'
    end
    return '✗ ' .. label .. ': conflict' .. where .. on_branch
  elseif merge == 'discarded' then
    return '■ ' .. label .. ': discarded' .. counts .. on_branch
  elseif merge == 'kept' then
    local why = present(result.error) and (' (' .. one_line(result.error, 60) .. ')') or ''
    local kept = branch and (' —' .. counts .. ' kept on branch ' .. branch) or ''
    return '! ' .. label .. ': not merged, the task failed' .. why .. kept
  elseif merge == 'unchanged' then
    return '· ' .. label .. ': unchanged'
  end
  return '? ' .. label .. ': ' .. tostring(merge) .. counts
end

local function tool_summary(input)
  if type(input) ~= 'table' then
    return ''
  end
  for _, key in ipairs({ 'command', 'file_path', 'path', 'url', 'pattern', 'prompt', 'description' }) do
    if type(input[key]) == 'string' and input[key] ~= '' then
      return one_line(input[key], 80)
    end
  end
  return one_line(vim.fn.json_encode(input), 80)
end

local PLAN_MARKS = { completed = '[x]', in_progress = '[>]', pending = '[ ]' }

-- An ACP agent's plan in one line: how far it is, and the step under way (else the next one).
local function plan_line(entries)
  entries = type(entries) == 'table' and entries or {}
  if #entries == 0 then
    return '☰ plan: empty'
  end
  local done, current = 0, nil
  for _, e in ipairs(entries) do
    if e.status == 'completed' then
      done = done + 1
    elseif e.status == 'in_progress' and (current == nil or current.status ~= 'in_progress') then
      current = e
    elseif e.status == 'pending' and current == nil then
      current = e
    end
  end
  local line = string.format('☰ plan %d/%d done', done, #entries)
  if current then
    line = line .. ' · ' .. (PLAN_MARKS[current.status] or '[ ]') .. ' ' .. one_line(current.content, 120)
  end
  return line
end

-- A running tool call's news: its status and title, and where it works. Its output so far alone
-- is not shown (its result gives the whole).
local function tool_update_line(ev)
  if ev.status == nil and ev.title == nil and ev.locations == nil then
    return nil
  end
  local parts = { ev.status or 'running' }
  if present(ev.title) then
    parts[#parts + 1] = one_line(ev.title, 120)
  end
  if type(ev.locations) == 'table' and #ev.locations > 0 then
    local loc = ev.locations[1]
    local where = tonumber(loc.line) and (tostring(loc.path) .. ':' .. tostring(loc.line)) or tostring(loc.path)
    if #ev.locations > 1 then
      where = where .. ' (+' .. (#ev.locations - 1) .. ')'
    end
    parts[#parts + 1] = where
  end
  return '  ↳ tool ' .. tostring(ev.toolUseId):sub(1, 12) .. ': ' .. table.concat(parts, ' · ')
end

-- One line (or, for the assistant's text, the whole text) for an event; nil for events the
-- tree does not show (statuses go in the session's header instead).
function M.describe(ev)
  local kind = ev.kind
  if kind == 'prompt' then
    local who = ev.origin == 'user' and 'you' or (ev.origin or 'server')
    local text = tostring(ev.text or '')
    if ev.origin == 'fork' then
      -- A child's brief: its first line names the task; the rest lists its siblings'.
      text = vim.split(text, '\n', { plain = true })[1]
    end
    return '› ' .. who .. ': ' .. one_line(text, 100)
  elseif kind == 'text' then
    return '⏺ ' .. vim.trim(tostring(ev.text or ''))
  elseif kind == 'thinking' then
    return '✻ ' .. one_line(ev.text, 100)
  elseif kind == 'toolUse' then
    return '⚙ ' .. tostring(ev.name) .. '  ' .. tool_summary(ev.input)
  elseif kind == 'toolResult' then
    return '  ' .. (ev.isError and '✗' or '↳') .. ' ' .. one_line(ev.content, 90)
  elseif kind == 'permissionRequest' then
    local line = '? ' .. tostring(ev.toolName) .. ' asks for permission'
    if type(ev.options) == 'table' and #ev.options > 0 then
      -- An ACP agent's own answers (the prompt offers them as its actions).
      local names = {}
      for _, option in ipairs(ev.options) do
        names[#names + 1] = tostring(option.name)
      end
      line = line .. ' (' .. table.concat(names, ' / ') .. ')'
    end
    return line
  elseif kind == 'permissionDecision' then
    local line = '  ' .. (ev.allow and 'allowed' or 'denied') .. ' ' .. tostring(ev.toolName)
    return ev.optionId and (line .. ' (' .. tostring(ev.optionId) .. ')') or line
  elseif kind == 'turnResult' then
    if ev.cancelled then
      return '■ turn cancelled'
    end
    local mark = ev.isError and '✗ turn failed' or '✓ turn done'
    return string.format('%s (%.1f s, $%.4f)', mark, (tonumber(ev.durationMs) or 0) / 1000, tonumber(ev.costUsd) or 0)
  elseif kind == 'apiRetry' then
    return api_retry(ev)
  elseif kind == 'task' then
    return task_line(ev)
  elseif kind == 'error' then
    return '✗ error: ' .. one_line(ev.message, 200)
  elseif kind == 'modeChanged' then
    return '◆ mode: ' .. tostring(ev.mode)
  elseif kind == 'plan' then
    return plan_line(ev.entries)
  elseif kind == 'toolUpdate' then
    return tool_update_line(ev)
  elseif kind == 'placed' then
    return '⇢ on ' .. tostring(ev.node) .. (present(ev.cluster) and (' (' .. ev.cluster .. ' cluster)') or '')
  elseif kind == 'agentRestarted' then
    return string.format('↻ agent started again (%s of %s): %s', tostring(ev.restart), tostring(ev.maxRestarts), one_line(ev.reason, 160))
  elseif kind == 'forkProposed' then
    local cost = type(ev.estimate) == 'table' and (' · ' .. fork_cost(ev.estimate)) or ''
    return '⑂ Fork proposed  ' .. plural(#ev.tasks, 'task') .. ': ' .. table.concat(ev.tasks, '; ')
      .. cost .. '  (:CovenApprove / :CovenReject)'
  elseif kind == 'forkStarted' then
    local line = '⑂ Fork  ' .. plural(#ev.children, 'task')
    if ev.isolation == 'worktree' then
      line = line .. ' · worktrees, ' .. (ev.mergeMode == 'review' and 'changes reviewed' or 'merged when done')
    elseif ev.isolation == 'shared' then
      line = line .. ' · shared folder' .. (present(ev.isolationReason) and (': ' .. ev.isolationReason) or '')
    end
    -- Where its children run, when some are on a cluster (or would have been: why not).
    local placed, cluster = 0, nil
    for _, c in ipairs(ev.children) do
      if type(c.placement) == 'table' then
        placed, cluster = placed + 1, c.placement.cluster
      end
    end
    if placed > 0 then
      line = line .. ' · ' .. placed .. ' on the ' .. tostring(cluster) .. ' cluster'
    elseif present(ev.placementReason) then
      line = line .. ' · all here: ' .. ev.placementReason
    end
    return line
  elseif kind == 'forkReviewing' then
    local pending = type(ev.pending) == 'table' and #ev.pending or 0
    return '⑂ Fork review  changes of ' .. plural(pending, 'task')
      .. ' wait  (:CovenChanges, :CovenApply / :CovenDiscard)'
  elseif kind == 'forkFinished' then
    local ok = 0
    for _, r in ipairs(ev.results) do
      if r.ok then
        ok = ok + 1
      end
    end
    local line = string.format('⑂ Fork done  %d of %d tasks succeeded', ok, #ev.results)
    if tonumber(ev.diskBytes) then
      line = line .. ' · worktrees take ' .. M.disk_size(ev.diskBytes)
    end
    return line
  elseif kind == 'worktreeEnv' then
    local parts = {}
    if type(ev.copied) == 'table' and #ev.copied > 0 then
      table.insert(parts, 'copied ' .. table.concat(ev.copied, ', '))
    end
    table.insert(parts, 'port ' .. tostring(ev.port))
    if present(ev.setup) then
      local from = present(ev.setupFile) and (' from ' .. ev.setupFile) or ''
      table.insert(parts, 'setup' .. from .. ': ' .. one_line(ev.setup, 60))
    end
    local line = '⌂ environment  ' .. table.concat(parts, ' · ')
    for _, notice in ipairs(type(ev.notices) == 'table' and ev.notices or {}) do
      line = line .. ' ⚠ ' .. tostring(notice)
    end
    return line
  elseif kind == 'setupOutput' then
    return '  │ ' .. one_line(ev.text, 110)
  elseif kind == 'setupEnded' then
    if ev.ok then
      return string.format('✓ worktree setup done (%.1f s)', (tonumber(ev.durationMs) or 0) / 1000)
    end
    return '✗ worktree setup failed: ' .. one_line(ev.error, 160)
  elseif kind == 'forkRejected' then
    return '⑂ Fork rejected' .. (type(ev.reason) == 'string' and (': ' .. ev.reason) or '')
  elseif kind == 'forkInterrupted' then
    local unfinished = type(ev.unfinished) == 'table' and #ev.unfinished or 0
    return '⑂ Fork interrupted  ' .. unfinished .. ' unfinished: resume or abandon it'
  elseif kind == 'forkResumed' then
    return '⑂ Fork resumed  ' .. plural(type(ev.children) == 'table' and #ev.children or 0, 'task') .. ' again'
  elseif kind == 'forkError' then
    return '⑂ Fork tag refused: ' .. one_line(ev.message, 100)
  end
  return nil
end

-- 812 bytes, 40 KB, 1.8 MB, 2.1 GB
-- How the operating system holds a fork child: `fenced by claude (network: full)`, or
-- `unfenced: <why>` (as coven-ls's terminal tree says it).
function M.sandbox_note(sandbox)
  if sandbox.fenced then
    local by = present(sandbox.by) and (' by ' .. sandbox.by) or ''
    local network = present(sandbox.network) and (' (network: ' .. sandbox.network .. ')') or ''
    return 'fenced' .. by .. network
  end
  return 'unfenced' .. (present(sandbox.reason) and (': ' .. one_line(sandbox.reason, 120)) or '')
end

function M.disk_size(size)
  size = tonumber(size) or 0
  if size < 1024 then
    return string.format('%d bytes', size)
  elseif size < 1024 ^ 2 then
    return string.format('%.0f KB', size / 1024)
  elseif size < 1024 ^ 3 then
    return string.format('%.1f MB', size / 1024 ^ 2)
  end
  return string.format('%.1f GB', size / 1024 ^ 3)
end

function M.new()
  -- forks: forkId -> { state = the server's word for it (its events' `state`), head = its line }
  return { sessions = {}, roots = {}, parent_of = {}, forks = {} }
end

-- The fork an event is about, with the state the event says it is in now (as the server says
-- it: never derived here from the event's kind).
local function fork_of(tree, ev)
  local f = tree.forks[ev.forkId]
  if not f then
    f = {}
    tree.forks[ev.forkId] = f
  end
  if type(ev.state) == 'string' then
    f.state = ev.state
  end
  return f
end

local function session(tree, id)
  local s = tree.sessions[id]
  if not s then
    s = {
      id = id,
      status = '',
      items = {},
      blocks = {}, -- blockId -> the item of a block still streaming
      tools = {}, -- toolUseId -> the item of its tool call (subagent lines go under it)
      tasks = {}, -- taskId -> the item of a background task (its events update it)
      usage = nil, -- the tokens of its turns, added up
      context = nil, -- its last turn's contextUsage
    }
    tree.sessions[id] = s
    if not tree.parent_of[id] then
      table.insert(tree.roots, id)
    end
  end
  return s
end

-- Where an event (or a streamed block) of the session goes: a subagent's, under the task or the
-- tool call it belongs to; the session's own, in its list.
-- A branch (coven/branch) of `parent_id`: a session of its own, drawn at the top level with a
-- mark of its own (its events may have come before the answer that names it).
function M.mark_branch(tree, id, parent_id)
  session(tree, id).branch_of = parent_id
end

local function list_for(s, parent_tool_use_id)
  if parent_tool_use_id then
    for _, task in pairs(s.tasks) do
      if task.toolUseId == parent_tool_use_id then
        task.sub = task.sub or {}
        return task.sub
      end
    end
    local tool = s.tools[parent_tool_use_id]
    if tool then
      tool.sub = tool.sub or {}
      return tool.sub
    end
  end
  return s.items
end

local function add(list, item)
  item.list = list
  table.insert(list, item)
  return item
end

local function remove(item)
  for i, other in ipairs(item.list or {}) do
    if other == item then
      table.remove(item.list, i)
      return
    end
  end
end

-- A turn is over: the pieces of its blocks that got no whole event are dropped (the turn was cut
-- off). A subagent's blocks go on after its parent's turn, unless `all` (the CLI went).
local function drop_blocks(s, all)
  for id, item in pairs(s.blocks) do
    if all or not item.parent then
      remove(item)
      s.blocks[id] = nil
    end
  end
end

local TURN_OVER = { idle = true, failed = true, cancelled = true, closed = true, interrupted = true }
local CLI_GONE = { failed = true, cancelled = true, closed = true, interrupted = true }

-- The id of the session's own assistant message an event belongs to (what coven/branch takes as
-- `atMessageId`); nil for anything else, a subagent's messages included.
local function own_message(ev)
  local parent = ev.parentToolUseId
  if parent ~= nil and parent ~= vim.NIL then
    return nil
  end
  if (ev.kind == 'text' or ev.kind == 'thinking' or ev.kind == 'toolUse') and type(ev.messageId) == 'string' then
    return ev.messageId
  end
  return nil
end

-- Fold one event into the tree.
function M.apply(tree, ev)
  if ev.kind == 'deleted' and type(ev.sessionIds) == 'table' then
    -- coven/deleteSession: the session and its subtree leave the tree.
    local gone = {}
    for _, id in ipairs(ev.sessionIds) do
      gone[id] = true
      tree.sessions[id] = nil
      tree.parent_of[id] = nil
    end
    tree.roots = vim.tbl_filter(function(id)
      return not gone[id]
    end, tree.roots)
    return
  end
  local s = session(tree, ev.sessionId)
  local kind = ev.kind
  local fork = type(ev.forkId) == 'string' and fork_of(tree, ev) or nil
  if kind == 'status' then
    s.status = ev.status
    if ev.status ~= 'queued' then
      s.queue_position = nil
    end
    if TURN_OVER[ev.status] then
      drop_blocks(s, CLI_GONE[ev.status])
    end
    return
  end
  if kind == 'queuePosition' then
    s.queue_position = tonumber(ev.position)
    return
  end
  if kind == 'placed' then
    -- In the child's header from now on (and a line of its own, below).
    s.placement = tostring(ev.node)
  end
  if kind == 'changes' then
    -- In the child's header, updated as its changes are merged or decided.
    s.changes, s.worktree = ev.changes, ev.worktree
    return
  end
  if kind == 'prompt' and not s.title then
    s.title = one_line(ev.text, 60)
  end
  if (kind == 'text' or kind == 'thinking') and ev.blockId and s.blocks[ev.blockId] then
    -- The whole block replaces its pieces, where they were.
    local item = s.blocks[ev.blockId]
    s.blocks[ev.blockId] = nil
    item.text, item.streaming = M.describe(ev), nil
    item.message_id = own_message(ev)
    return
  end
  if kind == 'turnResult' or kind == 'error' then
    drop_blocks(s, kind == 'error')
  end
  if kind == 'turnResult' and type(ev.usage) == 'table' then
    local u = s.usage or { input = 0, output = 0 }
    u.input = u.input + (tonumber(ev.usage.inputTokens) or 0)
      + (tonumber(ev.usage.cacheReadTokens) or 0) + (tonumber(ev.usage.cacheCreationTokens) or 0)
    u.output = u.output + (tonumber(ev.usage.outputTokens) or 0)
    s.usage = u
  end
  if kind == 'turnResult' and type(ev.contextUsage) == 'table' then
    s.context = ev.contextUsage -- how full its context is: its last model request
  end
  if kind == 'forkStarted' then
    local children = {}
    for _, c in ipairs(ev.children) do
      table.insert(children, c.sessionId)
      tree.parent_of[c.sessionId] = s.id
      local child = session(tree, c.sessionId)
      child.label, child.title = c.label, one_line(c.label, 60)
      -- How the operating system holds it; children that share the parent's folder are never
      -- fenced (their fork's line says they share it), so only worktree children say so.
      if type(c.sandbox) == 'table' and ev.isolation == 'worktree' then
        child.sandbox = c.sandbox
      end
      -- A child placed on a cluster: which, until its `placed` event names the node.
      if type(c.placement) == 'table' then
        child.placement = c.placement.cluster .. ' cluster'
      end
    end
    local item = add(s.items, { text = M.describe(ev), children = children, fork = ev.forkId })
    if fork then
      fork.head = item -- its line says the fork's state from now on
    end
    return
  end
  if kind == 'task' then
    -- One line per task, updated by its later events (which may leave out its description).
    local item = s.tasks[ev.taskId]
    if not item then
      item = add(list_for(s, ev.toolUseId), { taskId = ev.taskId })
      s.tasks[ev.taskId] = item
    end
    for key, value in pairs(ev) do
      if value ~= nil and value ~= vim.NIL then
        item[key] = value
      end
    end
    item.text = task_line(item)
    return
  end
  local list = list_for(s, ev.parentToolUseId)
  if kind == 'apiRetry' and list[#list] and list[#list].retry then
    list[#list].text = M.describe(ev) -- the latest retry replaces the one before
    return
  end
  local line = M.describe(ev)
  if kind == 'forkFinished' and line then
    -- What became of each worktree child's changes, under the fork's last line.
    local item = add(list, { text = line, sub = {} })
    for _, result in ipairs(ev.results) do
      local child = tree.sessions[result.sessionId]
      local merged = M.merge_line(result, child and child.changes or nil)
      if merged then
        add(item.sub, { text = merged })
      end
    end
    return
  end
  if line then
    local item = add(list, { text = line, retry = kind == 'apiRetry' or nil, message_id = own_message(ev) })
    if kind == 'forkProposed' and fork and not fork.head then
      item.fork, fork.head = ev.forkId, item -- until it starts: its line then says the state
    end
    if kind == 'toolUse' and ev.toolUseId then
      s.tools[ev.toolUseId] = item
    end
  end
end

-- Fold one `coven/delta` into the tree: its block's line grows.
function M.apply_delta(tree, d)
  if type(d) ~= 'table' or not d.sessionId or not d.blockId then
    return
  end
  local s = session(tree, d.sessionId)
  local item = s.blocks[d.blockId]
  if not item then
    local parent = d.parentToolUseId ~= vim.NIL and d.parentToolUseId or nil
    item = add(list_for(s, parent), { raw = '', kind = d.kind, parent = parent, streaming = true })
    s.blocks[d.blockId] = item
  end
  item.raw = item.raw .. tostring(d.text or '')
  item.text = M.describe({ kind = item.kind, text = item.raw })
end

-- The tree as buffer lines, and what each line shows: `{ session = id, message = id or nil }`
-- (a session's own assistant message: where :CovenBranch under the cursor branches).
function M.render(tree)
  local lines, meta = {}, {}
  local where = {} -- the session and message of the lines being added
  local function add(prefix, text)
    -- Multi-line text (the assistant's answers) keeps its lines, indented under the first.
    local first = true
    for piece in (text .. '\n'):gmatch('(.-)\n') do
      table.insert(lines, (first and prefix or (prefix .. '  ')) .. piece)
      meta[#lines] = where
      first = false
    end
  end
  local node
  local function items(list, prefix, depth, sid)
    for _, item in ipairs(list) do
      where = { session = sid, message = item.message_id }
      local fork = item.fork and tree.forks[item.fork]
      if item.text and fork and fork.head == item and fork.state then
        add(prefix, item.text .. '  [' .. fork.state .. ']') -- the fork's state now
      elseif item.text then
        add(prefix, item.text)
      end
      -- A tool call's subagent lines sit under it, a task's under its line.
      items(item.sub or {}, prefix .. '  ', depth, sid)
      for _, child in ipairs(item.children or {}) do
        node(child, depth + 1)
      end
    end
  end
  node = function(id, depth)
    local s = tree.sessions[id]
    local pad = string.rep('  ', 2 * depth)
    local mark = s.label and '⑂ ' or s.branch_of and '⎇ ' or '● '
    local header = pad .. mark .. (s.title or s.id)
    if s.branch_of then
      header = header .. '  (branch of ' .. (tree.sessions[s.branch_of] and tree.sessions[s.branch_of].title or s.branch_of) .. ')'
    end
    if s.status ~= '' then
      header = header .. '  ' .. (M.STATUS_MARKS[s.status] or '·') .. ' ' .. s.status
      if s.status == 'queued' and s.queue_position then
        header = header .. ' (' .. (s.queue_position <= 1 and 'next' or (ordinal(s.queue_position) .. ' in line')) .. ')'
      end
    end
    if type(s.changes) == 'table' then
      local files = type(s.changes.files) == 'table' and #s.changes.files or 0
      header = header .. '  ± ' .. (files > 0 and (change_counts(s.changes) .. ' · ') or '')
        .. tostring(s.changes.merge)
    end
    if s.sandbox then
      header = header .. '  · ' .. M.sandbox_note(s.sandbox)
    end
    if s.placement then
      header = header .. '  · on ' .. s.placement
    end
    if s.usage then
      header = header .. '  · ' .. compact(s.usage.input) .. ' in · ' .. compact(s.usage.output) .. ' out'
    end
    if s.context then
      header = header .. '  · context ' .. context_gauge(s.context.tokens, s.context.window, s.context.model)
    end
    table.insert(lines, header)
    meta[#lines] = { session = id }
    items(s.items, pad .. '  ', depth, id)
  end
  for i, id in ipairs(tree.roots) do
    if i > 1 then
      table.insert(lines, '')
    end
    node(id, 0)
  end
  return lines, meta
end

return M
