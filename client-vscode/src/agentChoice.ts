// Which agent a new session runs: asked only when the server finds more than one (its
// `capabilities.experimental.coven.agents`), the `coven.agent` setting first. Pure, for the tests.

export interface AgentChoice {
  agent: string;
  label: string;
  description: string;
}

const AGENTS: Record<string, { label: string; description: string }> = {
  claude: { label: 'Claude Code', description: 'Anthropic' },
  codex: { label: 'Codex', description: 'OpenAI, with your ~/.codex configuration' },
};

/**
 * The agents to offer, the preferred (the setting) first and marked as the default; empty when
 * there is nothing to ask (one agent or none: the server's default applies).
 */
export function agentChoices(available: readonly string[], preferred: string | undefined): AgentChoice[] {
  if (available.length < 2) return [];
  const ordered = preferred !== undefined && available.includes(preferred) ? [preferred, ...available.filter((a) => a !== preferred)] : [...available];
  return ordered.map((agent) => {
    const known = AGENTS[agent] ?? { label: agent, description: '' };
    const isDefault = agent === ordered[0] && agent === preferred;
    return { agent, label: known.label, description: [known.description, isDefault ? 'coven.agent' : ''].filter(Boolean).join(' · ') };
  });
}

/** What the session's prompt box asks, naming the agent. */
export function agentName(agent: string | undefined): string {
  return agent === undefined ? 'Claude' : agent === 'claude' ? 'Claude' : (AGENTS[agent]?.label ?? agent);
}
