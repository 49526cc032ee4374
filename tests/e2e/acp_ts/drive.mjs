// An ACP editor that no one here wrote: the official TypeScript SDK's client app
// (@agentclientprotocol/sdk, `client()` + `connectWith`, ACP v1 over newline-delimited JSON on
// the agent's stdio). It starts the agent given after `--`, runs the steps below against it and
// prints one JSON object of everything it saw; tests/e2e/test_acp_ts_e2e.py sets the scripted model
// up and judges the result. Steps:
//   1. a prompt whose answer streams in pieces;
//   2. a prompt the model answers with a fork, approved through session/request_permission,
//      shown as a plan and a "Fork: N tasks" tool call, answered after the results turn;
//   3. session/list (the fork's children, with their parent in _meta) and session/load of a child;
//   4. a second fork, cancelled (session/cancel) once its children are all running;
//   then the agent's stdin is closed (the connection ends) and the driver waits for it to exit.
//
// Usage: node drive.mjs WORKSPACE -- COMMAND [ARGS...]

import { spawn } from 'node:child_process';
import { Readable, Writable } from 'node:stream';

import { client, methods, ndJsonStream, PROTOCOL_VERSION } from '@agentclientprotocol/sdk';

const [workspace, dashes, command, ...args] = process.argv.slice(2);
if (workspace === undefined || dashes !== '--' || command === undefined) {
  console.error('usage: node drive.mjs WORKSPACE -- COMMAND [ARGS...]');
  process.exit(2);
}
const STEP_MS = 90_000;

const agentProcess = spawn(command, args, { cwd: workspace, stdio: ['pipe', 'pipe', 'inherit'] });
const exited = new Promise((resolve) => agentProcess.on('exit', (code, signal) => resolve({ code, signal })));
const stream = ndJsonStream(Writable.toWeb(agentProcess.stdin), Readable.toWeb(agentProcess.stdout));

const seen = { updates: [], permissions: [], steps: {} };
let changed = () => undefined;

/** Resolves once `check()` holds, re-checked at every update; rejects after STEP_MS. */
function until(check, what) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), STEP_MS);
    const test = () => {
      if (!check()) return;
      clearTimeout(timer);
      changed = () => undefined;
      resolve();
    };
    changed = test;
    test();
  });
}

const updatesOf = (sessionId, kind) =>
  seen.updates.filter((u) => u.sessionId === sessionId && u.update.sessionUpdate === kind).map((u) => u.update);

const app = client({ name: 'acp-ts-driver' })
  .onNotification(methods.client.session.update, ({ params }) => {
    seen.updates.push({ sessionId: params.sessionId, update: params.update });
    changed();
  })
  .onRequest(methods.client.session.requestPermission, ({ params }) => {
    seen.permissions.push({
      sessionId: params.sessionId,
      toolCall: params.toolCall,
      options: params.options.map((o) => ({ optionId: o.optionId, kind: o.kind })),
    });
    const allow = params.options.find((o) => o.kind === 'allow_once');
    return { outcome: { outcome: 'selected', optionId: allow.optionId } };
  });

let failure;
try {
  await app.connectWith(stream, async (agent) => {
    const init = await agent.request(methods.agent.initialize, {
      protocolVersion: PROTOCOL_VERSION,
      clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
      clientInfo: { name: 'acp-ts-driver', version: '1.0.0' },
    });
    seen.initialize = init;
    const { sessionId } = await agent.request(methods.agent.session.new, { cwd: workspace, mcpServers: [] });
    seen.sessionId = sessionId;
    const prompt = (text) =>
      agent.request(methods.agent.session.prompt, { sessionId, prompt: [{ type: 'text', text }] });

    seen.steps.stream = await prompt('Hello');
    seen.steps.fork = await prompt('Plan the release');

    seen.steps.list = await agent.request(methods.agent.session.list, { cwd: workspace });
    const children = seen.steps.list.sessions.filter((s) => s._meta?.coven?.parentId === sessionId);
    seen.steps.loadedChild = children[0]?.sessionId;
    if (seen.steps.loadedChild !== undefined) {
      await agent.request(methods.agent.session.load, {
        sessionId: seen.steps.loadedChild,
        cwd: workspace,
        mcpServers: [],
      });
    }

    const plansBefore = updatesOf(sessionId, 'plan').length;
    const cancelled = prompt('Plan a slow one');
    await until(() => {
      const plans = updatesOf(sessionId, 'plan').slice(plansBefore);
      return plans.length > 0 && plans.at(-1).entries.every((e) => e.status === 'in_progress');
    }, "the slow fork's children to run");
    await agent.notify(methods.agent.session.cancel, { sessionId });
    seen.steps.cancel = await cancelled;
  });
} catch (error) {
  failure = error instanceof Error ? error.stack ?? error.message : String(error);
}
// The connection is over: the agent's stdin closes, and that alone must end it.
agentProcess.stdin.end();
const timer = setTimeout(() => agentProcess.kill('SIGKILL'), 30_000);
seen.exit = await exited;
clearTimeout(timer);
if (failure !== undefined) seen.failure = failure;
process.stdout.write(`${JSON.stringify(seen)}\n`);
process.exit(failure === undefined ? 0 : 1);
