"""The fault suite's figures: one row per fault, from the fault tests themselves.

What is measured
    Every test that takes the ``fault`` fixture (tests/conftest.py) is run through pytest, in
    this process, each exactly as in the test suite: a real coven-ls server, the real ``claude``
    CLI, the scripted model, a real client. Each test marks when it injects its fault and when
    the session (or server) is usable again, and compares the events its client saw before the
    fault with what the server keeps after it. Per row:

    survived        the test passed: the server did what protocol.md says under that fault
    events lost     events a client was sent that the server no longer has (getEvents after
                    the fault, or after the restart); "-" where the test does not read them back
    processes left  processes still alive after the test's teardown whose environment carries
                    the test's temporary folder (every server, CLI and git it started has it):
                    orphans; zombies do not count
    recover s       fault injected -> usable again (the restart included for a killed server;
                    for a model fault, the whole turn that rides it out)

Usage: python bench/faults.py [--quick] [-k EXPR] [--basetemp DIR]
    --quick runs three of them (a CI test keeps the table from rotting); -k filters as pytest's.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The test files with fault tests (each a `fault` fixture user), and what each row is called.
FILES = [
    "tests/e2e/test_faults_e2e.py",
    "tests/e2e/test_failures_e2e.py",
    "tests/e2e/test_fork_e2e.py",
    "tests/e2e/test_kill_points_e2e.py",
    "tests/e2e/test_vanishing_client_e2e.py",
]
NAMES = {
    "test_a_full_disk_is_said_and_nothing_is_lost_once_there_is_room": "state dir: disk full",
    "test_a_read_only_state_dir_is_said_and_sessions_run_unsaved": "state dir: read-only",
    "test_a_stream_broken_off_midway_is_retried_and_the_answer_whole": "model: reset mid-stream",
    "test_an_error_mid_stream_is_asked_again_and_the_answer_whole": "model: HTTP {} mid-stream",
    "test_a_model_that_stops_sending_can_be_cancelled_and_the_session_goes_on": (
        "model: stalls mid-stream"
    ),
    "test_each_retry_is_an_event": "model: HTTP 529 twice",
    "test_a_killed_cli_is_named_by_its_signal": "CLI SIGKILLed mid-turn",
    "test_a_frozen_child_is_stopped_after_the_idle_limit_and_its_fork_ends": (
        "fork child SIGSTOPped"
    ),
    "test_a_permission_question_dies_with_the_editor_that_was_asked": (
        "client vanishes mid-permission"
    ),
    "test_a_fork_approval_outlives_the_editor_that_was_asked": "client vanishes mid-approval",
    "test_a_client_gone_before_its_get_events_answer_leaves_the_server_well": (
        "client vanishes mid-getEvents"
    ),
    "test_sigkill_at_each_point_of_a_fork": "server SIGKILLed: fork {}",
    "test_sigkill_at_a_failpoint": "server SIGKILLed: at {}",
}
QUICK = ["full_disk", "stream_broken_off", "killed_cli"]


@dataclass
class Row:
    name: str
    survived: bool = False
    lost: int | None = None
    left: int = 0
    recover: float | None = None


class FaultTable:
    """A pytest plugin: keeps only the fault tests, and a row of figures for each."""

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self._folders: dict[str, Path] = {}

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        items[:] = [i for i in items if "fault" in getattr(i, "fixturenames", ())]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        folder = getattr(item, "funcargs", {}).get("tmp_path")
        if folder is not None:
            self._folders[item.nodeid] = Path(folder)
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Iterator[None]:
        yield
        # Imported only now: pytest has by then imported the tests (rewriting their asserts).
        from tests.harness import processes_with_env

        folder = self._folders.get(item.nodeid)
        row = self._row(item)
        row.left = len(processes_with_env(str(folder))) if folder is not None else 0

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        row = next((r for r in self.rows if r.name == _name(report.nodeid)), None)
        if row is None:
            return
        if report.when == "call":
            row.survived = report.passed
        elif report.failed:
            row.survived = False
        # The fixture hands its figures in at its teardown.
        figures = cast("dict[str, Any] | None", dict(report.user_properties).get("fault"))
        if figures is not None:
            row.lost = figures["eventsLost"]
            row.recover = figures["recoverSeconds"]

    def _row(self, item: pytest.Item) -> Row:
        name = _name(item.nodeid)
        row = next((r for r in self.rows if r.name == name), None)
        if row is None:
            row = Row(name)
            self.rows.append(row)
        return row

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self._row(item)


def _name(nodeid: str) -> str:
    test = nodeid.split("::")[-1]
    base, _, param = test.partition("[")
    name = NAMES.get(base, base)
    return name.format(param.rstrip("]")) if "{}" in name else name


def print_table(rows: list[Row]) -> None:
    print(
        f"  {'fault':<40}{'survived':>9}{'events lost':>13}{'processes left':>16}{'recover s':>11}"
    )
    for r in rows:
        lost = "-" if r.lost is None else str(r.lost)
        recover = "-" if r.recover is None else f"{r.recover:.1f}"
        survived = "yes" if r.survived else "NO"
        print(f"  {r.name:<40}{survived:>9}{lost:>13}{r.left:>16}{recover:>11}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    parser.add_argument("-k", dest="keyword", help="a pytest -k expression")
    parser.add_argument("--basetemp", help="pytest's --basetemp (default: pytest's own)")
    args = parser.parse_args(argv)
    keyword = " or ".join(QUICK) if args.quick else args.keyword
    plugin = FaultTable()
    began = time.perf_counter()
    pytest_args = [*(str(ROOT / f) for f in FILES), "-q", "-p", "no:cacheprovider", "--no-header"]
    if keyword:
        pytest_args += ["-k", keyword]
    if args.basetemp:
        pytest_args += ["--basetemp", args.basetemp]
    os.chdir(ROOT)
    code = pytest.main(pytest_args, plugins=[plugin])
    print()
    print(f"fault suite: {len(plugin.rows)} faults, each through the real CLI and a real client")
    print_table(plugin.rows)
    whole = all(r.survived and not r.lost and r.left == 0 for r in plugin.rows)
    print(
        f"target every fault survived, nothing lost, nothing left running: "
        f"{'met' if whole and plugin.rows else 'NOT met'}"
    )
    print(f"(took {time.perf_counter() - began:.0f} s)")
    return 0 if code == 0 and whole else 1


if __name__ == "__main__":
    sys.exit(main())
