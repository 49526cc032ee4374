"""The agents a server offers, for the terminal front ends: which names `--agent`, `--fork-agent`
and `/agent` take, and how to list them.

The server says which in its initialize answer, `capabilities.experimental.coven.agents`: a list
of `{name, kind, fork, cost}`, or, from a server of protocol version 1, a list of names. Both are
read; a server that says nothing (older still) is taken at its word when a session starts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..agents.acp.known import install_hint

_KINDS = {"claude": "Claude Code", "codex": "Codex", "acp": "ACP"}


@dataclass(frozen=True)
class Offer:
    name: str
    kind: str | None = None
    """claude, codex or acp; None when the server lists names only"""
    fork: str | None = None
    """how its fork children get the conversation: inherit (natively), transcript (written out:
    the agent has no session/fork), None when not said"""
    cost: bool | None = None
    """whether it reports what a session costs; None when not known before it runs"""

    def hints(self) -> list[str]:
        """What sets this agent apart, a few words each (none: the server said its name only)."""
        hints = [_KINDS.get(self.kind, self.kind)] if self.kind else []
        if self.fork == "transcript":
            hints.append("no fork: transcript children")
        if self.cost is False:
            hints.append("reports no cost")
        return hints

    def line(self) -> str:
        hints = self.hints()
        return f"{self.name} ({', '.join(hints)})" if hints else self.name


def offers_of(coven: Any) -> list[Offer] | None:
    """The agents in `experimental.coven` of an initialize answer (either shape), in its order;
    None when it says nothing of them. Entries of neither shape are left out."""
    agents = coven.get("agents") if isinstance(coven, dict) else None
    if not isinstance(agents, list):
        return None
    offers: list[Offer] = []
    for entry in agents:
        if isinstance(entry, str):
            offers.append(Offer(entry, entry if entry in ("claude", "codex") else None))
        elif isinstance(entry, dict) and isinstance(entry.get("name"), str):
            kind, fork, cost = entry.get("kind"), entry.get("fork"), entry.get("cost")
            offers.append(
                Offer(
                    entry["name"],
                    kind if isinstance(kind, str) else None,
                    fork if isinstance(fork, str) else None,
                    cost if isinstance(cost, bool) else None,
                )
            )
    return offers


def unknown_agent(name: str, offers: Sequence[Offer] | None) -> str | None:
    """Why `name` cannot run a session on this server (its agents listed, and how to get the one
    named if coven-ls knows it), or None when it can (or the server did not say which)."""
    if offers is None or any(o.name == name for o in offers):
        return None
    listed = ", ".join(o.line() for o in offers) or "none"
    hint = install_hint(name)
    how = (
        f"'{name}' is a known ACP agent, not installed where the server runs: {hint}"
        if hint
        else 'An agent that speaks ACP is added in initializationOptions.agents ({"NAME": '
        '{"command": [...]}}; see docs/agents.md)'
    )
    return f"Unknown agent '{name}': this server offers {listed}. {how}."
