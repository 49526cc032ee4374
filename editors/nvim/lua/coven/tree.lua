-- The session tree: `coven/event`s folded into sessions, and sessions drawn as buffer lines.
-- Nothing here talks to the server or touches a buffer, so the drawing can be checked alone.
--
-- A session's lines sit under its header; a fork's children are drawn right under the parent's
-- "⑂ Fork" line, one level deeper, each with its own header:
--
--   ● Plan the release  ✓ idle
--     › you: Plan the release
--     ⏺ I will split this.
--     ⑂ Fork  2 tasks
--       ⑂ Write the docs  ✓ idle
--         ⏺ Docs are written.
--       ⑂ Fix the bugs  ✓ idle
--         ⏺ Bugs are fixed.
--     ⑂ Fork done  2 of 2 tasks succeeded
--     ⏺ Both parts are done.

local M = {}

M.STATUS_MARKS = {
  queued = '·',
  starting = '…',
  running = '▶',
  idle = '✓',
  awaitingApproval = '?',
  forking = '⑂',
  failed = '✗',
  cancelled = '■',
  closed = '◼',
  interrupted = '!',
}

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
    return '? ' .. tostring(ev.toolName) .. ' asks for permission'
  elseif kind == 'permissionDecision' then
    return '  ' .. (ev.allow and 'allowed' or 'denied') .. ' ' .. tostring(ev.toolName)
  elseif kind == 'turnResult' then
    if ev.cancelled then
      return '■ turn cancelled'
    end
    local mark = ev.isError and '✗ turn failed' or '✓ turn done'
    return string.format('%s (%.1f s, $%.4f)', mark, (tonumber(ev.durationMs) or 0) / 1000, tonumber(ev.costUsd) or 0)
  elseif kind == 'error' then
    return '✗ error: ' .. one_line(ev.message, 200)
  elseif kind == 'forkProposed' then
    return '⑂ Fork proposed  ' .. plural(#ev.tasks, 'task') .. ': ' .. table.concat(ev.tasks, '; ')
      .. '  (:CovenApprove / :CovenReject)'
  elseif kind == 'forkStarted' then
    return '⑂ Fork  ' .. plural(#ev.children, 'task')
  elseif kind == 'forkFinished' then
    local ok = 0
    for _, r in ipairs(ev.results) do
      if r.ok then
        ok = ok + 1
      end
    end
    return string.format('⑂ Fork done  %d of %d tasks succeeded', ok, #ev.results)
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

function M.new()
  return { sessions = {}, roots = {}, parent_of = {} }
end

local function session(tree, id)
  local s = tree.sessions[id]
  if not s then
    s = { id = id, status = '', items = {} }
    tree.sessions[id] = s
    if not tree.parent_of[id] then
      table.insert(tree.roots, id)
    end
  end
  return s
end

-- Fold one event into the tree.
function M.apply(tree, ev)
  local s = session(tree, ev.sessionId)
  if ev.kind == 'status' then
    s.status = ev.status
    return
  end
  if ev.kind == 'prompt' and not s.title then
    s.title = one_line(ev.text, 60)
  end
  if ev.kind == 'forkStarted' then
    local children = {}
    for _, c in ipairs(ev.children) do
      table.insert(children, c.sessionId)
      tree.parent_of[c.sessionId] = s.id
      local child = session(tree, c.sessionId)
      child.label, child.title = c.label, one_line(c.label, 60)
    end
    table.insert(s.items, { text = M.describe(ev), children = children })
    return
  end
  local line = M.describe(ev)
  if line then
    table.insert(s.items, { text = line })
  end
end

-- The tree as buffer lines.
function M.render(tree)
  local lines = {}
  local function add(prefix, text)
    -- Multi-line text (the assistant's answers) keeps its lines, indented under the first.
    local first = true
    for piece in (text .. '\n'):gmatch('(.-)\n') do
      table.insert(lines, (first and prefix or (prefix .. '  ')) .. piece)
      first = false
    end
  end
  local function node(id, depth)
    local s = tree.sessions[id]
    local pad = string.rep('  ', 2 * depth)
    local mark = s.label and '⑂ ' or '● '
    local status = s.status ~= '' and ('  ' .. (M.STATUS_MARKS[s.status] or '·') .. ' ' .. s.status) or ''
    table.insert(lines, pad .. mark .. (s.title or s.id) .. status)
    for _, item in ipairs(s.items) do
      add(pad .. '  ', item.text)
      for _, child in ipairs(item.children or {}) do
        node(child, depth + 1)
      end
    end
  end
  for i, id in ipairs(tree.roots) do
    if i > 1 then
      table.insert(lines, '')
    end
    node(id, 0)
  end
  return lines
end

return M
