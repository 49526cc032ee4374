"""The model's side of forking, pure: the instructions that teach it the `<fork>` tag, reading the
tag out of its answer (a task list, or a sentence saying what is wrong with it), and the first
message each child gets."""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

import yaml

from ..session import SessionConfig

MAX_LABEL_CHARS = 200

_FENCE = re.compile(r"^[ \t]*(```|~~~)[^\n]*\n.*?(?:^[ \t]*\1[ \t]*$|\Z)", re.DOTALL | re.MULTILINE)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_TAG = re.compile(r"<fork>(.*?)</fork>", re.DOTALL)
_OPEN_TAG = re.compile(r"<fork>")


class ForkSyntaxError(ValueError):
    """The model's `<fork>` tag is not a usable task list; the message says why, for the model."""


def fork_instructions(max_children: int) -> str:
    prompt = resources.files("coven_ls.core.fork").joinpath("prompts/fork.md")
    text = prompt.read_text(encoding="utf-8")
    return text.replace("{max_children}", str(max_children))


def may_fork(config: SessionConfig, depth: int) -> bool:
    """Whether a session at `depth` (0: top level) forks when its model asks, and so is taught
    how to in its system prompt."""
    return config.fork_mode != "off" and depth < config.max_depth


def fork_prompt(config: SessionConfig, depth: int) -> str | None:
    """What to append to the agent's system prompt (Codex: its developer instructions) for a
    session at `depth`."""
    return fork_instructions(config.max_children) if may_fork(config, depth) else None


def _outside_code(text: str) -> str:
    """The text with fenced blocks and inline code blanked out: a tag shown as an example is not
    a request to fork."""
    text = _FENCE.sub(lambda m: " " * len(m.group(0)), text)
    return _INLINE_CODE.sub(lambda m: " " * len(m.group(0)), text)


def find_fork_tag(text: str) -> str | None:
    """The body of the answer's `<fork>` tag, or None when there is none. Raises ForkSyntaxError
    for an unclosed tag or more than one."""
    plain = _outside_code(text)
    tags = _TAG.findall(plain)
    if len(tags) > 1:
        raise ForkSyntaxError(
            f"Your answer has {len(tags)} <fork> tags; put every task in a single <fork> tag."
        )
    if not tags:
        if _OPEN_TAG.search(plain):
            raise ForkSyntaxError("Your answer opens a <fork> tag but never closes it (</fork>).")
        return None
    tag: str = tags[0]
    return tag


def check_tasks(tasks: Any, max_children: int) -> list[str]:
    """Validate a task list (from YAML or a client); raises ForkSyntaxError saying what is wrong."""
    if not isinstance(tasks, list):
        if isinstance(tasks, dict):
            raise ForkSyntaxError(
                "The <fork> tag holds a YAML mapping, not a list. Write one '- label' line per "
                "task, and quote a label that contains ': '."
            )
        raise ForkSyntaxError(
            "The <fork> tag must hold a YAML list of task labels, one '- label' line per task."
        )
    if not tasks:
        raise ForkSyntaxError("The task list is empty; give at least one task label.")
    if len(tasks) > max_children:
        raise ForkSyntaxError(
            f"{len(tasks)} tasks is more than the limit of {max_children}; "
            "merge tasks or fork fewer at a time."
        )
    labels = []
    for number, task in enumerate(tasks, 1):
        if not isinstance(task, str):
            kind = {bool: "a boolean", int: "a number", float: "a number", dict: "a mapping"}.get(
                type(task), "not plain text"
            )
            raise ForkSyntaxError(
                f"Task {number} is {kind} ({task!r}), not a text label; quote it if it is meant "
                "as text."
            )
        label = " ".join(task.split())
        if not label:
            raise ForkSyntaxError(f"Task {number} is empty; every task needs a label.")
        if len(label) > MAX_LABEL_CHARS:
            raise ForkSyntaxError(
                f"Task {number} is {len(label)} characters long; keep labels under "
                f"{MAX_LABEL_CHARS} characters and put the details in your answer before the tag."
            )
        labels.append(label)
    return labels


def parse_fork_tag(text: str, max_children: int) -> list[str] | None:
    """The task labels the answer asks to fork into; None when it asks for no fork."""
    body = find_fork_tag(text)
    if body is None:
        return None
    try:
        tasks = yaml.safe_load(body)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1} of the tag)" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ForkSyntaxError(f"The <fork> tag is not valid YAML{where}: {problem}.") from exc
    return check_tasks(tasks, max_children)


def problem_message(problem: str) -> str:
    """The follow-up a parent gets when its `<fork>` tag was refused."""
    return (
        f"Your <fork> tag was not used, so nothing was forked: {problem}\n"
        "Fix the tag and answer again to fork, or carry on without forking."
    )


def child_prompt(
    label: str,
    tasks: list[str],
    workdir: str | None = None,
    parent_dir: str | None = None,
    fresh: bool = False,
) -> str:
    """A fork child's first message. Its first line is the seeds' contract, word for word; the
    rest keeps the child on its own task: parallel forks that redo each other's work or re-plan
    the whole job are what users complain of most in fork features. A child in a worktree is
    told where it works: the conversation it resumes names the parent's paths, and writing
    there would bypass its isolation."""
    lines = [f"You were assigned '{label}'"]
    if fresh:
        lines += [
            "",
            "You start afresh: you were given none of the conversation you were forked from, "
            "only this task. Find out what you need from the project itself.",
        ]
    if workdir is not None and parent_dir is not None:
        lines += [
            "",
            f"You work in a copy of the project of your own (a git worktree): {workdir}. It "
            f"holds what {parent_dir} held when you were forked, uncommitted changes included. "
            f"Read and change files only under {workdir}, never under {parent_dir}, even where "
            "the conversation so far names paths there. When you end, your changes are merged "
            f"back into {parent_dir}; you need not commit them.",
        ]
    others = [t for t in tasks if t != label]
    if others:
        lines += [
            "",
            f"You are one of {len(tasks)} forks of this conversation, running at the same time; "
            "each has one task. The others are:",
            *(f"- {t}" for t in others),
            "",
            "Do only your own task. Do not do the others' tasks, and do not re-plan or "
            "re-organise the whole job: that is what the conversation you were forked from "
            "does with every fork's answer. End with your result; it is handed back to it.",
        ]
    return "\n".join(lines)
