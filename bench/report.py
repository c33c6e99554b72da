"""docs/benchmarks.md and the PNG plots under docs/benchmarks/, from the results of
``bench/run.py`` (docs/benchmarks/results.json). Run alone to regenerate the page
without measuring again: ``.venv/bin/python bench/report.py``.

Hand-written analysis lives in docs/benchmarks/analysis.md and is included as is.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
DOCS = ROOT / "docs"
PLOTS = DOCS / "benchmarks"

BUDGET_B1_RATIO = 0.6  # issue 8
BUDGET_B1_RATIO_NEXT = 0.8  # issue 18
BUDGET_B1_PER_SECOND = 200.0  # issue 18, at 8 concurrent agents
BUDGET_B2_P50_MS = 25.0
BUDGET_B4_RATIO = 1.3
BUDGET_B5_P50_MS = 50.0  # one at a time (issue 8)
BUDGET_B5_BURST_P50_MS = 1000.0  # a burst of 1,000 (issue 18)
BUDGET_B1_OF_FLOOR = 0.10
BUDGET_B7_PER_SECOND = 300.0
BUDGET_SEAL_LAG_S = 2.0
BUDGET_B1_LOADED_RATIO = 0.9  # 200 decision rules (issue 28), 200 policies (issue 29)
BUDGET_POLICY_P50_MS = 1.0  # issue 29
BUDGET_B8_SECONDS = 60.0  # a backtest over 100,000 stored plans (issue 29)
BUDGET_B8_RSS_RATIO = 1.2  # peak memory at the largest history against the smallest


def percentiles(label: str, stats: dict) -> list[str]:
    """A table row: the label, then p50, p90, p99 and max of ``stats``."""
    return [label, *(fmt(stats[k]) for k in ("p50", "p90", "p99", "max"))]


def fmt(value, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}"


def mb(kb) -> str:
    return "–" if kb in (None, 0) else f"{kb / 1024:,.0f} MB"


def verdict(ok: bool | None) -> str:
    return "–" if ok is None else ("**met**" if ok else "**not met**")


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# --- plots ------------------------------------------------------------------------------


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 100, "font.size": 9})
    return plt


def _cdf(ax, values, label):
    values = sorted(values)
    if not values:
        return
    ys = [(i + 1) / len(values) for i in range(len(values))]
    ax.plot(values, ys, label=label)


def plots(r: dict) -> dict[str, str]:
    plt = _plt()
    out: dict[str, str] = {}

    def save(fig, name):
        fig.tight_layout()
        fig.savefig(PLOTS / name)
        plt.close(fig)
        out[name] = f"benchmarks/{name}"

    if "B1" in r:
        b = r["B1"]
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(8, 3))
        names = ["baseline", "POST /api/v1/plans"]
        a1.bar(
            names, [b["baseline"]["per_second"], b["submit"]["per_second"]], color=["#999", "#36c"]
        )
        a1.set_ylabel("requests/s")
        a1.set_title(f"B1 throughput (ratio {b['ratio']:.2f})")
        xs = range(2)
        a2.bar(
            [x - 0.2 for x in xs],
            [b["baseline"]["latency_ms"]["p50"], b["submit"]["latency_ms"]["p50"]],
            0.4,
            label="p50",
        )
        a2.bar(
            [x + 0.2 for x in xs],
            [b["baseline"]["latency_ms"]["p99"], b["submit"]["latency_ms"]["p99"]],
            0.4,
            label="p99",
        )
        a2.set_xticks(list(xs), names)
        a2.set_ylabel("ms")
        a2.set_title("B1 latency")
        a2.legend()
        save(fig, "b1-submit.png")
    if "B2" in r:
        b = r["B2"]
        fig, ax = plt.subplots(figsize=(6, 3))
        _cdf(ax, b.get("latencies", []), "approval commit → upstream receives the write")
        ax.axvline(BUDGET_B2_P50_MS, color="red", linestyle="--", label="p50 budget")
        ax.set_xlabel("ms")
        ax.set_ylabel("fraction of plans")
        ax.set_title("B2 decision to effect")
        ax.legend(fontsize=7)
        save(fig, "b2-decision-to-effect.png")
    if "B3" in r:
        runs = r["B3"]["runs"]
        fig, ax = plt.subplots(figsize=(5, 3))
        xs = [x["workers"] for x in runs]
        ax.plot(xs, [x["per_second"] for x in runs], "o-", label="measured")
        ax.plot(
            xs, [runs[0]["per_second"] * x / xs[0] for x in xs], "--", color="#999", label="linear"
        )
        ax.set_xticks(xs)
        ax.set_xlabel("worker processes (concurrency 1 each)")
        ax.set_ylabel("executions/s")
        ax.set_title("B3 executor throughput")
        ax.legend()
        save(fig, "b3-throughput.png")
    if "B4" in r:
        b = r["B4"]
        names = list(b["small"]["pages"])
        fig, ax = plt.subplots(figsize=(7, 3))
        xs = range(len(names))
        small = [b["small"]["pages"][n]["latency_ms"]["p50"] for n in names]
        large = [b["large"]["pages"][n]["latency_ms"]["p50"] for n in names]
        ax.bar([x - 0.2 for x in xs], small, 0.4, label=f"{b['small']['plans']:,} plans")
        ax.bar([x + 0.2 for x in xs], large, 0.4, label=f"{b['large']['plans']:,} plans")
        ax.set_xticks(list(xs), names)
        ax.set_ylabel("p50 ms")
        ax.set_title("B4 history")
        ax.legend()
        save(fig, "b4-history.png")
    if "B5" in r:
        b = r["B5"]
        fig, ax = plt.subplots(figsize=(6, 3))
        _cdf(ax, b["few"].get("wakes", []), f"{b['few']['waiters']} waiters, settled one by one")
        _cdf(ax, b["many"].get("wakes", []), f"{b['many']['waiters']} waiters")
        ax.axvline(BUDGET_B5_P50_MS, color="red", linestyle="--", label="p50 budget")
        ax.set_xlabel("ms from the decision's commit to the agent's answer")
        ax.set_ylabel("fraction of waiters")
        ax.set_title("B5 wake-up latency")
        ax.legend(fontsize=7)
        save(fig, "b5-waiting.png")
    if "B6" in r:
        b = r["B6"]
        rest = b["rest"]
        fig, ax = plt.subplots(figsize=(6, 3))
        labels = ["web (all processes)", "one worker"]
        at_rest = [rest["web_rss_kb"] / 1024, max(rest["worker_rss_kb"] or [0]) / 1024]
        loaded = [b.get("web_rss_peak_kb", 0) / 1024, b.get("worker_rss_peak_kb", 0) / 1024]
        xs = range(2)
        ax.bar([x - 0.2 for x in xs], at_rest, 0.4, label="at rest")
        ax.bar([x + 0.2 for x in xs], loaded, 0.4, label="under load (peak)")
        ax.set_xticks(list(xs), labels)
        ax.set_ylabel("RSS MB")
        ax.set_title("B6 footprint")
        ax.legend()
        save(fig, "b6-footprint.png")
    return out


# --- the page ---------------------------------------------------------------------------


def _profile_excerpt(path: str | None, lines: int = 18) -> str:
    if not path or not (ROOT / path).exists():
        return ""
    text = (ROOT / path).read_text().splitlines()
    start = next((i for i, line in enumerate(text) if line.lstrip().startswith("ncalls")), 0)
    body = text[start : start + lines + 1]
    return "```\n" + "\n".join(body) + "\n```"


def _b2_verification(b2: dict) -> str:
    """The sentence about the read-back that follows each write (absent in older results)."""
    if "verified" not in b2:
        return ""
    return (
        "\n\nThe demo's `update_contact_email` declares `check_with: get_contact`, so after the "
        "write the worker reads the contact back (outside any transaction) before it records the "
        f"outcome; verified: {b2['verified']}. The budget is on the write, which the read-back "
        "does not delay; the outcome rows show what it adds to an agent's wait.\n"
    )


def _b4_timing(b4: dict, sizes: dict) -> str:
    """How B4's latencies were taken: in alternating rounds against a copy of the short
    history (bench/run.py), or, in results from before that, one size after the other."""
    timed = b4.get("timed")
    if not timed:
        return f"({sizes['b4_repeat']} sequential requests each after a warm-up)"
    return (
        f"({sizes['b4_repeat']} requests each after {timed['warmup']} to warm up, in "
        f"{timed['interleaved_rounds']} rounds alternating between the two histories: the "
        "short one copied aside before the long one was seeded, served by a web server of "
        "its own, so both are timed at the same moments on a machine other work shares)"
    )


def markdown(r: dict, images: dict[str, str]) -> str:
    m = r["machine"]
    c = r["config"]
    sizes = c["sizes"]
    profiles = r.get("profiles", {})
    parts: list[str] = []
    quick = (
        "\n\n> **A quick run** (`--quick`: smaller sizes). Regenerate with `make bench` for "
        "the figures of record.\n"
        if r.get("quick")
        else ""
    )
    earlier = sorted(
        {
            (x.get("measured"), bool(x.get("measured_quick")))
            for k, x in r.items()
            if k.startswith("B") and isinstance(x, dict) and x.get("measured")
        }
        - {(r["when"], bool(r.get("quick")))}
    )
    for when, was_quick in earlier:
        names = [
            k
            for k, x in r.items()
            if k.startswith("B")
            and isinstance(x, dict)
            and (x.get("measured"), bool(x.get("measured_quick"))) == (when, was_quick)
        ]
        quick += (
            f"\n\n> {', '.join(names)}: measured in the run of {when}"
            f"{' (a quick run)' if was_quick else ''}; this run (`--only`) measured the "
            "others."
        )
    parts.append(
        f"""# Benchmarks

