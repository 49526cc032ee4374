-- coven.nvim: Claude Code sessions in Neovim through coven-ls, with Neovim's own LSP client.
--
--   require('coven').setup{ cmd = { 'coven-ls' }, init_options = { forkMode = 'approve' } }
--   :CovenStart Count the files in src/
--
-- Works on Neovim 0.7 and later: only APIs that 0.7 has are used, and the two that newer
-- releases renamed (starting a client, calling its methods) go through `compat` below.
--
-- The plugin declares `experimental.coven.forks`: proposed forks show in the tree and wait for
-- :CovenApprove / :CovenReject. It does not declare `permissions`, so a tool that needs
-- permission is asked about with the standard window/showMessageRequest, which Neovim answers
-- with its own prompt.

local tree = require('coven.tree')

local M = {}

local defaults = {
  cmd = { 'coven-ls' }, -- how to start the server
  cmd_env = nil, -- extra environment for the server (it passes its own on to `claude`)
  init_options = {}, -- coven-ls initializationOptions (model, forkMode, permissionMode, ...)
  root_dir = nil, -- the sessions' default working directory (default: Neovim's cwd)
  open_tree = true, -- open the tree window when a session starts
  tree_width = 60,
}

local state = {
  opts = nil,
  client_id = nil,
  ready = false, -- the server answered `initialize`: requests may go out
  waiting = {}, -- what to do once it has
  tree = tree.new(),
  current = nil, -- the session :CovenSend / :CovenFork / :CovenCancel act on
  proposals = {}, -- forks waiting for approval, oldest first: { forkId, sessionId }
  buf = nil,
  render_pending = false,
  listeners = {},
  delta_listeners = {},
}

local function notify(message, level)
  vim.notify('coven: ' .. message, level or vim.log.levels.INFO)
end

-- --- Neovim 0.7 .. current ----------------------------------------------------------------------

local compat = {}
local has_011 = vim.fn.has('nvim-0.11') == 1

function compat.start_client(config)
  if has_011 then
    -- start_client is deprecated there; `attach = false`: the client serves no buffer.
    return vim.lsp.start(config, { attach = false })
  end
  return vim.lsp.start_client(config)
end

function compat.request(client, method, params, handler)
  if has_011 then
    return client:request(method, params, handler)
  end
  return client.request(method, params, handler)
end

-- --- the server ---------------------------------------------------------------------------------

local function on_event(ev)
  if type(ev) ~= 'table' or not ev.sessionId then
    return
  end
  tree.apply(state.tree, ev)
  if ev.kind == 'forkProposed' then
    table.insert(state.proposals, { forkId = ev.forkId, sessionId = ev.sessionId })
  elseif ev.kind == 'forkStarted' or ev.kind == 'forkRejected' then
    for i, p in ipairs(state.proposals) do
      if p.forkId == ev.forkId then
        table.remove(state.proposals, i)
        break
      end
    end
  end
  M.schedule_render()
  for _, fn in ipairs(state.listeners) do
    local ok, err = pcall(fn, ev)
    if not ok then
      notify('event listener failed: ' .. tostring(err), vim.log.levels.ERROR)
    end
  end
end

-- A piece of streamed text or thinking: the block's line grows (the redraw waits for the burst).
local function on_delta(d)
  if type(d) ~= 'table' or not d.sessionId then
    return
  end
  tree.apply_delta(state.tree, d)
  M.schedule_render()
  for _, fn in ipairs(state.delta_listeners) do
    local ok, err = pcall(fn, d)
    if not ok then
      notify('delta listener failed: ' .. tostring(err), vim.log.levels.ERROR)
    end
  end
end

local function capabilities()
  local caps = vim.lsp.protocol.make_client_capabilities()
  caps.experimental = caps.experimental or {}
  caps.experimental.coven = { forks = true }
  return caps
end

local function start_server()
  if state.client_id and vim.lsp.get_client_by_id(state.client_id) then
    return true
  end
  local opts = state.opts
  state.ready, state.waiting = false, {}
  local id = compat.start_client({
    name = 'coven-ls',
    cmd = opts.cmd,
    cmd_env = opts.cmd_env,
    root_dir = opts.root_dir or vim.fn.getcwd(),
    init_options = opts.init_options,
    capabilities = capabilities(),
    handlers = {
      ['coven/event'] = function(_, ev)
        on_event(ev)
      end,
      ['coven/delta'] = function(_, d)
        on_delta(d)
      end,
    },
    -- On :qa, give the server time to close its sessions (their `claude` processes end) rather
    -- than the default half second before it is killed.
    flags = { exit_timeout = 10000 },
    on_init = function(client)
      state.ready = true
      local waiting = state.waiting
      state.waiting = {}
      for _, fn in ipairs(waiting) do
        fn(client)
      end
    end,
    on_exit = function(code)
      state.client_id, state.ready = nil, false
      if code ~= 0 then
        vim.schedule(function()
          notify('coven-ls exited with code ' .. tostring(code), vim.log.levels.WARN)
        end)
      end
    end,
  })
  if not id then
    notify('could not start ' .. table.concat(opts.cmd, ' '), vim.log.levels.ERROR)
    return false
  end
  state.client_id = id
  return true
end

