import assert from 'node:assert/strict';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';

import { connectTcp, defaultTokenFile, parseHostPort, readToken } from '../src/tcp';

test('host:port settings', () => {
  assert.deepEqual(parseHostPort('127.0.0.1:7000'), { host: '127.0.0.1', port: 7000 });
  assert.deepEqual(parseHostPort(' :7000 '), { host: '127.0.0.1', port: 7000 });
  assert.deepEqual(parseHostPort('[::1]:7000'), { host: '::1', port: 7000 });
  for (const bad of ['', '7000', 'localhost', 'localhost:', 'h:0', 'h:70000', 'h:7o']) assert.equal(parseHostPort(bad), undefined, bad);
});

test('the generated token file is where the server writes it', () => {
  assert.equal(defaultTokenFile(7000, { XDG_RUNTIME_DIR: '/run/user/1', HOME: '/h' }), '/run/user/1/coven-ls/tcp-7000.token');
  assert.equal(defaultTokenFile(7000, { XDG_STATE_HOME: '/s', HOME: '/h' }), '/s/coven-ls/tcp-7000.token');
  assert.equal(defaultTokenFile(7000, { HOME: '/h' }), '/h/.local/state/coven-ls/tcp-7000.token');
});

test('a token file is read trimmed; a missing or empty one says what to do', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'coven-tcp-'));
  try {
    const file = join(dir, 'token');
    await writeFile(file, '  s3cret\n');
    await chmod(file, 0o600);
    assert.equal(await readToken(file), 's3cret');
    await writeFile(file, '\n');
    await assert.rejects(readToken(file), /is empty/);
    await assert.rejects(readToken(join(dir, 'nope')), /ENOENT.*coven\.server\.tokenFile/);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('connects to a listening socket, and names the address when nothing listens', async () => {
  let arrived!: (text: string) => void;
  const got = new Promise<string>((resolve) => (arrived = resolve));
  const server: Server = createServer((socket) => {
    let text = '';
    socket.on('data', (d) => (text += String(d)));
    socket.on('end', () => arrived(text));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  try {
    const socket = await connectTcp({ host: '127.0.0.1', port });
    socket.end('hello');
    const timeout = new Promise<never>((_, reject) => setTimeout(() => reject(new Error('nothing arrived')), 5000).unref());
    assert.equal(await Promise.race([got, timeout]), 'hello');
  } finally {
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
  // The port is free now: connecting must fail, with the address in the message.
  await assert.rejects(connectTcp({ host: '127.0.0.1', port }), new RegExp(`127\\.0\\.0\\.1:${port} \\(ECONNREFUSED\\)`));
});