Issue 8: a gateway sits on the path of every agent action, so its overhead must stay
close to the minimum work it has to do, and its pages must stay fast as history grows.
Every figure below comes from real processes on loopback — `python -m config.web
--workers {c["web_workers"]}` (uvicorn processes), Celery workers, the demo upstream,
PostgreSQL and Redis — driven by a load generator in a process of its own
(`bench/load.py`). Absolute times on a shared machine drift, so each figure is set
against a **baseline measured in the same run**, and the budgets are ratios where the
issue allows.

Regenerate with `make bench` (about a quarter of an hour; `make bench BENCH_ARGS=--quick`
for a short run, `BENCH_HISTORY=100000` for a smaller B4 history). A scratch database next to
`DATABASE_URL` is created and dropped; Redis is `BENCH_REDIS_URL` (default DB 12) with a
queue of the run's own. The harness is `bench/run.py`, this page `bench/report.py`
(`.venv/bin/python bench/report.py` rewrites it from `docs/benchmarks/results.json`).{quick}

## This run

{
            table(
                ["", ""],
                [
                    ["date", r["when"]],
                    ["CPU", f"{m['cores']} cores, {m.get('cpu', '')}"],
                    ["memory", f"{m.get('memory_gb', '–')} GB"],
                    [
                        "load average at start (1/5/15 min)",
                        " / ".join(str(x) for x in m.get("loadavg_at_start", [])),
                    ],
                    ["Python", m["python"]],
                    ["PostgreSQL", m.get("postgresql", "–")],
                    ["Redis", m.get("redis", "–")],
                    ["platform", m.get("platform", "")],
                    ["web", f"python -m config.web, {c['web_workers']} uvicorn processes"],
                    [
                        "executors",
                        f"{c['celery_workers']} Celery worker processes, concurrency 1 each "
                        "(B3 varies this)",
                    ],
                    ["duration", f"{fmt(r.get('seconds', float('nan')), 0)} s"],
                ],
            )
        }

