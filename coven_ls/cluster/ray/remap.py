"""Paths between this machine and a node: a child's worktree is at one place here and another
there, and what names a path (its spec, a permission question's input, the folder it says it
works in) is moved from one to the other by prefix."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

from ...core.agent import AgentEvent, AgentSpec
from ...core.agent.events import (
    AgentMessage,
    AgentStarted,
    Location,
    ToolCall,
    ToolCallUpdate,
)

# (from, to) folder pairs, the longest first where they nest.
Mapping_ = Sequence[tuple[str, str]]


def remap_path(path: str, pairs: Mapping_) -> str:
    """`path` with the first folder of `pairs` it lies in (or is) replaced by its partner;
    unchanged when it lies in none."""
    for source, target in sorted(pairs, key=lambda p: len(p[0]), reverse=True):
        source = source.rstrip(os.sep) or os.sep
        if path == source:
            return target
        if path.startswith(source.rstrip(os.sep) + os.sep):
            return target.rstrip(os.sep) + os.sep + path[len(source.rstrip(os.sep)) + 1 :]
    return path


def remap_value(value: Any, pairs: Mapping_) -> Any:
    """Every string in a JSON-like value that is an absolute path in one of the folders,
    moved (a tool's input: `file_path`, `path`, a notebook's)."""
    if isinstance(value, str):
        return remap_path(value, pairs) if value.startswith(os.sep) else value
    if isinstance(value, dict):
        return {k: remap_value(v, pairs) for k, v in value.items()}
    if isinstance(value, list):
        return [remap_value(v, pairs) for v in value]
    return value


def node_spec(
    spec: AgentSpec,
    *,
    worktree: str,
    repository: str,
    temp_dir: str,
    env: dict[str, str],
    protected: tuple[str, ...],
) -> AgentSpec:
    """The spec a child's agent starts with on its node: its cwd the node's worktree, the
    repository it must not write the node's cache of it, its temporary folder the node's, the
    environment that travelled; a fenced child stays fenced (the protected git files those of
    the node's repository)."""
    fence = spec.fence
    if fence is not None:
        fence = dataclasses.replace(fence, protected=protected)
    return dataclasses.replace(
        spec,
        cwd=worktree,
        env=env,
        read_only_roots=(repository,) if spec.read_only_roots else (),
        temp_dir=temp_dir if spec.temp_dir is not None else None,
        fence=fence,
    )


def _locations(locations: tuple[Location, ...], pairs: Mapping_) -> tuple[Location, ...]:
    return tuple(dataclasses.replace(p, path=remap_path(p.path, pairs)) for p in locations)


def localised(event: AgentEvent, pairs: Mapping_) -> AgentEvent:
    """An agent's event with the node's paths in it made this machine's: the folder it works
    in, its tool calls' inputs and locations (what a client opens or reviews)."""
    match event:
        case AgentStarted(cwd=str(cwd)):
            return dataclasses.replace(event, cwd=remap_path(cwd, pairs))
        case AgentMessage(parts=parts):
            moved = tuple(
                dataclasses.replace(
                    p,
                    input=remap_value(p.input, pairs),
                    locations=_locations(p.locations, pairs),
                )
                if isinstance(p, ToolCall)
                else p
                for p in parts
            )
            return dataclasses.replace(event, parts=moved)
        case ToolCallUpdate():
            return dataclasses.replace(
                event,
                input=None if event.input is None else remap_value(event.input, pairs),
                locations=None if event.locations is None else _locations(event.locations, pairs),
            )
    return event
