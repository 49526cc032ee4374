-- coven.nvim: coding-agent sessions (Claude Code, Codex) in Neovim through coven-ls, with Neovim's own LSP client.
--
--   require('coven').setup{ cmd = { 'coven-ls' }, init_options = { forkMode = 'approve' } }
--   :CovenStart Count the files in src/
--   :CovenBranch Try it with a generator   (a branch of the current session, which it becomes;
--                                           in the tree window: at the message under the cursor)
--
-- Works on Neovim 0.7 and later: only APIs that 0.7 has are used, and the two that newer
-- releases renamed (starting a client, calling its methods) go through `compat` below.
--
-- The plugin declares `experimental.coven.forks`: proposed forks show in the tree and wait for
-- :CovenApprove / :CovenReject. It declares `review` too: a fork in merge mode `review` waits
-- for :CovenApply / :CovenDiscard per child (:CovenChanges lists a child's files in the
-- quickfix list, :CovenDiff shows one). It does not declare `permissions`, so a tool that needs
-- permission is asked about with the standard window/showMessageRequest, which Neovim answers
-- with its own prompt (an ACP agent's question: the agent's options as its actions).

local tree = require('coven.tree')

local M = {}

-- The coven/* protocol version this plugin was written for (protocol.md, Protocol version).
M.PROTOCOL_VERSION = 2

local defaults = {
  cmd = { 'coven-ls' }, -- how to start the server
  cmd_env = nil, -- extra environment for the server (it passes its own on to `claude`)
  tcp = nil, -- 'host:port' of a running `coven-ls --tcp` to connect to instead of `cmd`
  token_file = nil, -- with `tcp`: the file holding its token (default: the one it generated)
  init_options = {}, -- coven-ls initializationOptions (model, forkMode, permissionMode, ...)
  -- a shell command run in each fork child's new worktree before it starts ('auto': the
  -- repository's .cursor/worktrees.json, conductor.json or .codex/environments/environment.toml
  -- setup, once allowed; '': none)
  worktree_setup = nil,
  -- what fork children may spend: { child_tokens = 200000, child_cost_usd = 1, child_seconds =
  -- 600, fork_cost_usd = 5 }, any of them (0: no limit); a child that reaches one is stopped
  fork_limits = nil,
  root_dir = nil, -- the sessions' default working directory (default: Neovim's cwd)
  open_tree = true, -- open the tree window when a session starts
  tree_width = 60,
  diff_key = 'D', -- in the quickfix window of :CovenChanges: open the entry's diff
}

local state = {
  opts = nil,
  client_id = nil,
  ready = false, -- the server answered `initialize`: requests may go out
  protocol_version = nil, -- what its `initialize` result said it speaks
  agents = nil, -- the agents it offers ({ name, kind, fork, cost } each), from the same answer
  waiting = {}, -- what to do once it has
  tree = tree.new(),
  current = nil, -- the session :CovenSend / :CovenFork / :CovenCancel act on
  proposals = {}, -- forks waiting for approval, oldest first: { forkId, sessionId }
  pending = {}, -- children whose changes wait for :CovenApply / :CovenDiscard, in task order
  changed = {}, -- worktree children that have ended, latest last (the default of :CovenChanges)
  buf = nil,
  line_meta = {}, -- the tree buffer's lines: the session and message each shows (tree.render)
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
  -- A fork waits for approval while its events say it is `proposed` (the server's word).
  if ev.forkId and ev.state == 'proposed' then
    table.insert(state.proposals, { forkId = ev.forkId, sessionId = ev.sessionId })
  elseif ev.forkId and ev.state then
    for i, p in ipairs(state.proposals) do
      if p.forkId == ev.forkId then
        table.remove(state.proposals, i)
        break
      end
    end
  end
  if ev.kind == 'forkReviewing' then
    for _, sid in ipairs(ev.pending or {}) do
      if not vim.tbl_contains(state.pending, sid) then
        table.insert(state.pending, sid)
      end
    end
  elseif ev.kind == 'deleted' and type(ev.sessionIds) == 'table' then
    local function kept(sid)
      return not vim.tbl_contains(ev.sessionIds, sid)
    end
    state.pending = vim.tbl_filter(kept, state.pending)
    state.changed = vim.tbl_filter(kept, state.changed)
  elseif ev.kind == 'changes' and type(ev.changes) == 'table' then
    if ev.changes.merge ~= 'pending' then
      state.pending = vim.tbl_filter(function(sid)
        return sid ~= ev.sessionId
      end, state.pending)
    end
    state.changed = vim.tbl_filter(function(sid)
      return sid ~= ev.sessionId
    end, state.changed)
    table.insert(state.changed, ev.sessionId)
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
  caps.experimental.coven = { forks = true, review = true }
  return caps
end

-- Where a `coven-ls --tcp` server that generated its token wrote it (the server's own rule).
local function default_token_file(port)
  local runtime = os.getenv('XDG_RUNTIME_DIR')
  local folder = runtime and runtime ~= '' and runtime .. '/coven-ls'
  if not folder then
    local state_home = os.getenv('XDG_STATE_HOME')
    if not state_home or state_home == '' then
      state_home = vim.fn.expand('~') .. '/.local/state'
    end
    folder = state_home .. '/coven-ls'
  end
  return folder .. '/tcp-' .. port .. '.token'
end

-- The `cmd` and `init_options` that connect to a running `coven-ls --tcp` with its token; nil
-- and a message when that cannot be done.
local function tcp_connection(opts)
  local host, port = tostring(opts.tcp):match('^%[?(.-)%]?:(%d+)$')
  if not port then
    return nil, nil, "tcp must be 'host:port', e.g. '127.0.0.1:7000', not " .. vim.inspect(opts.tcp)
  end
  if host == '' then
    host = '127.0.0.1'
  end
  if not (vim.lsp.rpc and vim.lsp.rpc.connect) then
    return nil, nil, 'connecting to a coven-ls --tcp server needs Neovim 0.8 or later'
  end
  local path = opts.token_file and vim.fn.expand(opts.token_file) or default_token_file(port)
  local file = io.open(path, 'r')
  local token = file and vim.trim(file:read('*a') or '')
  if file then
    file:close()
  end
  if not token or token == '' then
    return nil, nil, 'cannot read the coven-ls token from ' .. path
      .. ' (set token_file to the file the server was started with, or the one it printed)'
  end
  local init_options = vim.tbl_extend('force', opts.init_options or {}, { token = token })
  return vim.lsp.rpc.connect(host, tonumber(port)), init_options
end

-- The `fork_limits` option as initializationOptions.forkLimits, or nil and what is wrong with it.
local LIMIT_NAMES = {
  child_tokens = 'childTokens',
  child_cost_usd = 'childCostUsd',
  child_seconds = 'childSeconds',
  fork_cost_usd = 'forkCostUsd',
}
local function fork_limits(given)
  if type(given) ~= 'table' then
    return nil, 'fork_limits must be a table, e.g. { child_tokens = 200000, fork_cost_usd = 5 }'
  end
  local limits = {}
  for key, value in pairs(given) do
    local name = LIMIT_NAMES[key]
    if not name then
      return nil, ('fork_limits.%s is not a limit; use child_tokens, child_cost_usd, child_seconds or fork_cost_usd'):format(tostring(key))
    end
    if type(value) ~= 'number' or value < 0 or value ~= value or value == math.huge then
      return nil, ('fork_limits.%s must be a number, 0 (no limit) or more (got %s)'):format(key, vim.inspect(value))
    end
    if name == 'childTokens' and value % 1 ~= 0 then
      return nil, ('fork_limits.child_tokens must be a whole number (got %s)'):format(value)
    end
    limits[name] = value
  end
  return limits
end

local function start_server()
  if state.client_id and vim.lsp.get_client_by_id(state.client_id) then
    return true
  end
  local opts = state.opts
  state.ready, state.waiting = false, {}
  local cmd, init_options = opts.cmd, opts.init_options
  if opts.tcp then
    local problem
    cmd, init_options, problem = tcp_connection(opts)
    if not cmd then
      notify(problem, vim.log.levels.ERROR)
      return false
    end
  end
  if opts.worktree_setup ~= nil then
    init_options = vim.tbl_extend('force', init_options or {}, { worktreeSetup = opts.worktree_setup })
  end
  if opts.fork_limits ~= nil then
    local limits, problem = fork_limits(opts.fork_limits)
    if not limits then
      notify(problem, vim.log.levels.ERROR)
      return false
    end
    init_options = vim.tbl_extend('force', init_options or {}, { forkLimits = limits })
  end
  local id = compat.start_client({
    name = 'coven-ls',
    cmd = cmd,
    cmd_env = opts.cmd_env,
    root_dir = opts.root_dir or vim.fn.getcwd(),
    init_options = init_options,
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
      -- The coven/* protocol the server speaks (initialize's experimental.coven.protocolVersion).
      local caps = client.server_capabilities or {}
      local coven = type(caps.experimental) == 'table' and caps.experimental.coven or nil
      state.protocol_version = type(coven) == 'table' and coven.protocolVersion or nil
      state.agents = M.offers_of(coven)
      if state.protocol_version ~= M.PROTOCOL_VERSION then
        vim.schedule(function()
          notify(string.format('coven-ls speaks protocol version %s; this plugin was written for %d',
            tostring(state.protocol_version), M.PROTOCOL_VERSION), vim.log.levels.WARN)
        end)
      end
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
    notify('could not start ' .. (opts.tcp and 'a connection to ' .. opts.tcp
      or table.concat(opts.cmd, ' ')), vim.log.levels.ERROR)
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
  local lines, meta = tree.render(state.tree)
  state.line_meta = meta
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

-- The agents in initialize's `experimental.coven.agents`: a list of { name, kind, fork, cost }
-- (protocol version 2), or of names (version 1); nil when the server does not say.
function M.offers_of(coven)
  local agents = type(coven) == 'table' and coven.agents or nil
  if type(agents) ~= 'table' then
    return nil
  end
  local offers = {}
  for _, entry in ipairs(agents) do
    if type(entry) == 'string' then
      table.insert(offers, { name = entry, kind = (entry == 'claude' or entry == 'codex') and entry or nil })
    elseif type(entry) == 'table' and type(entry.name) == 'string' then
      -- JSON null arrives as vim.NIL: only strings and booleans are kept.
      local function str(v) return type(v) == 'string' and v or nil end
      local offer = { name = entry.name, kind = str(entry.kind), fork = str(entry.fork) }
      if type(entry.cost) == 'boolean' then
        offer.cost = entry.cost
      end
      table.insert(offers, offer)
    end
  end
  return offers
end

-- The agents the server offers (nil before it answered `initialize`, or when it does not say).
function M.agents()
  return state.agents
end

-- An agent as listed: its name, and what sets it apart.
local function offer_line(offer)
  local hints = {}
  if offer.kind == 'acp' then table.insert(hints, 'ACP') end
  if offer.fork == 'transcript' then table.insert(hints, 'no fork: transcript children') end
  if offer.cost == false then table.insert(hints, 'reports no cost') end
  return #hints > 0 and (offer.name .. ' (' .. table.concat(hints, ', ') .. ')') or offer.name
end

-- Why `name` cannot run a session on this server (its agents listed), or nil when it can or
-- the server has not said which it offers (then the server itself answers for the name).
local function unknown_agent(name)
  if not state.agents then
    return nil
  end
  local lines = {}
  for _, offer in ipairs(state.agents) do
    if offer.name == name then
      return nil
    end
    table.insert(lines, offer_line(offer))
  end
  return "unknown agent '" .. name .. "': this server offers " .. (#lines > 0 and table.concat(lines, ', ') or 'none')
    .. ' (an agent that speaks ACP is added in init_options.agents; see docs/agents.md)'
end

-- :CovenStart's completion: `++agent=` and the server's agents. Before the server has answered
-- `initialize` there are none yet: it is started, and a Tab once it has completes them (waiting
-- here would not help: its answer is handled only after the completion returns).
function M.complete_start(arglead)
  if not arglead:match('^%+') then
    return {}
  end
  if not state.ready and state.opts then
    start_server()
  end
  local found = {}
  for _, offer in ipairs(state.agents or {}) do
    local option = '++agent=' .. offer.name
    if option:sub(1, #arglead) == arglead then
      table.insert(found, option)
    end
  end
  return found
end

-- `:CovenStart ++agent=codex {prompt}`: the options before the prompt, as Vim's own `++opt`.
local function start_options(args)
  local params = {}
  local rest = args or ''
  while true do
    local name, value, after = rest:match('^%s*%+%+(%w+)=(%S+)%s*(.*)$')
    if not name then
      break
    end
    params[name] = value
    rest = after
  end
  return rest, params
end

function M.start_session(prompt, params)
  local options
  prompt, options = start_options(prompt)
  if vim.trim(prompt or '') == '' then
    notify('usage: :CovenStart [++agent=NAME] {prompt}', vim.log.levels.WARN)
    return
  end
  for name in pairs(options) do
    if name ~= 'agent' then
      notify('unknown option ++' .. name .. ' (:CovenStart takes ++agent=NAME: Tab completes the names)', vim.log.levels.WARN)
      return
    end
  end
  local problem = options.agent and unknown_agent(options.agent)
  if problem then
    notify(problem, vim.log.levels.ERROR)
    return
  end
  local p = vim.tbl_extend('force', params or {}, options, { prompt = prompt })
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

-- Branch the current session (coven/branch): a new session of its own holding the conversation
-- so far (or up to `at_message_id`, an assistant message's id), in the same folder; it becomes
-- the current session, and `prompt`, if given, is its first message. The session branched goes
-- on as it was and never hears of the branch. `on_branched(id)`, if given, runs once it exists;
-- `session_id`, if given, is the session to branch instead of the current one.
function M.branch(prompt, at_message_id, on_branched, session_id)
  local sid = session_id or current_session()
  if not sid then
    return
  end
  local params = { sessionId = sid }
  if prompt and vim.trim(prompt) ~= '' then
    params.prompt = vim.trim(prompt)
  end
  if at_message_id then
    params.atMessageId = at_message_id
  end
  request('coven/branch', params, function(result)
    tree.mark_branch(state.tree, result.sessionId, sid)
    state.current = result.sessionId
    M.schedule_render()
    notify('branched into ' .. result.sessionId .. ', now the current session')
    if on_branched then
      on_branched(result.sessionId)
    end
  end)
end

-- The session and assistant message of the tree buffer's line under the cursor, when the
-- cursor is in the tree window (nil otherwise, or on a line that shows no such message).
function M.message_at_cursor()
  if not (state.buf and vim.api.nvim_get_current_buf() == state.buf) then
    return nil
  end
  local row = vim.api.nvim_win_get_cursor(0)[1]
  local at = state.line_meta[row]
  if at and at.message then
    return at.session, at.message
  end
  return nil
end

-- `:CovenBranch [++at=MESSAGE_ID] [prompt]`: at that message of the current session; without
-- `++at`, in the tree window, at the message under the cursor (of the session it belongs to);
-- otherwise at the end of the current session's conversation.
function M.branch_command(args)
  local prompt, options = start_options(args)
  for name in pairs(options) do
    if name ~= 'at' then
      notify('unknown option ++' .. name .. ' (:CovenBranch takes ++at=MESSAGE_ID)', vim.log.levels.WARN)
      return
    end
  end
  if options.at then
    M.branch(prompt, options.at)
    return
  end
  local sid, message = M.message_at_cursor()
  M.branch(prompt, message, nil, sid)
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

-- --- a worktree child's changes -----------------------------------------------------------------

-- A child named by :CovenChanges & co.: its session id, or its task label.
local function child_named(name)
  name = vim.trim(name or '')
  if name == '' then
    return nil
  end
  if state.tree.sessions[name] then
    return name
  end
  for id, s in pairs(state.tree.sessions) do
    if s.label == name then
      return id
    end
  end
  return name -- unknown here (another client's session?): the server says whether it exists
end

-- The quickfix list of :CovenChanges, when it is the current one: { sessionId, paths }.
local function changes_list()
  local info = vim.fn.getqflist({ context = 1, idx = 0, title = 1 })
  local ctx = type(info.context) == 'table' and info.context.coven or nil
  if type(ctx) == 'table' and ctx.sessionId then
    return ctx, info.idx
  end
  return nil, nil
end

local function label_of(sid)
  local s = state.tree.sessions[sid]
  return s and (s.label or s.title) or sid
end

-- Fill the quickfix list with a child's changed files (default: the first child waiting for
-- review, else the child that ended last); each entry is the file in the parent's repository.
function M.changes(name)
  local sid = child_named(name) or state.pending[1] or state.changed[#state.changed]
  if not sid then
    notify('no fork child has changes yet', vim.log.levels.WARN)
    return
  end
  request('coven/getChanges', { sessionId = sid }, function(result)
    local changes, repo = result.changes, result.worktree.repository
    local items, paths = {}, {}
    for _, f in ipairs(changes.files or {}) do
      local counts = f.binary and 'binary' or string.format('+%d −%d', f.linesAdded or 0, f.linesRemoved or 0)
      local renamed = type(f.oldPath) == 'string' and (' from ' .. f.oldPath) or ''
      table.insert(items, {
        filename = repo .. '/' .. f.path,
        lnum = 1,
        text = counts .. ' ' .. tostring(f.status) .. renamed,
      })
      table.insert(paths, f.path)
    end
    local title = string.format("coven: '%s' %s · %s", label_of(sid), tree.change_counts(changes), changes.merge)
    vim.fn.setqflist({}, ' ', {
      title = title,
      items = items,
      context = { coven = { sessionId = sid, paths = paths } },
    })
    if #items == 0 then
      notify("'" .. label_of(sid) .. "' changed no file (" .. tostring(changes.merge) .. ')')
      return
    end
    vim.cmd('copen')
    -- The quickfix buffer is shared by every list: :CovenDiff says so when it is not this one.
    vim.api.nvim_buf_set_keymap(0, 'n', state.opts.diff_key, '<cmd>CovenDiff<CR>',
      { noremap = true, silent = true, desc = 'coven: diff of this file' })
  end)
end

local function scratch(name, text, path)
  for _, b in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_get_name(b) == name then
      vim.api.nvim_buf_delete(b, { force = true }) -- an earlier diff of the same file
    end
  end
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_name(buf, name)
  local lines = {}
  if type(text) == 'string' then
    lines = vim.split(text, '\n', { plain = true })
    if lines[#lines] == '' then
      table.remove(lines) -- the file's last newline ends its last line
    end
  end
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].bufhidden = 'wipe'
  vim.bo[buf].modifiable = false
  -- Highlighting as for the real file, where its type is known by its name.
  vim.api.nvim_buf_call(buf, function()
    pcall(vim.cmd, 'doautocmd filetypedetect BufRead ' .. vim.fn.fnameescape(path))
  end)
  return buf
end

-- A diff of one file of a child's changes, the fork's snapshot against the child's work, in a
-- new tab. `path` (as :CovenChanges lists it) defaults to the quickfix entry under the cursor
-- (or the list's current one).
function M.diff(path)
  local ctx, idx = changes_list()
  if not ctx then
    notify('the quickfix list is not a child\'s changes: run :CovenChanges first', vim.log.levels.WARN)
    return
  end
  path = vim.trim(path or '')
  if path == '' then
    local info = vim.fn.getwininfo(vim.api.nvim_get_current_win())[1]
    if info and info.quickfix == 1 and info.loclist == 0 then
      idx = vim.fn.line('.')
    end
    path = ctx.paths[idx]
    if not path then
      notify('no file at this entry', vim.log.levels.WARN)
      return
    end
  end
  local sid = ctx.sessionId
  request('coven/getChanges', { sessionId = sid, path = path }, function(result)
    local file = result.file
    if file.binary then
      notify(path .. ' is a binary file: no diff to show')
      return
    end
    local base_path = type(file.oldPath) == 'string' and file.oldPath or path
    vim.cmd('tabnew')
    local empty = vim.api.nvim_get_current_buf()
    local base = scratch('coven://' .. sid .. '/base/' .. base_path, file.base, base_path)
    vim.api.nvim_win_set_buf(0, base)
    vim.cmd('diffthis')
    vim.cmd('rightbelow vsplit')
    local child = scratch('coven://' .. sid .. '/child/' .. path, file.child, path)
    vim.api.nvim_win_set_buf(0, child)
    vim.cmd('diffthis')
    if vim.api.nvim_buf_is_valid(empty) and empty ~= base and empty ~= child then
      vim.api.nvim_buf_delete(empty, { force = true })
    end
  end)
end

-- The child :CovenApply / :CovenDiscard act on: the one named, else the one whose changes the
-- quickfix list shows if it waits, else the first that waits.
local function pending_child(name)
  local sid = child_named(name)
  if sid then
    return sid
  end
  local ctx = changes_list()
  if ctx and vim.tbl_contains(state.pending, ctx.sessionId) then
    return ctx.sessionId
  end
  if not state.pending[1] then
    notify('no fork child\'s changes wait for review', vim.log.levels.WARN)
  end
  return state.pending[1]
end

-- Apply a reviewed child's changes to the parent's working tree (all or nothing).
function M.apply(name)
  local sid = pending_child(name)
  if not sid then
    return
  end
  request('coven/applyChanges', { sessionId = sid }, function(result)
    local changes = result.changes
    if changes.merge == 'applied' then
      notify("applied '" .. label_of(sid) .. "': " .. tree.change_counts(changes))
    else
      local paths = {}
      for _, c in ipairs(changes.conflicts or {}) do
        table.insert(paths, c.path)
      end
      notify("'" .. label_of(sid) .. "' conflicts in " .. table.concat(paths, ', ')
        .. ': nothing was applied (its work stays on its branch)', vim.log.levels.WARN)
    end
  end)
end

-- Leave a reviewed child's changes out (they stay on its branch).
function M.discard(name)
  local sid = pending_child(name)
  if sid then
    request('coven/discardChanges', { sessionId = sid }, function()
      notify("discarded '" .. label_of(sid) .. "'")
    end)
  end
end

-- Work never applied to the parent's working tree (protocol.md, coven/deleteSession).
local UNAPPLIED = { pending = 'waiting for review', conflict = 'conflicted', kept = 'never applied' }

-- The session and the fork children under it whose changes were never applied, as labels.
local function unapplied_work(sid)
  local found = {}
  local function visit(id)
    local s = state.tree.sessions[id]
    if s and type(s.changes) == 'table' and UNAPPLIED[s.changes.merge] then
      table.insert(found, label_of(id) .. ' (' .. UNAPPLIED[s.changes.merge] .. ')')
    end
    for child, parent in pairs(state.tree.parent_of) do
      if parent == id then
        visit(child)
      end
    end
  end
  visit(sid)
  table.sort(found)
  return found
end

-- Delete a session (the one named, else the current one) and its fork children. A child's work
-- never applied stays on its branch unless the user says to discard it: asked first.
function M.delete(name)
  local sid = child_named(name) or state.current
  if not sid then
    notify('no session to delete: name one (:CovenDelete <label or id>)', vim.log.levels.WARN)
    return
  end
  local discard = false
  local unapplied = unapplied_work(sid)
  if #unapplied > 0 then
    local choice = vim.fn.confirm(
      'coven: ' .. #unapplied .. ' fork ' .. (#unapplied == 1 and 'child holds' or 'children hold')
        .. ' work never applied: ' .. table.concat(unapplied, ', ')
        .. '. Keep the branches (coven-ls prune --discard-work deletes them later), or discard the work?',
      '&Keep branches\n&Discard work\n&Cancel',
      1,
      'Warning'
    )
    if choice ~= 1 and choice ~= 2 then
      notify("'" .. label_of(sid) .. "' was not deleted")
      return
    end
    discard = choice == 2
  end
  local label = label_of(sid)
  request('coven/deleteSession', { sessionId = sid, discardWork = discard }, function(result)
    if state.current == sid then
      state.current = nil
    end
    local kept = {}
    for _, k in ipairs(result.keptBranches or {}) do
      table.insert(kept, k.branch .. ' (' .. k.reason .. ')')
    end
    if #kept > 0 then
      notify("deleted '" .. label .. "'; kept " .. #kept .. (#kept == 1 and ' branch' or ' branches')
        .. ' with work never applied: ' .. table.concat(kept, '; '))
    else
      notify("deleted '" .. label .. "'")
    end
  end)
end

-- Call `fn(event)` for every coven/event, after the tree has taken it in.
-- The coven/* protocol version the server announced (nil before `initialize` is answered).
function M.protocol_version()
  return state.protocol_version
end

function M.on_event(fn)
  table.insert(state.listeners, fn)
end

-- Call `fn(delta)` for every coven/delta (a piece of streamed text), after the tree has taken it in.
function M.on_delta(fn)
  table.insert(state.delta_listeners, fn)
end

-- The tree as lines (what the tree buffer shows).
function M.lines()
  return (tree.render(state.tree))
end

function M.setup(opts)
  state.opts = vim.tbl_deep_extend('force', defaults, opts or {})
  local function command(name, fn, nargs, desc, complete)
    vim.api.nvim_create_user_command(name, function(a)
      fn(a.args)
    end, { nargs = nargs, desc = desc, force = true, complete = complete })
  end
  command('CovenStart', M.start_session, '+', 'Start a session with this prompt (++agent=NAME first to pick the agent)',
    M.complete_start)
  command('CovenSend', M.send, '+', 'Send a message to the current session')
  command('CovenFork', M.fork, '+', 'Fork the current session: tasks separated by ;')
  command('CovenBranch', M.branch_command, '*',
    'Branch the current session, or at the message under the cursor in the tree, or ++at=MESSAGE_ID (optionally: its first message)')
  command('CovenApprove', M.approve, '?', 'Approve the proposed fork (optionally: new tasks; ...)')
  command('CovenReject', M.reject, '?', 'Reject the proposed fork (optionally: a reason)')
  command('CovenCancel', M.cancel, 0, "Cancel the current session's turn or fork")
  command('CovenTree', M.open_tree, 0, 'Open the session tree')
  command('CovenChanges', M.changes, '?', "A fork child's changed files in the quickfix list")
  command('CovenDiff', M.diff, '?', 'Diff of a changed file (default: the quickfix entry)')
  command('CovenApply', M.apply, '?', "Apply a reviewed fork child's changes")
  command('CovenDiscard', M.discard, '?', "Discard a reviewed fork child's changes")
  command('CovenDelete', M.delete, '?', 'Delete a session and its fork children (asks before discarding work)')
end

return M
