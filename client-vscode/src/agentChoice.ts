// Which agent a new session runs: asked only when the server offers more than one (its
// `capabilities.experimental.coven.agents`), the `coven.agent` setting first. Pure, for the tests.

/** One agent the server offers: its name, and (from protocol version 2) what sets it apart. */
export interface AgentOffer {
  name: string;
  /** claude, codex or acp; undefined when the server lists names only. */
  kind?: string;
  /** How its fork children get the conversation: inherit (natively), transcript (written out:
   * the agent has no session/fork); undefined when not said. */
  fork?: string;
  /** Whether it reports what a session costs; undefined when not known before it runs. */
  cost?: boolean;
}

export interface AgentChoice {
  agent: string;
  label: string;
  description: string;
}

const AGENTS: Record<string, { label: string; description: string }> = {
  claude: { label: 'Claude Code', description: 'Anthropic' },
  codex: { label: 'Codex', description: 'OpenAI, with your ~/.codex configuration' },
};

const KINDS: Record<string, string> = { claude: 'Claude Code', codex: 'Codex', acp: 'ACP agent' };

/**
 * The agents in `experimental.coven` of the initialize answer, in its order: a list of
 * `{name, kind, fork, cost}`, or a list of names from a server of protocol version 1. A server
 * older than the field offers Claude only.
 */
export function offersOf(coven: unknown): AgentOffer[] {
  const agents = (coven as { agents?: unknown } | undefined)?.agents;
  if (!Array.isArray(agents)) return [{ name: 'claude', kind: 'claude' }];
  const offers: AgentOffer[] = [];
  for (const entry of agents as unknown[]) {
    if (typeof entry === 'string') {
      offers.push(entry === 'claude' || entry === 'codex' ? { name: entry, kind: entry } : { name: entry });
    } else if (typeof entry === 'object' && entry !== null && typeof (entry as { name?: unknown }).name === 'string') {
      const { name, kind, fork, cost } = entry as { name: string; kind?: unknown; fork?: unknown; cost?: unknown };
      offers.push({
        name,
        ...(typeof kind === 'string' ? { kind } : {}),
        ...(typeof fork === 'string' ? { fork } : {}),
        ...(typeof cost === 'boolean' ? { cost } : {}),
      });
    }
  }
  return offers;
}

/** What sets an agent apart, a few words each: its kind, no session/fork, no cost reported. */
export function offerHints(offer: AgentOffer): string[] {
  const hints: string[] = [];
  if (offer.kind === 'acp') hints.push(KINDS.acp!);
  if (offer.fork === 'transcript') hints.push('no fork: transcript children');
  if (offer.cost === false) hints.push('reports no cost');
  return hints;
}

/**
 * The agents to offer, the preferred (the setting) first and marked as the default; empty when
 * there is nothing to ask (one agent or none: the server's default applies).
 */
export function agentChoices(available: readonly (AgentOffer | string)[], preferred: string | undefined): AgentChoice[] {
  const offers = available.map((a) => (typeof a === 'string' ? { name: a } : a));
  if (offers.length < 2) return [];
  const first = offers.find((o) => o.name === preferred);
  const ordered = first !== undefined ? [first, ...offers.filter((o) => o !== first)] : offers;
  return ordered.map((offer) => {
    const known = AGENTS[offer.name];
    const isDefault = offer === first;
    const description = [known?.description ?? '', ...offerHints(offer), isDefault ? 'coven.agent' : ''].filter(Boolean).join(' · ');
    return { agent: offer.name, label: known?.label ?? offer.name, description };
  });
}

/** What the session's prompt box asks, naming the agent. */
export function agentName(agent: string | undefined): string {
  return agent === undefined ? 'Claude' : agent === 'claude' ? 'Claude' : (AGENTS[agent]?.label ?? agent);
}
