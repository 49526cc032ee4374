"""The pure half of forking: reading the tag, checking tasks, writing the results message."""

from __future__ import annotations

import msgspec
import pytest

from coven_ls.core.fork.results import TaskResult, compose_results
from coven_ls.core.fork.tag import (
    ForkSyntaxError,
    child_prompt,
    fork_instructions,
    parse_fork_tag,
    problem_message,
)


def test_a_plain_list_is_a_fork() -> None:
    text = "Plan first.\n<fork>\n- Refactor auth\n- Add tests for the user API\n</fork>\n"
    assert parse_fork_tag(text, 8) == ["Refactor auth", "Add tests for the user API"]


def test_no_tag_is_no_fork() -> None:
    assert parse_fork_tag("Just an answer about <forks> in git.", 8) is None


@pytest.mark.parametrize(
    "text",
    [
        "Example:\n```\n<fork>\n- a\n</fork>\n```\nDone.",
        "Example:\n~~~yaml\n<fork>\n- a\n</fork>\n~~~\nDone.",
        "Write `<fork>- a</fork>` to fork.",
        "An unclosed example:\n```\n<fork>\n- a\n</fork>\n",
    ],
)
def test_tags_in_code_do_not_count(text: str) -> None:
    assert parse_fork_tag(text, 8) is None


def test_a_tag_after_a_code_block_counts() -> None:
    text = "```\n<fork>\n- shown\n</fork>\n```\nNow for real:\n<fork>\n- real\n</fork>"
    assert parse_fork_tag(text, 8) == ["real"]


def test_labels_are_trimmed_and_quoted_labels_keep_colons() -> None:
    text = '<fork>\n-   spaced   out  \n- "fix: the parser"\n</fork>'
    assert parse_fork_tag(text, 8) == ["spaced out", "fix: the parser"]


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("- [unclosed", "not valid YAML"),
        ("fix: the bug", "YAML mapping"),
        ("just text", "must hold a YAML list"),
        ("", "must hold a YAML list"),
        ("[]", "empty"),
        ("- 42", "Task 1 is a number"),
        ("- ok\n- true", "Task 2 is a boolean"),
        ("- ok\n- {a: b}", "Task 2 is a mapping"),
        ('- ok\n- "   "', "Task 2 is empty"),
        ("- " + "x" * 201, "201 characters"),
        ("".join(f"- t{i}\n" for i in range(4)), "more than the limit of 3"),
    ],
)
def test_bad_task_lists_say_what_is_wrong(body: str, problem: str) -> None:
    with pytest.raises(ForkSyntaxError) as caught:
        parse_fork_tag(f"<fork>\n{body}\n</fork>", 3)
    assert problem in str(caught.value)


def test_two_tags_or_an_unclosed_tag_are_errors() -> None:
    with pytest.raises(ForkSyntaxError, match="2 <fork> tags"):
        parse_fork_tag("<fork>\n- a\n</fork> and <fork>\n- b\n</fork>", 8)
    with pytest.raises(ForkSyntaxError, match="never closes"):
        parse_fork_tag("<fork>\n- a\n", 8)


def test_results_escape_labels_and_keep_bodies() -> None:
    message = compose_results(
        [
            TaskResult('Fix <a> & "b"', "s-1", True, "Body with <xml> & stuff"),
            TaskResult("Docs", "s-2", False, error="API error:\n  overloaded"),
        ]
    )
    assert message == (
        "<fork-results>\n"
        '<task label="Fix &lt;a&gt; &amp; &quot;b&quot;">\nBody with <xml> & stuff\n</task>\n'
        '<task label="Docs" error="API error: overloaded">\n</task>\n'
        "</fork-results>"
    )


def test_all_failed_says_so_first() -> None:
    message = compose_results(
        [TaskResult("a", "s-1", False, error="x"), TaskResult("b", "s-2", False, error="y")]
    )
    assert message.startswith("All 2 forks failed")
    assert message.count("<task ") == 2


def test_result_wire_leaves_out_a_missing_error() -> None:
    assert msgspec.to_builtins(TaskResult("a", "s-1", True, "t").wire()) == {
        "label": "a",
        "sessionId": "s-1",
        "ok": True,
    }
    assert msgspec.to_builtins(TaskResult("a", "s-1", False, error="e").wire())["error"] == "e"


def test_prompts() -> None:
    assert child_prompt("Write docs", ["Write docs"]) == "You were assigned 'Write docs'"
    assert "nothing was forked" in problem_message("bad YAML")


def test_a_child_is_told_its_siblings_tasks_and_to_keep_to_its_own() -> None:
    brief = child_prompt("Write docs", ["Fix bugs", "Write docs", "Add tests"])
    first, *rest = brief.split("\n")
    assert first == "You were assigned 'Write docs'"  # the seeds' contract, word for word
    body = "\n".join(rest)
    assert "- Fix bugs\n- Add tests" in body and "- Write docs" not in body
    assert "one of 3 forks" in body
    assert "Do only your own task" in body and "re-plan" in body


def test_fork_instructions() -> None:
    assert "nothing was forked" in problem_message("bad YAML")
    instructions = fork_instructions(5)
    assert "At most 5 labels" in instructions and "<fork-results>" in instructions
    assert "{max_children}" not in instructions