Settings as in production except where a figure needs otherwise: the per-agent rate limit
raised out of the way (`1000000/minute`, still counted in Redis), log level WARNING.
Database connections as docs/deployment.md advises: persistent everywhere
(`COUNTERSIGN_DB_CONN_MAX_AGE=60`), one per thread in the web processes (Django runs on
16 threads per process, `COUNTERSIGN_WEB_THREADS`; `--db-pool N` borrows from a pool of N
instead) and one per Celery worker process.
"""
    )

    # summary
    rows = []
    b1, b2, b3, b4, b5, b6 = (r.get(k) for k in ("B1", "B2", "B3", "B4", "B5", "B6"))
    b7 = r.get("B7")
    if b1 and b1.get("floor"):
        fl = b1["floor"]
        rows.append(
            [
                "B1 submit against the floor",
                f"{fmt(b1['submit']['per_second'])} plans/s",
                f"{fmt(fl['per_second'])}/s (lower of upstream GET "
                f"{fmt(fl['upstream_get_per_second'])}/s, PostgreSQL INSERT "
                f"{fmt(fl['pg_insert_per_second'])}/s)",
                fmt(b1["of_floor"], 2),
                f"≥ {BUDGET_B1_OF_FLOOR:g} of the floor",
                verdict(b1["of_floor"] >= BUDGET_B1_OF_FLOOR),
            ]
        )
    if b7:
        rows.append(
            [
                f"B7 {b7['decisions']:,} decisions",
                f"{fmt(b7['per_second'])} decisions/s, p50 {fmt(b7['latency_ms']['p50'])} ms",
                f"{b7['reviewers']} reviewers, {b7['web_workers']} web processes",
                "–",
                f"≥ {BUDGET_B7_PER_SECOND:g}/s",
                verdict(b7["per_second"] >= BUDGET_B7_PER_SECOND),
            ]
        )
    lags = [x["seal_lag"] for x in (b1, b7) if x and x.get("seal_lag")]
    if lags:
        worst = max(x["max_s"] for x in lags)
        rows.append(
            [
                "audit sealing lag",
                f"max {fmt(worst, 2)} s under load (B1, B7)",
                "–",
                "–",
                f"≤ {BUDGET_SEAL_LAG_S:g} s",
                verdict(worst <= BUDGET_SEAL_LAG_S),
            ]
        )
    if b1:
        rows.append(
            [
                "B1 submit",
                f"{fmt(b1['submit']['per_second'])} plans/s",
                f"{fmt(b1['baseline']['per_second'])} req/s (GET + INSERT)"
                + (
                    f"; the skeleton of a submission: {fmt(b1['skeleton_ratio'], 2)}"
                    if "skeleton_ratio" in b1
                    else ""
                ),
                fmt(b1["ratio"], 2),
                f"ratio ≥ {BUDGET_B1_RATIO} (issue 8), ≥ {BUDGET_B1_RATIO_NEXT} (issue 18)",
                verdict(b1["ratio"] >= BUDGET_B1_RATIO)
                + ", "
                + verdict(b1["ratio"] >= BUDGET_B1_RATIO_NEXT),
            ]
        )
        rows.append(
            [
                f"B1 submissions, {b1['concurrency']} agents",
                f"{fmt(b1['submit']['per_second'])} plans/s",
                "–",
                "–",
                f"≥ {BUDGET_B1_PER_SECOND:g}/s",
                verdict(b1["submit"]["per_second"] >= BUDGET_B1_PER_SECOND),
            ]
        )
    if b1 and "rules_ratio" in b1:
        for key, what in (("rules", "200 decision rules"), ("policies", "200 policies")):
            ratio = b1[f"{key}_ratio"]
            rows.append(
                [
                    f"B1 with {what}",
                    f"{fmt(b1[f'submit_{key}']['per_second'])} plans/s",
                    f"{fmt(b1['submit_required']['per_second'])} plans/s without them (the "
                    f"same requirement from one rule); {fmt(b1['submit']['per_second'])} "
                    "plans/s plain",
                    f"{fmt(ratio, 2)} ({fmt(b1[f'{key}_ratio_plain'], 2)} against plain)",
                    f"ratio ≥ {BUDGET_B1_LOADED_RATIO}",
                    verdict(ratio >= BUDGET_B1_LOADED_RATIO),
                ]
            )
    evaluation = (b1 or {}).get("policy_evaluation")
    if evaluation:
        sets = [k for k in evaluation if isinstance(evaluation[k], dict)]
        rows.append(
            [
                "policy evaluation, per plan",
                "; ".join(
                    f"{evaluation[k]['policies']} policies: p50 "
                    f"{fmt(evaluation[k]['ms']['p50'], 3)} ms, p90 "
                    f"{fmt(evaluation[k]['ms']['p90'], 3)} ms"
                    for k in sets
                ),
                "–",
                "–",
                f"p50 ≤ {BUDGET_POLICY_P50_MS:g} ms",
                verdict(all(evaluation[k]["ms"]["p50"] <= BUDGET_POLICY_P50_MS for k in sets)),
            ]
        )
    b8 = r.get("B8")
    if b8:
        small, large = b8["runs"][0], b8["runs"][-1]
        rows.append(
            [
                f"B8 backtest over {large['plans']:,} plans",
                f"{fmt(large['seconds'])} s, peak RSS {mb(large['peak_rss_kb'])}",
                f"{small['plans']:,} plans: {fmt(small['seconds'])} s, {mb(small['peak_rss_kb'])}",
                fmt(b8["rss_ratio"], 2),
                f"≤ {BUDGET_B8_SECONDS:g} s; memory ratio ≤ {BUDGET_B8_RSS_RATIO:g}",
                verdict(
                    large["seconds"] <= BUDGET_B8_SECONDS and b8["rss_ratio"] <= BUDGET_B8_RSS_RATIO
                ),
            ]
        )
    b9 = r.get("B9")
    if b9:
        rows.append(
            [
                "B9 submit through an MCP server (stdio)",
                f"{fmt(b9['submit']['per_second'])}/s; "
                f"{b9['processes_per_1000']:g} servers started per 1,000 previews",
                f"{fmt(b9['direct']['per_second'])}/s (official client, kept session)",
                fmt(b9["ratio"], 2),
                f"≥ {b9['budget_ratio']:g}; 0 started",
                verdict(b9["ratio"] >= b9["budget_ratio"] and b9["processes_started"] == 0),
            ]
        )
    if b2:
        rows.append(
            [
                "B2 decision to effect",
                f"p50 {fmt(b2['latency_ms']['p50'])} ms, p99 {fmt(b2['latency_ms']['p99'])} ms",
                f"p50 {fmt(b2['floor_ms']['p50'])} ms (GET + PATCH, direct)",
                fmt(b2["ratio"], 2),
                f"p50 ≤ {BUDGET_B2_P50_MS:g} ms",
                verdict(b2["latency_ms"]["p50"] <= BUDGET_B2_P50_MS),
            ]
        )
    if b3:
        runs = b3["runs"]
        rows.append(
            [
                "B3 executor throughput",
                ", ".join(f"{x['workers']}: {fmt(x['per_second'])}/s" for x in runs),
                f"{fmt(runs[0]['per_second'])}/s with {runs[0]['workers']} worker",
                ", ".join(fmt(x["ratio"], 2) for x in runs),
                "(scaling advice)",
                "–",
            ]
        )
    if b4:
        ratios = b4["ratio"]
        same = all(
            b4["small"]["pages"][n]["queries"] == b4["large"]["pages"][n]["queries"] for n in ratios
        )
        rows.append(
            [
                "B4 history",
                f"p50 at {b4['large']['plans']:,} plans",
                f"p50 at {b4['small']['plans']:,} plans",
                ", ".join(f"{fmt(v, 2)}" for v in ratios.values()),
                f"ratio ≤ {BUDGET_B4_RATIO}, same query counts",
                verdict(max(ratios.values()) <= BUDGET_B4_RATIO and same),
            ]
        )
    if b5:
        many = b5["many"]
        no_per_waiter = (
            many["threads_waiting"] - many["threads_before"] < many["waiters"] / 10
            and many["db_connections_waiting"] - many["db_connections_before"]
            < many["waiters"] / 10
        )
        rows.append(
            [
                f"B5 {many['waiters']:,} waiting agents",
                f"wake-up p50 {fmt(many['wake_ms']['p50'])} ms; "
                f"+{many['threads_waiting'] - many['threads_before']} threads, "
                f"+{many['db_connections_waiting'] - many['db_connections_before']} DB connections",
                f"wake-up p50 {fmt(b5['few']['wake_ms']['p50'])} ms "
                f"with {b5['few']['waiters']} waiters",
                fmt(b5["ratio"], 2),
                f"no thread/connection per waiter; p50 ≤ {BUDGET_B5_P50_MS:g} ms one at a "
                f"time, ≤ {BUDGET_B5_BURST_P50_MS / 1000:g} s in the burst",
                verdict(
                    no_per_waiter
                    and b5["few"]["wake_ms"]["p50"] <= BUDGET_B5_P50_MS
                    and many["wake_ms"]["p50"] <= BUDGET_B5_BURST_P50_MS
                ),
            ]
        )
    if b6 and b6.get("web_rss_peak_kb"):
        rows.append(
            [
                "B6 footprint",
                f"web {mb(b6.get('web_rss_peak_kb'))} under load",
                f"web {mb(b6['rest']['web_rss_kb'])} at rest",
                fmt(b6["web_rss_peak_kb"] / max(b6["rest"]["web_rss_kb"], 1), 2),
                "(reported)",
                "–",
            ]
        )
    parts.append(
        "## Budgets\n\n"
        + table(["scenario", "figure", "baseline (same run)", "ratio", "budget", "verdict"], rows)
    )

    counted = r.get("queries_per_call", {})
    queries_submit = (
        f" One submission makes {counted['submit']} SQL queries (the baseline: 1)."
        if "submit" in counted
        else ""
    )
    queries_execute = (
        f" One execution makes {counted['execute']} SQL queries." if "execute" in counted else ""
    )
    if b1:
        s, b = b1["submit"], b1["baseline"]
        parts.append(
            f"""## B1 submit

