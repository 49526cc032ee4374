"""Cache: how much of the parent's prompt-cache prefix a fork child's first model request
repeats, per setting of the fork (isolation, context mode, and any other fork parameter).

A child that re-reads its parent's context pays cache-read prices only for the part of its
first request that repeats the parent's request from the start (tools, system prompt,
messages): everything after the first byte that differs is written to the cache again, at more
than the full input price. This bench measures that part from what the children actually send.

One run per setting (the product of the ``--isolation``, ``--context`` and ``--vary`` values):
``python -m coven_ls`` on a fresh one-commit repository, driven by bench/common.py's LSP client,
with the bundled ``claude`` CLI against a scripted model served by this process (one prompt
cache for the run, as one API key has one). The parent's turn runs a Bash call and answers; then
``coven/fork`` with ``--children`` tasks and the setting's parameters; each child answers at
once; the parent answers the fork's results; LSP shutdown, and no process of the run is left.

From the scripted model's record (no timings, nothing asserted about speed):
    prefix    the tokens of the parent's last request before the fork up to its last
              cache_control breakpoint: what the cache holds of the parent;
    shared    how many of them the child's first request repeats from the start
              (coven_ls.testing.prompt_cache.shared_prefix_tokens; the same estimate of a token
              per four characters as the scripted model's usage);
    share     shared / prefix, per child, then min and mean per setting;
    charged   what the simulated cache charged the child's first request: tokens read, written,
              and paid in full (its ``usage``);
    differs   the child's first block that differs from the parent's request (``system.0``,
              ``messages.1.content.0``, …): where its prefix stops;
    read share  of the children's first prompts, the part read from the cache;
    $/child   a child's first prompt at the model's list prices (core/models.py).
And one timing: a fork's wall time, from ``coven/fork`` sent to ``forkFinished`` read, the
median of ``--repeat`` runs. With ``--vary NAME=...,off``, each setting's read share, cost per
child and fork wall time are printed as ratios against the same setting with ``NAME=off``,
measured in the same run. ``--dump DIR`` writes the parent's last request and each child's
first, per setting, to compare (core/fork/estimate.py says what they showed for the sandbox).

A setting is one more ``--vary name=v1,v2`` (a ``coven/fork`` parameter, e.g. a future
``childSandbox=auto,off``), or one more value of ``--isolation`` / ``--context``.

    python bench/cache.py [--children 2] [--isolation shared,worktree]
                          [--context inherit,transcript] [--vary NAME=V1,V2 ...]
                          [--repeat 1] [--dump DIR]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import EXIT_TIMEOUT, EventClient, run_dirs, spawn_server

from coven_ls.core.models import model_info
from coven_ls.testing.prompt_cache import first_difference, shared_prefix_tokens
from coven_ls.testing.scripted_model import ModelRequest, ScriptedModel, ToolUse
from tests.gitrepo import make_repo

PROMPT = "cache-bench: look around, then wait for the tasks."
LOOKED = "cache-bench: looked"  # what the parent's Bash call prints
ASSIGNED = "You were assigned '"
STEP_TIMEOUT = 180.0


def labels(n: int) -> list[str]:
    return [f"Task {k}" for k in range(1, n + 1)]


# --------------------------------------------------------------------------- the arithmetic


@dataclass(frozen=True)
class Share:
    """One child's first request against the parent's prefix."""

    child: str
    shared: int  # tokens of the parent's prefix the child repeats from the start
    prefix: int  # tokens of the parent's prefix (up to its last breakpoint)
    read: int = 0  # what the simulated cache charged the child's first request
    written: int = 0
    paid: int = 0
    diverges: str | None = None  # the child's first block that differs from the parent's
    model: str | None = None  # the model the request named (its prices)

    @property
    def ratio(self) -> float:
        return self.shared / self.prefix if self.prefix else float("nan")

    @property
    def cost(self) -> float:
        """What the first request's prompt cost at the model's list prices (USD)."""
        info = model_info(self.model)
        if info is None:
            return float("nan")
        spent = self.read * info.cache_read + self.written * info.cache_write
        return (spent + self.paid * info.input) / 1_000_000


def share_of(child: str, parent: dict[str, Any], first: ModelRequest) -> Share:
    shared, prefix = shared_prefix_tokens(parent, first.body)
    charge = first.cache
    return Share(
        child,
        shared,
        prefix,
        read=charge.cache_read_input_tokens if charge else 0,
        written=charge.cache_creation_input_tokens if charge else 0,
        paid=charge.input_tokens if charge else 0,
        diverges=first_difference(parent, first.body),
        model=str(first.body.get("model") or "") or None,
    )


@dataclass(frozen=True)
class Summary:
    setting: str
    children: int
    min_ratio: float
    mean_ratio: float
    prefix: int  # the parent's prefix (the same for every child of a run)
    read: int  # summed over the children's first requests
    written: int
    paid: int
    cost: float  # per child: its first request's prompt, at list prices (USD)
    seconds: float  # the median over runs of a fork's wall time, coven/fork to forkFinished

    @property
    def read_share(self) -> float:
        """Of the children's first prompts, the part read from the cache."""
        total = self.read + self.written + self.paid
        return self.read / total if total else float("nan")


