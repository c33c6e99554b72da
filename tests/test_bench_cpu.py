"""The "CPU per plan" bench (bench/cpu.py, bench/spy.py), checked by bench/cpu_checks.py in
a process of its own (tests and benchmarks do not import each other): the /proc meter
against real processes that burn CPU, the py-spy folding against a raw file of py-spy's
own format, and the before/after bookkeeping of results.json."""

from __future__ import annotations

import subprocess
import sys

import pytest

from demo.processes import ROOT

CHECKS = [
    "meter_counts_a_process_that_starts_and_one_that_exits_in_the_window",
    "meter_counts_only_the_window_for_a_process_running_before",
    "net_and_per_plan",
    "fold_shortens_paths_and_leaves_out_idle_samples",
    "first_run_is_kept_as_before_and_later_runs_fill_after",
]


@pytest.mark.parametrize("check", CHECKS)
def test_bench_cpu(check: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.cpu_checks", check],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
