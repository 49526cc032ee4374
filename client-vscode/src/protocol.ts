// The coven-ls wire contract as the client sees it. Every type comes from the server's JSON Schema
// (coven_ls/protocol/schema.json → protocol.gen.ts, by `npm run gen:protocol`); this file adds only
// what a schema does not say: short names for the methods, and the types of a method's params and
// result looked up by its name.
// Pure: no `vscode` import, so the state model and its tests can use it in plain node.

import type { Event, Notifications, Requests, ServerRequests } from './protocol.gen';

export * from './protocol.gen';

/**
 * The coven/* protocol version this client was written for: what a server's `initialize` result
 * says in `capabilities.experimental.coven.protocolVersion` (protocol.md, Protocol version).
 */
export const PROTOCOL_VERSION = 2;

/** Client → server requests. */
export type RequestMethod = keyof Requests;
/** Server → client requests. */
export type ServerRequestMethod = keyof ServerRequests;
/** Server → client notifications. */
export type NotificationMethod = keyof Notifications;
export type AnyMethod = RequestMethod | ServerRequestMethod | NotificationMethod;

type RequestTable = Requests & ServerRequests;
/** What a request (either way) takes: `ParamsOf<'coven/fork'>` is ForkParams. */
export type ParamsOf<M extends RequestMethod | ServerRequestMethod> = RequestTable[M]['params'];
/** What a request (either way) answers: `ResultOf<'coven/fork'>` is ForkResult. */
export type ResultOf<M extends RequestMethod | ServerRequestMethod> = RequestTable[M]['result'];
/** What a notification carries: `NotificationParamsOf<'coven/event'>` is Event. */
export type NotificationParamsOf<M extends NotificationMethod> = Notifications[M];

/**
 * Every method of the protocol by a short name. test/protocol.test.ts checks it against the
 * schema's method tables both ways, so a method the server adds or drops fails the tests.
 */
export const Method = {
  startSession: 'coven/startSession',
  sendMessage: 'coven/sendMessage',
  cancel: 'coven/cancel',
  closeSession: 'coven/closeSession',
  listSessions: 'coven/listSessions',
  getEvents: 'coven/getEvents',
  fork: 'coven/fork',
  branch: 'coven/branch',
  decideFork: 'coven/decideFork',
  estimateFork: 'coven/estimateFork',
  resumeFork: 'coven/resumeFork',
  abandonFork: 'coven/abandonFork',
  deleteSession: 'coven/deleteSession',
  stopTask: 'coven/stopTask',
  getChanges: 'coven/getChanges',
  applyChanges: 'coven/applyChanges',
  discardChanges: 'coven/discardChanges',
  requestPermission: 'coven/requestPermission',
  event: 'coven/event',
  delta: 'coven/delta',
} as const satisfies Record<string, AnyMethod>;

/** The tool name of the `coven/requestPermission` question about a repository's worktree setup. */
export const WORKTREE_SETUP_TOOL = 'WorktreeSetup';

/**
 * A `coven/event` notification's params (the generated `Event`, under a name that does not
 * shadow node's global `Event`). Clients must ignore kinds and fields they do not know, which the
 * type does not model: the reducer still checks each field before it trusts it.
 */
export type CovenEvent = Event;