def summarize(setting: str, shares: Sequence[Share], seconds: Sequence[float] = ()) -> Summary:
    """One setting's row: `shares` of one run's children (the first run's: every run of a
    setting sends the same), `seconds` each run's fork wall time."""
    ratios = [s.ratio for s in shares]
    wall = statistics.median(seconds) if seconds else float("nan")
    if not shares:
        return Summary(setting, 0, float("nan"), float("nan"), 0, 0, 0, 0, float("nan"), wall)
    return Summary(
        setting,
        len(shares),
        min(ratios),
        statistics.fmean(ratios),
        max(s.prefix for s in shares),
        sum(s.read for s in shares),
        sum(s.written for s in shares),
        sum(s.paid for s in shares),
        statistics.fmean(s.cost for s in shares),
        wall,
    )


def firsts_of_children(
    requests: Iterable[ModelRequest], tasks: Sequence[str]
) -> dict[str, ModelRequest]:
    """Each task's child's first request (by arrival): the first whose last user message
    carries the child's assignment."""
    out: dict[str, ModelRequest] = {}
    for req in sorted(requests, key=lambda r: r.time):
        for task in tasks:
            if task not in out and f"{ASSIGNED}{task}'" in req.last_user_text:
                out[task] = req
    return out


def settings(
    isolations: Sequence[str], contexts: Sequence[str], vary: Sequence[tuple[str, list[str]]]
) -> list[dict[str, str]]:
    """Every combination, as coven/fork parameters: one per row of the output."""
    names = ["isolation", "context", *(name for name, _ in vary)]
    values = [list(isolations), list(contexts), *(v for _, v in vary)]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*values)]