-- Send a coven/* request once the server is up; `on_result` gets the result, errors are shown.
local function request(method, params, on_result)
  if not state.opts then
    notify("call require('coven').setup{} first", vim.log.levels.ERROR)
    return
  end
  if not start_server() then
    return
  end
  local function send(client)
    compat.request(client, method, params, function(err, result)
      if err then
        notify(err.message or vim.inspect(err), vim.log.levels.ERROR)
      elseif on_result then
        on_result(result)
      end
    end)
  end
  if state.ready then
    send(vim.lsp.get_client_by_id(state.client_id))
  else
    -- No request before `initialize` has been answered: the server reads its settings there.
    table.insert(state.waiting, send)
  end
end

-- --- the tree window ----------------------------------------------------------------------------

function M.tree_buffer()
  if state.buf and vim.api.nvim_buf_is_valid(state.buf) then
    return state.buf
  end
  local buf = vim.api.nvim_create_buf(false, true) -- unlisted scratch buffer
  vim.api.nvim_buf_set_name(buf, 'coven://tree')
  vim.bo[buf].filetype = 'coven'
  vim.bo[buf].modifiable = false
  state.buf = buf
  M.render()
  return buf
end

function M.open_tree()
  local buf = M.tree_buffer()
  if vim.fn.bufwinid(buf) ~= -1 then
    return
  end
  local from = vim.api.nvim_get_current_win()
  vim.cmd('botright vsplit')
  local win = vim.api.nvim_get_current_win()
  vim.api.nvim_win_set_buf(win, buf)
  vim.api.nvim_win_set_width(win, state.opts and state.opts.tree_width or defaults.tree_width)
  vim.wo[win].wrap = false
  vim.wo[win].number = false
  vim.wo[win].relativenumber = false
  vim.api.nvim_set_current_win(from)
end

-- Draw the tree now.
function M.render()
  if not (state.buf and vim.api.nvim_buf_is_valid(state.buf)) then
    return
  end
  local lines = tree.render(state.tree)
  vim.bo[state.buf].modifiable = true
  vim.api.nvim_buf_set_lines(state.buf, 0, -1, false, lines)
  vim.bo[state.buf].modifiable = false
end

-- Draw the tree once the current burst of events is in (events come in bursts: a fork's
-- children stream at the same time).
function M.schedule_render()
  if state.render_pending then
    return
  end
  state.render_pending = true
  vim.schedule(function()
    state.render_pending = false
    M.render()
  end)
end

-- --- actions ------------------------------------------------------------------------------------

local function split_tasks(text)
  local tasks = {}
  for part in (text or ''):gmatch('[^;]+') do
    local task = vim.trim(part)
    if task ~= '' then
      table.insert(tasks, task)
    end
  end
  return tasks
end

local function current_session()
  if not state.current then
    notify('no session yet: start one with :CovenStart {prompt}', vim.log.levels.WARN)
  end
  return state.current
end

function M.start_session(prompt, params)
  if vim.trim(prompt or '') == '' then
    notify('usage: :CovenStart {prompt}', vim.log.levels.WARN)
    return
  end
  local p = vim.tbl_extend('force', params or {}, { prompt = prompt })
  if state.opts.open_tree then
    M.open_tree()
  else
    M.tree_buffer()
  end
  request('coven/startSession', p, function(result)
    state.current = result.sessionId
  end)
end

function M.send(text)
  local sid = current_session()
  if sid then
    request('coven/sendMessage', { sessionId = sid, text = text }, function(result)
      if result.queued then
        notify('queued behind ' .. result.position .. ' turn(s)')
      end
    end)
  end
end

function M.fork(spec)
  local sid = current_session()
  if sid then
    request('coven/fork', { sessionId = sid, tasks = split_tasks(spec) })
  end
end

local function pending_proposal()
  local p = state.proposals[#state.proposals]
  if not p then
    notify('no fork is waiting for approval', vim.log.levels.WARN)
  end
  return p
end

-- Approve the latest proposed fork; `spec` ("task one; task two"), if given, replaces its tasks.
function M.approve(spec)
  local p = pending_proposal()
  if p then
    local params = { forkId = p.forkId, approve = true }
    local tasks = split_tasks(spec)
    if #tasks > 0 then
      params.tasks = tasks
    end
    request('coven/decideFork', params)
  end
end

function M.reject(reason)
  local p = pending_proposal()
  if p then
    local params = { forkId = p.forkId, approve = false }
    if reason and vim.trim(reason) ~= '' then
      params.reason = reason
    end
    request('coven/decideFork', params)
  end
end

-- Cancel what the current session is doing: its turn, or its whole fork (see protocol.md).
function M.cancel()
  local sid = current_session()
  if sid then
    request('coven/cancel', { sessionId = sid })
  end
end

-- Call `fn(event)` for every coven/event, after the tree has taken it in.
function M.on_event(fn)
  table.insert(state.listeners, fn)
end

-- Call `fn(delta)` for every coven/delta (a piece of streamed text), after the tree has taken it in.
function M.on_delta(fn)
  table.insert(state.delta_listeners, fn)
end

-- The tree as lines (what the tree buffer shows).
function M.lines()
  return tree.render(state.tree)
end

function M.setup(opts)
  state.opts = vim.tbl_deep_extend('force', defaults, opts or {})
  local function command(name, fn, nargs, desc)
    vim.api.nvim_create_user_command(name, function(a)
      fn(a.args)
    end, { nargs = nargs, desc = desc, force = true })
  end
  command('CovenStart', M.start_session, '+', 'Start a Claude Code session with this prompt')
  command('CovenSend', M.send, '+', 'Send a message to the current session')
  command('CovenFork', M.fork, '+', 'Fork the current session: tasks separated by ;')
  command('CovenApprove', M.approve, '?', 'Approve the proposed fork (optionally: new tasks; ...)')
  command('CovenReject', M.reject, '?', 'Reject the proposed fork (optionally: a reason)')
  command('CovenCancel', M.cancel, 0, "Cancel the current session's turn or fork")
  command('CovenTree', M.open_tree, 0, 'Open the session tree')
end

return M
