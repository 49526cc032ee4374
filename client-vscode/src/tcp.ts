// Connecting to a coven-ls that already runs (`coven-ls --tcp HOST:PORT`) instead of starting
// one: where it listens, the token it lets clients in with, and the socket. No `vscode` here, so
// the unit tests can cover it.

import { readFile } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';

export interface TcpAddress {
  host: string;
  port: number;
}

/** `host:port` (`:port` alone means 127.0.0.1), or undefined when it is not one. */
export function parseHostPort(text: string): TcpAddress | undefined {
  const match = /^(.*):(\d{1,5})$/.exec(text.trim());
  if (match === null) return undefined;
  const port = Number(match[2]);
  if (port < 1 || port > 65535) return undefined;
  const host = match[1]!.replace(/^\[(.*)\]$/, '$1') || '127.0.0.1';
  return { host, port };
}

/**
 * Where a server that generated its token wrote it: `$XDG_RUNTIME_DIR/coven-ls/tcp-PORT.token`,
 * else `$XDG_STATE_HOME/coven-ls/…`, else `~/.local/state/coven-ls/…` (the server's own rule).
 */
export function defaultTokenFile(port: number, env: NodeJS.ProcessEnv = process.env): string {
  const folder = env.XDG_RUNTIME_DIR
    ? join(env.XDG_RUNTIME_DIR, 'coven-ls')
    : join(env.XDG_STATE_HOME || join(env.HOME ?? '', '.local', 'state'), 'coven-ls');
  return join(folder, `tcp-${port}.token`);
}

/** The token in `path`; throws an Error whose message says what to do. */
export async function readToken(path: string): Promise<string> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new Error(
      `cannot read the coven-ls token file ${path}${code ? ` (${code})` : ''}. Set coven.server.tokenFile to the file the server was started with (--token-file) or the one it printed.`,
    );
  }
  const token = text.trim();
  if (!token) throw new Error(`the coven-ls token file ${path} is empty.`);
  return token;
}

/** A connected socket, or an Error that names the address. */
export function connectTcp(address: TcpAddress, timeoutMs = 10_000): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: address.host, port: address.port });
    const fail = (why: string): void => {
      socket.destroy();
      reject(new Error(`cannot connect to coven-ls at ${address.host}:${address.port} (${why}). Is \`coven-ls --tcp ${address.host}:${address.port}\` running? Check coven.server.tcp.`));
    };
    socket.setTimeout(timeoutMs, () => fail('timed out'));
    socket.once('error', (error: NodeJS.ErrnoException) => fail(error.code ?? error.message));
    socket.once('connect', () => {
      socket.setTimeout(0);
      socket.removeAllListeners('error');
      resolve(socket);
    });
  });
}
