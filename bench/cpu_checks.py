"""Checks of the "CPU per plan" bench (bench/cpu.py, bench/spy.py), run one per process
by tests/test_bench_cpu.py (tests and benchmarks do not import each other): the /proc
meter against real processes that burn CPU, the py-spy folding against a raw file of
py-spy's own format, and the before/after bookkeeping of results.json.

    python -m bench.cpu_checks NAME [SCRATCH_DIR]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import cpu, spy  # noqa: E402

BURN = "import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass\n"


def burner(seconds: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", BURN.format(seconds=seconds)])


def check_meter_counts_a_process_that_starts_and_one_that_exits_in_the_window() -> None:
    pids: list[int] = []
    meter = cpu.Meter({"group": lambda: list(pids)}, every=0.05)
    meter.start()
    first = burner(0.4)  # appears after start: counted from zero
    pids.append(first.pid)
    first.wait(30)
    time.sleep(0.1)  # gone before stop: counted up to its last reading
    got = meter.stop()
    assert 0.25 <= got["group"] <= 1.0, got
    assert got["wall"] >= 0.4


def check_meter_counts_only_the_window_for_a_process_running_before() -> None:
    proc = burner(1.2)
    try:
        time.sleep(0.5)  # it has burned ~0.5 s before the window opens
        meter = cpu.Meter({"group": lambda: [proc.pid]}, every=0.05)
        meter.start()
        time.sleep(0.2)
        got = meter.stop()
    finally:
        proc.wait(30)
    assert got["group"] <= 0.45, got


def check_net_and_per_plan() -> None:
    seconds = {"web": 1.0, "workers": 2.0, "postgresql": 0.5, "redis": 0.1, "wall": 10.0}
    net = cpu.net_of(seconds, {"web": 10.0, "workers": 50.0, "postgresql": 0.0, "redis": 20.0})
    assert net == {"web": 0.9, "workers": 1.5, "postgresql": 0.5, "redis": 0.0}
    ms = cpu.per_plan({**net, "wall": 10.0}, 100)
    assert round(ms["total"], 6) == 29.0


def check_fold_shortens_paths_and_leaves_out_idle_samples(tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    raw = tmp_path / "raw.txt"
    site = "/opt/env/lib/python3.13/site-packages"
    raw.write_text(
        'process 12:"python -c spawn_main(a=1; b=2)";'
        f"handle (/usr/lib/python3.13/threading.py:10);"
        f"plan_submit ({root}/approvals/services/submission.py:40);"
        f"execute_sql ({site}/django/db/models/sql/compiler.py:1500) 30\n"
        f'process 12:"python";plan_submit ({root}/approvals/services/submission.py:41) 10\n'
        f'process 12:"python";run (/usr/lib/python3.13/asyncio/runners.py:1);'
        f"sleep (/usr/lib/python3.13/asyncio/tasks.py:5) 60\n"
        "garbage line\n"
    )
    text = spy.summarize([raw], "web", 2, root, rate=100)
    assert "40 samples, after 60 taken while the process waited" in text
    assert "100.0%  plan_submit (approvals/services/submission.py)" in text
    assert "75.0%  execute_sql (django/db/models/sql/compiler.py)" in text
    assert str(tmp_path) not in text and "site-packages" not in text
    assert "spawn_main" not in text


def measured(when: str, total: float) -> dict:
    ms = {"web": total, "workers": 0.0, "postgresql": 0.0, "redis": 0.0, "total": total}
    return {
        "batch": 10,
        "idle_ms_per_second": {},
        "paths": {
            "submit": {"ms_per_plan": ms, "queries_per_step": {"submit": 9}, "per_second": total}
        },
    }


def check_first_run_is_kept_as_before_and_later_runs_fill_after(tmp_path: Path) -> None:
    results = {"when": "day 1"}
    cpu.record(results, measured("day 1", 20.0))
    assert results[cpu.BEFORE_KEY]["measured"] == "day 1"
    section = cpu.report_section(results)
    assert "| submit | 20.0 | 0.0 | 0.0 | 0.0 | 20.0 | submit 9 | 20.0 | – | 20 |" in section

    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    later = {"when": "day 2", **cpu.carried(path, measuring=True)}
    assert cpu.RESULT_KEY not in later
    cpu.record(later, measured("day 2", 15.0))
    later[cpu.RESULT_KEY]["paths"]["submit"]["queries_per_step"] = {"submit": 8}
    assert later[cpu.BEFORE_KEY]["measured"] == "day 1"
    section = cpu.report_section(later)
    assert (
        "| submit | 15.0 | 0.0 | 0.0 | 0.0 | 15.0 | submit 8 (before 9) | 20.0 | 15.0 | 15 |"
        in section
    )

    # A run that does not measure CPU keeps both as they were.
    path.write_text(json.dumps(later))
    other = cpu.carried(path, measuring=False)
    assert other[cpu.RESULT_KEY]["measured"] == "day 2"
    assert other[cpu.BEFORE_KEY]["measured"] == "day 1"


CHECKS = {
    name.removeprefix("check_"): fn for name, fn in globals().items() if name.startswith("check_")
}


def main(argv: list[str]) -> int:
    check = CHECKS[argv[0]]
    if "tmp_path" in check.__code__.co_varnames[: check.__code__.co_argcount]:
        with tempfile.TemporaryDirectory() as scratch:
            check(Path(scratch))
    else:
        check()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
