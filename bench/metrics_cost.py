"""What the metrics and the log context cost one submission, measured in a process of its
own with prometheus-client in multiprocess mode (as production runs it): the three
counts a submission makes (proposed, submit latency, the preview's upstream read), the
context bound three times, and its one INFO line formatted as JSON. ``bench/run.py``
runs it after B1 and sets ``PROMETHEUS_MULTIPROC_DIR`` to a scratch directory.

Prints one JSON object: microseconds per submission for the counts and for the line.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ROUNDS = 20_000


def main() -> int:
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        raise SystemExit("set PROMETHEUS_MULTIPROC_DIR")
    from actions.lib import logcontext, metrics

    proposed = metrics.PLANS_PROPOSED.labels(
        action="update_contact_email", consequence_class="reversible"
    )
    began = time.perf_counter()
    for _ in range(ROUNDS):
        # As plan_submit and the read client do: labels looked up each time.
        metrics.PLANS_PROPOSED.labels(
            action="update_contact_email", consequence_class="reversible"
        ).inc()
        metrics.SUBMIT_LATENCY.labels(result="created").observe(0.02)
        metrics.UPSTREAM_REQUESTS.labels(connector="demo", role="read", status_class="2xx").inc()
    counts_us = (time.perf_counter() - began) / ROUNDS * 1e6
    assert proposed._value.get() == ROUNDS  # the counts did land in the mmap files

    formatter, context = logcontext.JsonFormatter(), logcontext.ContextFilter()
    began = time.perf_counter()
    for i in range(ROUNDS):
        token = logcontext.bind(correlation_id="c", agent="a", action="update_contact_email")
        logcontext.bind(plan_id=str(i))
        record = logging.LogRecord(
            "approvals.services", logging.INFO, __file__, 1, "plan %s proposed", (i,), None
        )
        context.filter(record)
        formatter.format(record)
        logcontext.reset(token)
    line_us = (time.perf_counter() - began) / ROUNDS * 1e6
    print(json.dumps({"counts_us": counts_us, "json_line_us": line_us, "rounds": ROUNDS}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
