// The coven-ls wire contract as the client sees it (protocol.md is the source of truth).
// Pure: no `vscode` import, so the state model and its tests can use it in plain node.

export const Method = {
  startSession: 'coven/startSession',
  sendMessage: 'coven/sendMessage',
  cancel: 'coven/cancel',
  closeSession: 'coven/closeSession',
  listSessions: 'coven/listSessions',
  getEvents: 'coven/getEvents',
  decideFork: 'coven/decideFork',
  fork: 'coven/fork',
  resumeFork: 'coven/resumeFork',
  abandonFork: 'coven/abandonFork',
  deleteSession: 'coven/deleteSession',
  event: 'coven/event',
  requestPermission: 'coven/requestPermission',
} as const;

export const ErrorCode = {
  invalidParams: -32602,
  sessionNotFound: -32001,
  claudeUnavailable: -32002,
  invalidState: -32003,
  forkNotFound: -32004,
  storeUnavailable: -32005,
} as const;

/** Statuses the server sends today; the model keeps unknown ones as plain strings. */
export type KnownStatus =
  | 'queued'
  | 'starting'
  | 'running'
  | 'idle'
  | 'awaitingApproval'
  | 'forking'
  | 'failed'
  | 'cancelled'
  | 'closed'
  | 'interrupted';
export type Status = KnownStatus | (string & {});

export type ForkMode = 'auto' | 'approve' | 'off';
export type PermissionMode = 'default' | 'acceptEdits' | 'plan' | 'bypassPermissions' | 'dontAsk' | 'auto';

export interface InitializationOptions {
  claudePath?: string;
  model?: string;
  permissionMode?: PermissionMode;
  forkMode?: ForkMode;
  maxChildren?: number;
  maxParallel?: number;
  maxDepth?: number;
  stateDir?: string;
}

/** One entry of `coven/listSessions`; every field is always present (null when unset). */
export interface SessionInfo {
  sessionId: string;
  parentId: string | null;
  forkId: string | null;
  label: string | null;
  title: string;
  status: Status;
  cwd: string;
  model: string | null;
  permissionMode: string | null;
  forkMode: string | null;
  agentSessionId: string | null;
  createdAt: string;
  costUsd: number;
  queued: number;
}

/**
 * Every `coven/event` has these; the rest depends on `kind`. Events are read defensively
 * (clients must ignore kinds and fields they do not know), so the per-kind shapes below describe
 * what the server promises, and the reducer still checks each field before it trusts it.
 */
export interface EventBase {
  sessionId: string;
  seq: number;
  kind: string;
  time: string;
  [field: string]: unknown;
}

export interface StatusEvent extends EventBase { kind: 'status'; status: Status }
export interface PromptEvent extends EventBase {
  kind: 'prompt';
  text: string;
  origin: 'user' | 'fork' | 'forkResults' | 'forkError' | 'forkRejected' | (string & {});
}
export interface AgentEvent extends EventBase {
  kind: 'agent';
  agentSessionId?: string;
  model?: string;
  cwd?: string;
  permissionMode?: string;
  claudeCodeVersion?: string;
}
export interface TextEvent extends EventBase { kind: 'text' | 'thinking'; text: string; messageId?: string; parentToolUseId?: string }
export interface ToolUseEvent extends EventBase {
  kind: 'toolUse';
  toolUseId: string;
  name: string;
  input: Record<string, unknown>;
  messageId?: string;
  parentToolUseId?: string;
}
export interface ToolResultEvent extends EventBase {
  kind: 'toolResult';
  toolUseId: string;
  content: string;
  isError: boolean;
  parentToolUseId?: string;
}
export interface PermissionRequestEvent extends EventBase {
  kind: 'permissionRequest';
  toolUseId?: string;
  toolName: string;
  input: Record<string, unknown>;
}
export interface PermissionDecisionEvent extends EventBase {
  kind: 'permissionDecision';
  toolUseId?: string;
  toolName: string;
  allow: boolean;
  message?: string;
}
export interface TurnResultEvent extends EventBase {
  kind: 'turnResult';
  text: string;
  isError: boolean;
  subtype: string;
  costUsd: number;
  durationMs: number;
  numTurns: number;
  agentSessionId?: string;
  cancelled?: boolean;
}
export interface ErrorEvent extends EventBase { kind: 'error'; message: string }
export interface ForkProposedEvent extends EventBase { kind: 'forkProposed'; forkId: string; tasks: string[] }
export interface ForkRejectedEvent extends EventBase { kind: 'forkRejected'; forkId: string; reason?: string }
export interface ForkChild { sessionId: string; label: string }
export interface ForkStartedEvent extends EventBase {
  kind: 'forkStarted';
  forkId: string;
  source: 'model' | 'user' | (string & {});
  atMessageId?: string;
  tasks: string[];
  /** In task order. */
  children: ForkChild[];
}
export interface ForkResult { label: string; sessionId: string; ok: boolean; error?: string }
export interface ForkFinishedEvent extends EventBase { kind: 'forkFinished'; forkId: string; results: ForkResult[] }
export interface ForkErrorEvent extends EventBase { kind: 'forkError'; message: string }
/** Not stored: the session and its subtree are gone; nothing follows it. */
export interface DeletedEvent extends EventBase { kind: 'deleted'; sessionIds: string[] }

export type CovenEvent = EventBase;

// --- request and response shapes -------------------------------------------------------------

export interface StartSessionParams {
  prompt: string;
  cwd?: string;
  model?: string;
  permissionMode?: PermissionMode;
  forkMode?: ForkMode;
  title?: string;
}
export interface StartSessionResult { sessionId: string }
export interface SendMessageResult { queued: boolean; position: number }
export interface CancelResult { droppedMessages: number }
export interface ListSessionsResult { sessions: SessionInfo[] }
export interface GetEventsResult { events: CovenEvent[] }
export interface DecideForkParams { forkId: string; approve: boolean; tasks?: string[]; reason?: string }
export interface ForkParams { sessionId: string; tasks: string[]; atMessageId?: string }
export interface ForkResponse { forkId: string }
export interface DeleteSessionParams { sessionId: string; purge?: boolean }
export interface DeleteSessionResult { deletedSessionIds: string[] }

export interface RequestPermissionParams {
  sessionId: string;
  toolName: string;
  input: Record<string, unknown>;
  toolUseId?: string | null;
}
export interface RequestPermissionResult { allow: boolean; message?: string }