def setting_name(params: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


# --------------------------------------------------------------------------- one run


def scripted_model() -> ScriptedModel:
    model = ScriptedModel()
    model.on("<fork-results>", "Every task is done.")
    model.on(ASSIGNED, "Done.")
    model.on(LOOKED, "Looked around; ready for the tasks.")
    model.on(PROMPT, ToolUse("Bash", {"command": f"echo '{LOOKED}'"}), times=1)
    return model


def run(
    params: dict[str, str], n: int, claude: str, stderr: Any, dump: Path | None = None
) -> tuple[list[Share], float]:
    """The children's first requests against the parent's prefix, and the fork's wall time
    (coven/fork sent to forkFinished read)."""
    tasks = labels(n)
    with scripted_model() as model, run_dirs("cache-bench-", setting_name(params)) as dirs:
        env = dirs.environ(model)
        env.update(HOME=str(dirs.root), GIT_CONFIG_NOSYSTEM="1")
        make_repo(dirs.workspace, env=env)
        proc = spawn_server(dirs.workspace, env, stderr)
        client = EventClient(proc, timeout=STEP_TIMEOUT)
        try:
            client.initialize(
                dirs.workspace,
                {"claudePath": claude, "maxParallel": n, "stateDir": str(dirs.state)},
            )
            client.notify("initialized", {})
            sid = client.request("coven/startSession", {"prompt": PROMPT})["sessionId"]

            def on_parent(kind: str, after: int = 0) -> Callable[[dict[str, Any]], bool]:
                return lambda e: e["sessionId"] == sid and e["kind"] == kind and e["seq"] > after

            _, turn = client.wait_event(on_parent("turnResult"), "the parent's turn")
            if turn.get("isError"):
                raise RuntimeError(f"the parent's turn failed: {turn}")
            _, idle = client.wait_event(on_parent("status", turn["seq"]), "the parent idle")
            before = model.requests
            asked = time.monotonic()
            client.request("coven/fork", {"sessionId": sid, "tasks": tasks, **params})
            _, started = client.wait_event(on_parent("forkStarted", idle["seq"]), "forkStarted")
            for name in ("isolation", "context"):
                if name in params and started.get(name, params[name]) != params[name]:
                    print(f"  note: asked for {name}={params[name]}, ran {started.get(name)}")
            _, finished = client.wait_event(
                on_parent("forkFinished", started["seq"]), "forkFinished"
            )
            seconds = time.monotonic() - asked
            failed = [r for r in finished["results"] if not r["ok"]]
            if failed:
                raise RuntimeError(f"children failed: {failed}")
            client.wait_answer_to_fork(sid)
        finally:
            client.close(EXIT_TIMEOUT + 30)
    parent = [r for r in before if ASSIGNED not in r.last_user_text][-1]
    firsts = firsts_of_children(model.requests, tasks)
    if len(firsts) != n:
        raise RuntimeError(f"found the first requests of {sorted(firsts)} only, of {tasks}")
    if dump is not None:
        write_requests(dump / setting_name(params).replace(" ", "_"), parent, firsts)
    return [share_of(task, parent.body, firsts[task]) for task in tasks], seconds


def write_requests(folder: Path, parent: ModelRequest, firsts: dict[str, ModelRequest]) -> None:
    """The parent's last request and each child's first, as the CLIs sent them (to diff)."""
    folder.mkdir(parents=True, exist_ok=True)
    named = {"parent": parent, **{t.lower().replace(" ", "-"): r for t, r in firsts.items()}}
    for name, req in named.items():
        text = json.dumps(req.body, indent=1, sort_keys=True, ensure_ascii=False)
        (folder / f"{name}.json").write_text(text + "\n", encoding="utf-8")


# --------------------------------------------------------------------------- output


def print_table(summaries: Sequence[Summary]) -> None:
    width = max(len(s.setting) for s in summaries)
    print(
        f"{'setting':<{width}}  children  share min  share mean  parent prefix  "
        "read / written / paid (children's first requests)  read share  $/child  fork s"
    )
    for s in summaries:
        charged = f"{s.read:,} / {s.written:,} / {s.paid:,}"
        print(
            f"{s.setting:<{width}}  {s.children:>8}  {s.min_ratio:>9.1%}  {s.mean_ratio:>10.1%}  "
            f"{s.prefix:>13,}  {charged:<49}  {s.read_share:>10.1%}  {s.cost:>7.4f}  "
            f"{s.seconds:>6.1f}"
        )


def against(summaries: Sequence[Summary], vary: Sequence[tuple[str, list[str]]]) -> list[str]:
    """Each setting against the one like it but for a varied parameter's `off` value (in the
    same run of the bench): its read share, cost per child and fork wall time as ratios."""
    lines = []
    by_name = {s.setting: s for s in summaries}
    for name, values in vary:
        if "off" not in values:
            continue
        for s in summaries:
            params = dict(p.split("=", 1) for p in s.setting.split(" "))
            if params.get(name) in (None, "off"):
                continue
            base = by_name.get(setting_name({**params, name: "off"}))
            if base is None:
                continue
            lines.append(
                f"{s.setting} / {name}=off: read share {_ratio(s.read_share, base.read_share)}, "
                f"cost per child {_ratio(s.cost, base.cost)}, "
                f"fork wall time {_ratio(s.seconds, base.seconds)} "
                f"({s.seconds:.1f} s / {base.seconds:.1f} s, medians)"
            )
    return lines


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


def parse_vary(values: Sequence[str]) -> list[tuple[str, list[str]]]:
    out = []
    for value in values:
        name, sep, options = value.partition("=")
        if not sep or not name or not options:
            raise SystemExit(f"--vary takes NAME=V1,V2 (a coven/fork parameter), not {value!r}")
        out.append((name, options.split(",")))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--children", type=int, default=2)
    parser.add_argument("--isolation", default="shared,worktree")
    parser.add_argument("--context", default="inherit,transcript")
    parser.add_argument("--vary", action="append", default=[], metavar="NAME=V1,V2")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs per setting, for the fork's median wall time"
    )
    parser.add_argument("--claude", help="the claude CLI (default: the SDK's bundled one)")
    parser.add_argument(
        "--dump",
        type=Path,
        metavar="DIR",
        help="write the parent's last request and each child's first there, per setting",
    )
    args = parser.parse_args(argv)
    claude = args.claude
    if claude is None:
        import claude_agent_sdk

        claude = str(Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude")
    vary = parse_vary(args.vary)
    rows = settings(args.isolation.split(","), args.context.split(","), vary)
    summaries = []
    log = Path(os.environ.get("TMPDIR", "/tmp"), "cache-bench-stderr.log")
    with log.open("wb") as stderr:
        for params in rows:
            name = setting_name(params)
            print(f"running {name} ...", flush=True)
            shares, seconds = run(params, args.children, claude, stderr, args.dump)
            times = [seconds]
            for _ in range(args.repeat - 1):
                times.append(run(params, args.children, claude, stderr)[1])
            print(f"  fork wall time: {', '.join(f'{t:.1f} s' for t in times)}")
            for s in shares:
                print(
                    f"  {s.child}: {s.shared:,} of {s.prefix:,} tokens ({s.ratio:.1%}); "
                    f"charged read {s.read:,}, written {s.written:,}, paid {s.paid:,}; "
                    f"differs from {s.diverges or 'nowhere'}"
                )
            summaries.append(summarize(name, shares, times))
    print()
    print_table(summaries)
    ratios = against(summaries, vary)
    if ratios:
        print()
        print("\n".join(ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
