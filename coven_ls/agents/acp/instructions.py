"""How the instructions coven gives a session's model (`AgentSpec.append_system_prompt`: how to
fork, or a transcript branch's parent conversation) reach an ACP agent, which takes no system
prompt from its client: ahead of the first `session/prompt` of a new session, once, in a block
that says what it is.

A session started as a copy (`session/fork`) holds them already (its parent's first prompt); a
resumed or loaded one holds them since its own first prompt (coven-ls records a session's agent
id only with that prompt), so neither gets them again: an agent's context must not fill with a
copy per restart.
"""

from __future__ import annotations

from ...core.agent import AgentSpec, New

OPEN = '<coven-instructions source="coven-ls">'
CLOSE = "</coven-instructions>"


def first_prompt_preamble(spec: AgentSpec) -> str | None:
    """What the session's first prompt starts with, or None."""
    if not spec.append_system_prompt or not isinstance(spec.start, New):
        return None
    return (
        f"{OPEN}\nInstructions from coven-ls, the program that hosts this session, for the "
        f"whole session (as a system prompt would give them):\n\n{spec.append_system_prompt}\n"
        f"{CLOSE}\n\n"
    )