`POST /api/v1/plans` (`update_contact_email`: validate, read the contact with the read
credential, compute the preview and fingerprint, store plan and audit event) against the
**baseline endpoint** in the same server (`bench/baseline.py`, mounted only with
`COUNTERSIGN_BENCH=1` and never in production): parse the body, one GET of the contact
over a kept-alive connection, one INSERT. {b1["concurrency"]} concurrent clients,
{b1.get("alternations", 2)} alternating rounds of {b1["seconds"] / b1.get("alternations", 2):g}
s per endpoint after a warm-up; {sizes["b1_contacts"]} contacts in rotation.

{
                table(
                    ["endpoint", "requests", "per second", "p50 ms", "p90 ms", "p99 ms", "errors"],
                    [
                        [
                            name,
                            fmt(x["count"]),
                            fmt(x["per_second"]),
                            fmt(x["latency_ms"]["p50"]),
                            fmt(x["latency_ms"]["p90"]),
                            fmt(x["latency_ms"]["p99"]),
                            x["errors"] or "none",
                        ]
                        for name, x in (
                            ("baseline", b),
                            *((("skeleton", b1["skeleton"]),) if "skeleton" in b1 else ()),
                            ("POST /api/v1/plans", s),
                            *(
                                (
                                    ("… with one rule that holds", b1["submit_required"]),
                                    ("… with 200 decision rules", b1["submit_rules"]),
                                )
                                if "submit_rules" in b1
                                else ()
                            ),
                            *(
                                (("… with 200 policies", b1["submit_policies"]),)
                                if "submit_policies" in b1
                                else ()
                            ),
                        )
                    ],
                )
            }

