// What a fork's children start from and which agent runs them (coven/fork's and
// coven/decideFork's `context` and `agent`), as a list to pick from. Free of `vscode`, so it is
// unit-tested in plain node; commands.ts shows it as a quick pick.

export type ForkAgent = 'claude' | 'codex';
export type ForkContext = 'inherit' | 'fresh' | 'transcript';

export interface ForkChoice {
  label: string;
  description: string;
  /** What a proposed fork would cost started this way (coven/estimateFork), when known. */
  detail?: string;
  /** What goes into the request: nothing for the default (the parent's conversation, natively). */
  params: { agent?: ForkAgent; context?: ForkContext };
}

const AGENTS: Record<ForkAgent, string> = { claude: 'Claude', codex: 'Codex' };

function agentOf(name: string | undefined): ForkAgent {
  return name === 'codex' ? 'codex' : 'claude';
}

/** The choices for children of a session run by `parentAgent` (`claude` when unknown), the default first. */
export function forkChoices(parentAgent: string | undefined): ForkChoice[] {
  const own = agentOf(parentAgent);
  const other: ForkAgent = own === 'claude' ? 'codex' : 'claude';
  return [
    {
      label: 'Continue the conversation',
      description: `each ${AGENTS[own]} child resumes this conversation (default)`,
      params: {},
    },
    {
      label: 'Start fresh',
      description: `each ${AGENTS[own]} child gets only its task: cheaper, for work that needs no context`,
      params: { context: 'fresh' },
    },
    {
      label: 'Start from a transcript',
      description: `each ${AGENTS[own]} child gets this conversation written into its first prompt, cut to size`,
      params: { context: 'transcript' },
    },
    {
      label: `${AGENTS[other]} children, from a transcript`,
      description: `each child is a ${AGENTS[other]} session given this conversation written out`,
      params: { agent: other, context: 'transcript' },
    },
    {
      label: `${AGENTS[other]} children, fresh`,
      description: `each child is a ${AGENTS[other]} session given only its task`,
      params: { agent: other, context: 'fresh' },
    },
  ];
}

/** The choices with what each would cost: `costs[i]` (a cost line, or undefined when unknown) for `choices[i]`. */
export function withCosts(choices: ForkChoice[], costs: (string | undefined)[]): ForkChoice[] {
  return choices.map((choice, i) => (costs[i] !== undefined ? { ...choice, detail: costs[i] } : choice));
}
