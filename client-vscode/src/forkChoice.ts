// What a fork's children start from and which agent runs them (coven/fork's and
// coven/decideFork's `context` and `agent`), as a list to pick from. Free of `vscode`, so it is
// unit-tested in plain node; commands.ts shows it as a quick pick.

import { agentName, type AgentOffer } from './agentChoice';

/** An agent by name: claude, codex, or an ACP agent the server offers. */
export type ForkAgent = string;
export type ForkContext = 'inherit' | 'fresh' | 'transcript';

export interface ForkChoice {
  label: string;
  description: string;
  /** What a proposed fork would cost started this way (coven/estimateFork), when known. */
  detail?: string;
  /** What goes into the request: nothing for the default (the parent's conversation, natively). */
  params: { agent?: ForkAgent; context?: ForkContext };
}

/** What a server that does not list its agents is taken to offer. */
const CLAUDE_AND_CODEX: AgentOffer[] = [
  { name: 'claude', kind: 'claude' },
  { name: 'codex', kind: 'codex' },
];

/**
 * The choices for children of a session run by `parentAgent` (`claude` when unknown), the
 * default first, then children of each other agent in `offers` (the server's agents; when not
 * given, Claude and Codex). A parent whose agent has no session/fork (`fork: transcript`) has no
 * "continue" choice: its children get the conversation written out, which is the server's default.
 */
export function forkChoices(parentAgent: string | undefined, offers: readonly AgentOffer[] = CLAUDE_AND_CODEX): ForkChoice[] {
  const own = parentAgent ?? 'claude';
  const ownName = agentName(own);
  const transcriptOnly = offers.find((o) => o.name === own)?.fork === 'transcript';
  const choices: ForkChoice[] = transcriptOnly
    ? [
        {
          label: 'Start from a transcript',
          description: `each ${ownName} child gets this conversation written into its first prompt, cut to size (default: ${ownName} has no session/fork)`,
          params: {},
        },
      ]
    : [
        {
          label: 'Continue the conversation',
          description: `each ${ownName} child resumes this conversation (default)`,
          params: {},
        },
      ];
  choices.push({
    label: 'Start fresh',
    description: `each ${ownName} child gets only its task: cheaper, for work that needs no context`,
    params: { context: 'fresh' },
  });
  if (!transcriptOnly) {
    choices.push({
      label: 'Start from a transcript',
      description: `each ${ownName} child gets this conversation written into its first prompt, cut to size`,
      params: { context: 'transcript' },
    });
  }
  for (const other of offers) {
    if (other.name === own) continue;
    const name = agentName(other.name);
    const cost = other.cost === false ? ' (it reports no cost)' : '';
    choices.push(
      {
        label: `${name} children, from a transcript`,
        description: `each child is a ${name} session given this conversation written out${cost}`,
        params: { agent: other.name, context: 'transcript' },
      },
      {
        label: `${name} children, fresh`,
        description: `each child is a ${name} session given only its task${cost}`,
        params: { agent: other.name, context: 'fresh' },
      },
    );
  }
  return choices;
}

export type Placement = 'local' | 'cluster' | 'auto';

export interface PlacementChoice {
  label: string;
  description: string;
  /** What goes into the request: nothing for the session's own setting (`initializationOptions.placement`). */
  params: { placement?: Placement };
}

/**
 * Where the children may run, when the server places children on a cluster (`cluster`: its name,
 * from `capabilities.experimental.coven.cluster`); none without one, so nothing is asked.
 */
export function placementChoices(cluster: string | undefined): PlacementChoice[] {
  if (cluster === undefined) return [];
  return [
    { label: 'Where the settings say', description: 'coven.placement, else on this machine (default)', params: {} },
    { label: 'On this machine', description: 'every child runs here, in turns of maxParallel', params: { placement: 'local' } },
    { label: `On the ${cluster} cluster`, description: `every child runs on a ${cluster} node; the fork fails if the cluster cannot be reached`, params: { placement: 'cluster' } },
    {
      label: `Here, then on the ${cluster} cluster`,
      description: `maxParallel children here, the rest on a ${cluster} node (all here if it cannot be reached)`,
      params: { placement: 'auto' },
    },
  ];
}

/** The choices with what each would cost: `costs[i]` (a cost line, or undefined when unknown) for `choices[i]`. */
export function withCosts(choices: ForkChoice[], costs: (string | undefined)[]): ForkChoice[] {
  return choices.map((choice, i) => (costs[i] !== undefined ? { ...choice, detail: costs[i] } : choice));
}