Throughput ratio **{fmt(b1["ratio"], 2)}** (budget ≥ {BUDGET_B1_RATIO}; issue 18 asks
≥ {BUDGET_B1_RATIO_NEXT}).{queries_submit}{_skeleton_text(b1)}
{_floor_text(b1)}
{metrics_cost(b1)}
{_loaded_text(b1)}

![B1]({images.get("b1-submit.png", "")})
"""
        )
        if b1["ratio"] < BUDGET_B1_RATIO and profiles.get("submit"):
            parts.append(
                "Where a submission's time goes — `plan_submit` under cProfile in the bench "
                "process, same database and upstream "
                f"([full profile]({profiles['submit'].removeprefix('docs/')})):\n\n"
                + _profile_excerpt(profiles["submit"])
            )
    if b2:
        parts.append(
            f"""## B2 decision to effect

From the commit of the approval's transaction (taken by an `on_commit` hook registered
before the service's own, so before the wake-up is published) to the moment the demo
upstream receives the `PATCH` (its request log's receive time; one clock, one machine).
{b2["plans"]} plans approved one every {sizes["b2_gap"]:g} s, so the workers are idle:
this is latency, not queueing. The floor is the executor's unavoidable upstream work — the
re-read and the conditional write — done directly over a fresh connection.

{
                table(
                    ["", "p50 ms", "p90 ms", "p99 ms", "max ms"],
                    [
                        percentiles("commit → upstream receives the write", b2["latency_ms"]),
                        percentiles(
                            "… commit → a worker claims the plan", b2["commit_to_claim_ms"]
                        ),
                        percentiles(
                            "… claim → upstream receives the write", b2["claim_to_write_ms"]
                        ),
                        *(
                            [
                                percentiles(
                                    "commit → outcome recorded, after the verification read",
                                    b2["commit_to_outcome_ms"],
                                ),
                                percentiles(
                                    "… upstream receives the write → outcome recorded",
                                    b2["write_to_outcome_ms"],
                                ),
                            ]
                            if "commit_to_outcome_ms" in b2
                            else []
                        ),
                        percentiles("floor: GET + PATCH directly", b2["floor_ms"]),
                    ],
                )
            }

Executed {b2["executed"]} of {b2["plans"]}; final states {b2["statuses"]}. Budget p50 ≤
{BUDGET_B2_P50_MS:g} ms: {verdict(b2["latency_ms"]["p50"] <= BUDGET_B2_P50_MS)}.{queries_execute}{
                _b2_verification(b2)
            }

![B2]({images.get("b2-decision-to-effect.png", "")})
"""
        )
        if b2["latency_ms"]["p50"] > BUDGET_B2_P50_MS and profiles.get("execute"):
            parts.append(
                "Where an execution's time goes — `execution_run` under cProfile in the bench "
                f"process ([full profile]({profiles['execute'].removeprefix('docs/')})):\n\n"
                + _profile_excerpt(profiles["execute"])
            )
    if b3:
        parts.append(
            f"""## B3 executor throughput

{sizes["b3_plans"]} approved plans per run, their wake-ups published in one go; executions/s
from the first publish to the last plan finished. Each worker process runs one execution
at a time (`--concurrency=1`); the ratio is against one worker.

{
                table(
                    [
                        "worker processes",
                        "plans",
                        "seconds",
                        "executions/s",
                        "ratio to 1 worker",
                        "final states",
                    ],
                    [
                        [
                            x["workers"],
                            x["plans"],
                            fmt(x["seconds"], 2),
                            fmt(x["per_second"]),
                            fmt(x["ratio"], 2),
                            x["statuses"],
                        ]
                        for x in b3["runs"]
                    ],
                )
            }

![B3]({images.get("b3-throughput.png", "")})
"""
        )
    if b4:
        names = list(b4["ratio"])
        parts.append(
            f"""## B4 history

The queue page, a plan page and `GET /api/v1/plans/{{id}}` with {b4["small"]["plans"]:,}
plans in the database, then with {b4["large"]["plans"]:,} (settled history seeded in bulk
by `demo/history.py` with COPY, {b4.get("seeded_events_per_plan", 2)} audit event(s) per plan,
in {fmt(b4["large"].get("seed_seconds", float("nan")), 0)} s, then `VACUUM ANALYZE`, a
checkpoint and a wait for autovacuum to finish). The queue holds the same
{sizes["b4_queue"]} awaiting plans both times. Query counts are taken in the bench process
(Django test client, `CaptureQueriesContext`), latencies over HTTP from the load generator
{_b4_timing(b4, sizes)}.

{
                table(
                    [
                        "page",
                        f"queries ({b4['small']['plans']:,})",
                        f"queries ({b4['large']['plans']:,})",
                        f"p50 ms ({b4['small']['plans']:,})",
                        f"p50 ms ({b4['large']['plans']:,})",
                        f"p99 ms ({b4['large']['plans']:,})",
                        "ratio (p50)",
                    ],
                    [
                        [
                            n,
                            b4["small"]["pages"][n]["queries"],
                            b4["large"]["pages"][n]["queries"],
                            fmt(b4["small"]["pages"][n]["latency_ms"]["p50"]),
                            fmt(b4["large"]["pages"][n]["latency_ms"]["p50"]),
                            fmt(b4["large"]["pages"][n]["latency_ms"]["p99"]),
                            fmt(b4["ratio"][n], 2),
                        ]
                        for n in names
                    ],
                )
            }

![B4]({images.get("b4-history.png", "")})
"""
        )
    if b5:
        many, few = b5["many"], b5["few"]
        settled = (
            f"The {many['waiters']:,} decisions were committed over "
            f"{fmt(many['settle_seconds'], 1)} s ({fmt(many['settled_per_second'], 0)} a "
            "second). "
            if many.get("settle_seconds")
            else ""
        )
        parts.append(
            f"""## B5 waiting agents

{many["waiters"]:,} agents each hold `GET /api/v1/plans/{{id}}?wait=30` at once (one
connection each, from the load generator). While they wait, the web server's processes
(supervisor and workers, summed) are read from `/proc` and the database's connections from
`pg_stat_activity`; then every plan is settled (denied by a reviewer, 8 at a time, the
oldest wait first) and
each agent's answer is timed from the decision's commit. The baseline: {few["waiters"]}
waiters settled one at a time.

{
                table(
                    ["", "before", "while waiting", "difference"],
                    [
                        [
                            "web RSS",
                            mb(many["rss_before_kb"]),
                            mb(many["rss_waiting_kb"]),
                            mb(many["extra_rss_kb"]),
                        ],
                        [
                            "web threads",
                            many["threads_before"],
                            many["threads_waiting"],
                            many["threads_waiting"] - many["threads_before"],
                        ],
                        [
                            "database connections",
                            many["db_connections_before"],
                            many["db_connections_waiting"],
                            many["db_connections_waiting"] - many["db_connections_before"],
                        ],
                        [
                            "web CPU (% of one core)",
                            fmt(many["cpu_idle_percent"]),
                            fmt(many["cpu_waiting_percent"]),
                            fmt(many["cpu_waiting_percent"] - many["cpu_idle_percent"]),
                        ],
                    ],
                )
            }

{
                table(
                    [
                        "wake-up after the commit",
                        "woken",
                        "not woken",
                        "p50 ms",
                        "p90 ms",
                        "p99 ms",
                    ],
                    [
                        [
                            f"{few['waiters']} waiters, one at a time",
                            few["woken"],
                            few["not_woken"],
                            fmt(few["wake_ms"]["p50"]),
                            fmt(few["wake_ms"]["p90"]),
                            fmt(few["wake_ms"]["p99"]),
                        ],
                        [
                            f"{many['waiters']:,} waiters",
                            many["woken"],
                            many["not_woken"],
                            fmt(many["wake_ms"]["p50"]),
                            fmt(many["wake_ms"]["p90"]),
                            fmt(many["wake_ms"]["p99"]),
                        ],
                    ],
                )
            }

{settled}Answers: {many.get("answers", "–")}; agents whose wait ended without a change and
asked again (as an agent does): {many.get("asked_again", "–")}.{b5.get("note", "")}

![B5]({images.get("b5-waiting.png", "")})
"""
        )
    if b6:
        rest = b6["rest"]
        after = b6.get("after", rest)
        rows = [
            [
                "web: all processes (supervisor + workers)",
                rest["web_processes"],
                mb(rest["web_rss_kb"]),
                mb(b6.get("web_rss_peak_kb")),
                mb(after["web_rss_kb"]),
            ],
        ]
        for i, kb in enumerate(rest["worker_rss_kb"]):
            rows.append(
                [
                    f"Celery worker {i + 1} (main + pool)",
                    rest["worker_processes"][i],
                    mb(kb),
                    mb(b6.get("worker_rss_peak_kb")) if i == 0 else "",
                    mb(after["worker_rss_kb"][i]) if i < len(after["worker_rss_kb"]) else "",
                ]
            )
        parts.append(
            f"""## B6 footprint

Resident memory (`VmRSS` from `/proc/<pid>/status`, summed over each process tree this run
started; pages shared after fork count once per process, so sums overstate). At rest is
right after start; under load is the peak sampled during B1 (web) and B3 (one worker);
after is at the end of the run.

{table(["processes", "count", "at rest", "under load (peak)", "after the run"], rows)}

![B6]({images.get("b6-footprint.png", "")})
"""
        )
    if b7:
        lag = b7.get("seal_lag", {})
        parts.append(
            f"""## B7 decisions per second

{b7["decisions"]:,} plans awaiting approval are approved over HTTP by {b7["reviewers"]}
reviewers at once, each with a session of its own posting the review page's form
(`POST /plans/<id>/decide`, fingerprint and CSRF token as a browser sends them) one plan
after the other, against {b7["web_workers"]} web processes. The Celery workers
execute the approved plans meanwhile, and the sealer (a thread of each worker, by lease) signs
checkpoints of the audit trail meanwhile. Every decision writes its audit events without
waiting for any other writer (docs/security.md, *Audit trail*).

{
                table(
                    ["decisions", "per second", "p50 ms", "p90 ms", "p99 ms", "answers"],
                    [
                        [
                            f"{b7['decided']:,} of {b7['decisions']:,}",
                            fmt(b7["per_second"]),
                            fmt(b7["latency_ms"]["p50"]),
                            fmt(b7["latency_ms"]["p90"]),
                            fmt(b7["latency_ms"]["p99"]),
                            b7["http"],
                        ]
                    ],
                )
            }

Outcomes once executed: {b7.get("outcomes", {})}. The oldest unsealed audit event, sampled
every 0.25 s during the run: p50 {fmt(lag.get("p50_s", 0), 2)} s, max
{fmt(lag.get("max_s", 0), 2)} s ({lag.get("samples", 0)} samples; budget
≤ {BUDGET_SEAL_LAG_S:g} s).
"""
        )
    if b8:
        parts.append(_b8_text(b8))
    if r.get("B9"):
        parts.append(_b9_text(r["B9"]))
    from bench.cpu import report_section

    parts.append(report_section(r))
    analysis = PLOTS / "analysis.md"
    if analysis.exists():
        parts.append(analysis.read_text().strip())
    if profiles:
        parts.append(
            "## Profiles\n\n"
            + "\n".join(f"- [{k}]({v.removeprefix('docs/')})" for k, v in profiles.items())
            + "\n\n(cProfile in the bench process over the same database and upstream: the "
            "service code of the web and worker paths without HTTP or Celery around it.)"
        )
    return _wrapped("\n\n".join(p.strip() for p in parts)) + "\n"


def _skeleton_text(b1: dict) -> str:
    if "skeleton" not in b1:
        return ""
    return f"""

**The skeleton** (`POST /bench/baseline/skeleton`, the same file) adds to the baseline, in
plain SQL and with nothing checked, the other round trips a submission makes and no
implementation of the guarantees can leave out: the rate-limit count in Redis, the
catalog generation read (what makes a revocation apply to the next request), and one
transaction with the repeat check and two rows, the plan and its audit event, around a
hashed canonical document. It ran at **{fmt(b1["skeleton_ratio"], 2)}** of the baseline:
the most any submission could reach here. What separates the submission from the
skeleton is the product's own Python (validation, the read client, the ORM, the
fingerprint's canonical JSON, the audit record, the schema of the answer)."""


def _loaded_text(b1: dict) -> str:
    """B1 with 200 decision rules and with 200 policies, and the engine's own time."""
    if "rules_ratio" not in b1:
        return ""
    applied = b1.get("applied", {})
    rules = ", ".join(applied.get("rules", {}).get("requirement_rules", [])) or "–"
    policies = ", ".join(applied.get("policies", {}).get("decided_by", [])) or "–"
    text = f"""
**With 200 decision rules, with 200 policies.** Three more rounds alternate with the ones
above (so drift on the machine hits them alike), each loading its sections through
`load_catalog` before it and the demo's own back after it (`bench/policies.py`): 200
decision rules beside the demo's two; 200 policies beside the demo's three; and, to
compare them with, one rule. Every one of the 200 is written for B1's action and compares
something a submission has to decide. Of the rules, 195 compare the contact's workspace
with another one (or several) or the new address with blocked ones and do not hold; 5
hold (the blue workspace) and ask for one support lead. The policies are all scoped to
the action: 50 forbids on another workspace, 50 `@require` on a partner's domain, 50
forbids on the agent's daily rate and 45 `@approve` on a trusted domain, none of which
holds, and 5 `@require("support-leads")` that hold. On a plan of the rules' round the
rules that applied were {rules}; on one of the policies' round the policies that decided
were {policies}.

The 5 that hold give the plans a requirement that plain B1's plans do not have, and a
plan with one costs more to submit whatever asks for it: the submission checks that
someone active can decide it and records the group. The one-rule round asks the same of
the same plans, without the 200: against it, the 200 rules ran at
**{fmt(b1["rules_ratio"], 2)}** and the 200 policies at **{fmt(b1["policies_ratio"], 2)}**
(budget ≥ {BUDGET_B1_LOADED_RATIO}). Against plain B1: {fmt(b1["rules_ratio_plain"], 2)} and
{fmt(b1["policies_ratio_plain"], 2)}; the one rule alone, {fmt(b1["required_ratio"], 2)}.
{_round_ratios(b1)}"""
    evaluation = b1.get("policy_evaluation")
    if evaluation:
        sets = [k for k in evaluation if isinstance(evaluation[k], dict)]
        rows = [
            [
                k,
                evaluation[k]["policies"],
                fmt(evaluation[k]["ms"]["p50"], 3),
                fmt(evaluation[k]["ms"]["p90"], 3),
                fmt(evaluation[k]["ms"]["p99"], 3),
                fmt(evaluation[k]["batch_ms_per_plan"], 3),
                ", ".join(f"{o} {n:,}" for o, n in evaluation[k]["outcomes"].items()),
            ]
            for k in sets
        ]
        text += f"""

**The policy engine alone**: `policy_evaluate` timed in the bench process over
{evaluation["plans"]:,} plans of B1's kind (each a different contact and address, half
within the contact's domain, one in ten a VIP), one plan at a time; and
`policy_evaluate_batch`, which the backtest calls, over pages of 500 (budget p50 ≤
{BUDGET_POLICY_P50_MS:g} ms per plan).

{
            table(
                [
                    "policy set",
                    "policies",
                    "p50 ms",
                    "p90 ms",
                    "p99 ms",
                    "batched, ms per plan",
                    "outcomes",
                ],
                rows,
            )
        }"""
    return text


def _round_ratios(b1: dict) -> str:
    """The same ratios round by round (one round of each, in turn), when recorded: how
    far the machine's drift moves them."""
    rounds = {
        k: b1[k].get("rounds_per_second")
        for k in ("submit_required", "submit_rules", "submit_policies")
    }
    if not all(rounds.values()):
        return ""
    pairs = {
        what: [
            fmt(x / y, 2) if y else "–"
            for x, y in zip(rounds[key], rounds["submit_required"], strict=False)
        ]
        for key, what in (("submit_rules", "rules"), ("submit_policies", "policies"))
    }
    return (
        f"Round by round, against the one-rule round just before: rules "
        f"{', '.join(pairs['rules'])}; policies {', '.join(pairs['policies'])}."
    )


def _b8_text(b8: dict) -> str:
    rows = [
        [
            f"{x['plans']:,}",
            fmt(x["seconds"], 1),
            fmt(x["replay_seconds"], 1),
            fmt(x["per_second"], 0),
            f"{x['pages']:,} of {x['page_size']:,}",
            mb(x["peak_rss_kb"]),
            f"{x['approve_disagreements']:,} / {x['refuse_disagreements']:,} / "
            f"{x['requirement_changes']:,}",
        ]
        for x in b8["runs"]
    ]
    large = b8["runs"][-1]
    return f"""## B8 backtest

`manage.py policy_backtest` with the demo's three policies as the draft
(`demo/policies/`), over stored histories of {" and ".join(f"{x['plans']:,}" for x in b8["runs"])}
plans, each in a window of its own at the same {fmt(b8["plans_per_day"], 0)} plans a day
(seeded in bulk by `demo/history.py`, cloned in turn from seven plans of three actions that
the draft approves, refuses, sends to a billing approver or to people as before, with the
settled statuses of B4's history; none recorded a rate, so every rate is counted from
history, the worst case). The command runs in a process of its own; its wall time includes
starting Django and checking the draft, and its peak resident memory is `ru_maxrss` from
`wait4`. Memory must not grow with the history: the replay holds one page of plans, the
report's counters and its bounded lists, and one day of plans per agent and action for the
rates.

{
        table(
            [
                "plans",
                "wall s",
                "replay s",
                "plans/s",
                "pages",
                "peak RSS",
                "would approve / refuse / requirement changes",
            ],
            rows,
        )
    }

{large["plans"]:,} plans in **{fmt(large["seconds"], 1)} s** (budget ≤ {BUDGET_B8_SECONDS:g} s);
peak memory at the largest history against the smallest: **{fmt(b8["rss_ratio"], 2)}**
(budget ≤ {BUDGET_B8_RSS_RATIO:g}). The draft would have approved {fmt(large["draft"]["approve"])},
refused {fmt(large["draft"]["refuse"])} and sent {fmt(large["draft"]["review"])} to people.
{_b8_refused_text(b8)}"""


def _b9_text(b9: dict) -> str:
    rows = [
        [
            "submit (paired read through the kept session)",
            f"{b9['submit']['count']:,}",
            fmt(b9["submit"]["per_second"]),
            fmt(b9["submit"]["p50_ms"]),
            ", ".join(f"{k}: {v}" for k, v in b9["submit"]["errors"].items()) or "none",
        ],
        [
            "the same submission on the demo's HTTP upstream",
            f"{b9['http']['count']:,}" if "http" in b9 else "–",
            fmt(b9["http"]["per_second"]) if "http" in b9 else "–",
            fmt(b9["http"]["p50_ms"]) if "http" in b9 else "–",
            ", ".join(f"{k}: {v}" for k, v in b9.get("http", {}).get("errors", {}).items())
            or "none",
        ],
        [
            "direct MCP client, read_text_file",
            f"{b9['direct']['count']:,}",
            fmt(b9["direct"]["per_second"]),
            fmt(b9["direct"]["p50_ms"]),
            ", ".join(f"{k}: {v}" for k, v in b9["direct"]["errors"].items()) or "none",
        ],
    ]
    return f"""## B9 submit through an MCP server

A plan on the real filesystem MCP server over stdio, previewed by its paired read
(`read_text_file`, bench/mcp_upstream.py), submitted by {b9["concurrency"]} agents, against the
official MCP client calling the same tool on one kept session, alternating, in the same run.

{table(["", "calls", "per second", "p50 ms", "errors"], rows)}

Ratio **{fmt(b9["ratio"], 2)}** (budget ≥ {b9["budget_ratio"]:g}); against the same
submission on an HTTP upstream, {fmt(b9.get("of_http", 0), 2)}. Server processes the web
processes started after the warm-up: **{b9["processes_started"]}** over
{b9["previews_after_warmup"]:,} previews ({b9["processes_per_1000"]:g} per 1,000; must be 0).
"""


def _b8_refused_text(b8: dict) -> str:
    """The refused submissions each history held beside its plans (a share of them), and
    what the draft would let through; runs recorded before they were kept have none."""
    large = b8["runs"][-1]
    if "refused_read" not in large:
        return ""
    share = b8.get("refused_share")
    return (
        f"\nEach history also holds refused submissions"
        f"{f' ({share:.0%} beside its plans)' if share else ''}, replayed with the plans: "
        f"{fmt(large['refused_read'])} at the largest, of which the draft would let "
        f"{fmt(large.get('refused_let_through', 0))} through.\n"
    )


def _floor_text(b1: dict) -> str:
    fl = b1.get("floor")
    if not fl:
        return ""
    lag = b1.get("seal_lag", {})
    return f"""
**Against the floor.** Measured right after, {fl["concurrency"]} clients each: the demo
upstream answers {fmt(fl["upstream_get_per_second"])} `GET /contacts/<id>` per second (the
read a preview makes), PostgreSQL commits {fmt(fl["pg_insert_per_second"])} single-row
INSERTs per second. A submission does at least one of each, so the lower,
{fmt(fl["per_second"])}/s, is a ceiling: submissions ran at **{fmt(b1["of_floor"], 2)}** of
it (budget ≥ {BUDGET_B1_OF_FLOOR:g}). Oldest unsealed audit event during B1: p50
{fmt(lag.get("p50_s", 0), 2)} s, max {fmt(lag.get("max_s", 0), 2)} s.
"""


def _wrapped(text: str) -> str:
    """Prose re-wrapped to 88 columns (the substitutions leave ragged lines); tables,
    headings, code, images and quotes as they are."""
    from bench.reliability import rewrap as _rewrap

    blocks, code = [], False
    for block in text.split("\n\n"):
        keep = code or block.startswith(("```", "!", ">", "|", "#", "- ["))
        if block.count("```") % 2:
            code = not code
        blocks.append(block if keep else _rewrap(block))
    return "\n\n".join(blocks)


def metrics_cost(b1: dict) -> str:
    """B1's sentence on what the metrics cost (runs recorded before they existed: none)."""
    m = b1.get("metrics")
    if not m:
        return ""
    share = m.get("share_of_submit_p50")
    return (
        f"The submissions ran with the metrics in multiprocess mode, as in production: the"
        f" counts and the JSON log line of one submission take {fmt(m['per_submit_us'], 1)} µs"
        f" ({fmt(share * 100, 3) if share is not None else '–'} % of the p50); one scrape of"
        f" `/metrics` takes {fmt(m['scrape_ms']['p50'], 1)} ms (p50, {fmt(m['scrape_bytes'])}"
        f" bytes)."
    )


def write_report(results_path: Path | None = None) -> Path:
    results_path = results_path or PLOTS / "results.json"
    r = json.loads(results_path.read_text())
    PLOTS.mkdir(parents=True, exist_ok=True)
    images = plots(r)
    out = DOCS / "benchmarks.md"
    out.write_text(markdown(r, images))
    print(f"report: {out.relative_to(ROOT)} and {len(images)} plots in docs/benchmarks/")
    return out


if __name__ == "__main__":
    write_report(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
