"""bench/faults.py, in its quick mode: its table has a row of measured figures per fault."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="its disk-full fault mounts a tmpfs: root only")
def test_the_fault_table_has_a_measured_row_per_fault(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "bench/faults.py", "--quick", "--basetemp", str(tmp_path / "runs")],
        cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = {
        m["name"].strip(): m.groupdict()
        for m in re.finditer(
            r"^  (?P<name>.{40})(?P<survived>\s*\S+)\s+(?P<lost>\S+)\s+(?P<left>\d+)\s+"
            r"(?P<recover>[\d.]+)$",
            run.stdout,
            re.MULTILINE,
        )
    }
    assert set(rows) == {
        "state dir: disk full",
        "model: reset mid-stream",
        "CLI SIGKILLed mid-turn",
    }
    for row in rows.values():
        assert row["survived"].strip() == "yes" and row["lost"] == "0" and row["left"] == "0"
        assert 0 <= float(row["recover"]) < 120
    assert "target every fault survived, nothing lost, nothing left running: met" in run.stdout
