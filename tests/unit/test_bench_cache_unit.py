"""bench/cache.py's arithmetic: the share of the parent's prompt-cache prefix a child's first
request repeats, which request is each child's first, and the settings it runs."""

from __future__ import annotations

import importlib
import math
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from coven_ls.testing.prompt_cache import CacheCharge
from coven_ls.testing.request import parse_request

BENCH = Path(__file__).resolve().parents[2] / "bench"
CACHED = {"type": "ephemeral"}


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))  # the bench imports its `common` as a top module
    return importlib.import_module("cache")


def body(*texts: str, cached_last: bool = True) -> dict[str, Any]:
    """A request: a 400-character system prompt (100 tokens, a breakpoint), then user turns."""
    messages = []
    for i, t in enumerate(texts):
        block: dict[str, Any] = {"type": "text", "text": t}
        if cached_last and i == len(texts) - 1:
            block["cache_control"] = CACHED
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": [block]})
    system = [{"type": "text", "text": "s" * 400, "cache_control": CACHED}]
    return {"model": "m", "system": system, "messages": messages}


def test_a_child_repeating_the_whole_prefix_has_a_share_of_one(bench: ModuleType) -> None:
    parent = body("p" * 40, "a" * 40)  # prefix: 100 + 10 + 10 tokens
    child = parse_request("/v1/messages", body("p" * 40, "a" * 40, "You were assigned 'T'"), 0.0)
    child.cache = CacheCharge(7, cache_read_input_tokens=120, cache_creation_input_tokens=6)
    share = bench.share_of("T", parent, child)
    assert (share.shared, share.prefix, share.ratio) == (120, 120, 1.0)
    assert share.diverges == "messages.2.content.0"  # the child's own prompt
    assert (share.read, share.written, share.paid) == (120, 6, 7)


def test_a_child_diverging_after_the_system_prompt_shares_only_that(bench: ModuleType) -> None:
    parent = body("p" * 40, "a" * 40)
    child = parse_request("/v1/messages", body("q" * 40), 0.0)
    share = bench.share_of("T", parent, child)
    assert (share.shared, share.prefix) == (100, 120)
    assert share.diverges == "messages.0.content.0"
    assert share.ratio == pytest.approx(100 / 120)
    assert (share.read, share.written, share.paid) == (0, 0, 0)  # never charged: no record


def test_summaries_take_min_mean_and_sums(bench: ModuleType) -> None:
    shares = [
        bench.Share("A", 120, 120, read=120, written=6, paid=7),
        bench.Share("B", 60, 120, read=60, written=66, paid=7),
    ]
    s = bench.summarize("isolation=shared", shares)
    assert (s.children, s.min_ratio, s.mean_ratio) == (2, 0.5, 0.75)
    assert (s.prefix, s.read, s.written, s.paid) == (120, 180, 72, 14)
    empty = bench.summarize("x", [])
    assert empty.children == 0 and math.isnan(empty.mean_ratio)
    assert math.isnan(bench.Share("C", 0, 0).ratio)


def test_each_childs_first_request_is_found_by_its_assignment(bench: ModuleType) -> None:
    def req(text: str, at: float) -> Any:
        return parse_request("/v1/messages", body(text), at)

    later = req("You were assigned 'Task 1' again", 3.0)
    first = req("You were assigned 'Task 1'", 2.0)
    other = req("You were assigned 'Task 2'", 2.5)
    found = bench.firsts_of_children(
        [later, req("parent", 1.0), other, first], ["Task 1", "Task 2"]
    )
    assert found == {"Task 1": first, "Task 2": other}
    # 'Task 1' is not 'Task 10'.
    assert bench.firsts_of_children([req("You were assigned 'Task 10'", 1.0)], ["Task 1"]) == {}


def test_settings_are_every_combination_and_a_vary_is_one_more_parameter(
    bench: ModuleType,
) -> None:
    rows = bench.settings(["shared", "worktree"], ["inherit"], [("childSandbox", ["auto", "off"])])
    assert rows == [
        {"isolation": "shared", "context": "inherit", "childSandbox": "auto"},
        {"isolation": "shared", "context": "inherit", "childSandbox": "off"},
        {"isolation": "worktree", "context": "inherit", "childSandbox": "auto"},
        {"isolation": "worktree", "context": "inherit", "childSandbox": "off"},
    ]
    assert bench.setting_name(rows[0]) == "isolation=shared context=inherit childSandbox=auto"
    assert bench.parse_vary(["childSandbox=auto,off"]) == [("childSandbox", ["auto", "off"])]
    with pytest.raises(SystemExit, match="NAME=V1,V2"):
        bench.parse_vary(["childSandbox"])
