"""An ACP agent's permission options in the terminal (`coven-ls chat` and `run`): numbered after
the question, answered with a digit, given back as the answer's `optionId`."""

from __future__ import annotations

from typing import Any

from .client import PermissionAnswer

# Keys for at most nine options (agents offer three or four).
KEYS = "123456789"


def offered(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The options a `coven/requestPermission` carries (none for Claude and Codex)."""
    options = request.get("options")
    if not isinstance(options, list):
        return []
    return [o for o in options if isinstance(o, dict) and isinstance(o.get("optionId"), str)][
        : len(KEYS)
    ]


def listing(options: list[dict[str, Any]]) -> str:
    """`  1. Allow once  2. Always allow  3. Reject`"""
    return "  ".join(f"{KEYS[n]}. {o.get('name') or o['optionId']}" for n, o in enumerate(options))


def answer(options: list[dict[str, Any]], key: str) -> PermissionAnswer:
    """The answer for the option under `key`: its kind says allow or not."""
    option = options[KEYS.index(key)]
    allow = str(option.get("kind", "")).startswith("allow")
    if allow:
        return {"allow": True, "optionId": option["optionId"]}
    return {"allow": False, "message": "Denied by the user.", "optionId": option["optionId"]}


def rejecting(options: list[dict[str, Any]]) -> str:
    """The key of the first option that rejects (else the last's)."""
    for n, option in enumerate(options):
        if str(option.get("kind", "")).startswith("reject"):
            return KEYS[n]
    return KEYS[len(options) - 1]
