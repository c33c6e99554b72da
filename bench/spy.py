"""Folds ``py-spy record --format raw`` output (one line per distinct stack:
``frame;frame;... count``) into the text summaries of ``docs/benchmarks/profile-cpu-*``:
the share of samples under each function (inclusive), the functions the samples were in
(self), and the shares of the project's own entry points.

Frames name files by where they were on the machine that ran; only the part after
``site-packages/``, the checkout's own path or ``pythonX.Y/`` is kept, so a summary says
which module without saying whose disk.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
PROCESS = re.compile(r'^process \d+:"[^"]*";')
# Project code: the directories whose functions the per-step shares are read from.
PROJECT = ("actions/", "approvals/", "executors/", "config/", "clients/")
# Leaf frames of a process waiting, not working. With --gil py-spy reports the thread
# that last held the GIL, which stays the holder on record while every thread waits in
# C (the event loop's epoll, a sleep): those samples are idle time, not CPU.
IDLE_LEAVES = (
    "sleep (asyncio/tasks.py)",
    "Runner.run (asyncio/runners.py)",
    "Server._serve (uvicorn/server.py)",
    "Server.main_loop (uvicorn/server.py)",
    "_epoll.poll (kombu/utils/eventio.py)",
    "select (selectors.py)",
    "EpollSelector.select (selectors.py)",
    "Condition.wait (threading.py)",
    "Event.wait (threading.py)",
    "_worker (concurrent/futures/thread.py)",
)
# What a step of a plan enters through, in the web and in the workers.
ENTRY_POINTS = (
    "create_plan",
    "plan_submit",
    "plan_decide",
    "approval_record",
    "execution_run",
    "execute_plan_task",
    "audit_seal",
)


def short_file(path: str, root: Path) -> str:
    text = path.replace("\\", "/")
    if "site-packages/" in text:
        return text.split("site-packages/", 1)[1]
    root_text = str(root).rstrip("/") + "/"
    if text.startswith(root_text):
        return text[len(root_text) :]
    match = re.search(r"python\d\.\d+/(.*)$", text)
    if match:
        return match.group(1)
    return text.rsplit("/", 1)[-1]


def frame_name(frame: str, root: Path) -> str | None:
    """``function (file)`` without the line; None for py-spy's process and thread
    markers."""
    frame = frame.strip()
    if not frame or frame.startswith(("process ", "thread ")):
        return None
    match = FRAME.match(frame)
    if not match:
        return frame
    return f"{match.group('func')} ({short_file(match.group('file'), root)})"


def parse(paths: list[Path], root: Path) -> list[tuple[list[str], int]]:
    stacks: list[tuple[list[str], int]] = []
    for path in paths:
        for line in path.read_text(errors="replace").splitlines():
            # --subprocesses starts each stack with the process and its command line,
            # which may itself hold ';'.
            line = PROCESS.sub("", line)
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            frames = [f for f in (frame_name(x, root) for x in stack.split(";")) if f]
            if frames:
                stacks.append((frames, int(count)))
    return stacks


def summarize(
    paths: list[Path], group: str, plans: int, root: Path, rate: int = 200, top: int = 40
) -> str:
    stacks = parse(paths, root)
    idle = sum(count for frames, count in stacks if frames[-1] in IDLE_LEAVES)
    stacks = [(frames, count) for frames, count in stacks if frames[-1] not in IDLE_LEAVES]
    total = sum(count for _, count in stacks)
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for frames, count in stacks:
        for name in set(frames):
            inclusive[name] += count
        own[frames[-1]] += count
    lines = [
        f'py-spy record of the {group} processes during make bench\'s "CPU per plan"',
        f"profiled batch: {plans} plans (person-decided and policy-approved). {rate} Hz,",
        "--subprocesses --gil: each sample is the thread holding the GIL, so the shares are",
        f"of Python's CPU. {total} samples, after {idle} taken while the process waited",
        "(the last GIL holder on record idle in the event loop: IDLE_LEAVES in bench/spy.py)",
        "were left out. A share times the group's ms per plan in docs/benchmarks.md gives",
        "roughly ms per plan (time spent in C without the GIL, such as libpq, is not sampled).",
        "",
    ]
    if not total:
        return "\n".join([*lines, "(no samples)", ""])

    def share(n: int) -> str:
        return f"{100 * n / total:6.1f}%"

    lines.append("Entry points of a plan's steps (inclusive):")
    for entry in ENTRY_POINTS:
        n = sum(c for name, c in inclusive.items() if name.startswith(entry + " ("))
        if n:
            lines.append(f"  {share(n)}  {entry}")
    lines += ["", f"Top {top} functions, inclusive (samples with the function on the stack):"]
    for name, n in inclusive.most_common(top):
        lines.append(f"  {share(n)}  {name}")
    lines += ["", f"Top {top} project functions, inclusive:"]
    mine = [(k, v) for k, v in inclusive.items() if _project(k)]
    for name, n in sorted(mine, key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {share(n)}  {name}")
    lines += ["", f"Top {top} functions, self (the frame the sample was in):"]
    for name, n in own.most_common(top):
        lines.append(f"  {share(n)}  {name}")
    return "\n".join(lines) + "\n"


def _project(name: str) -> bool:
    inside = name.rsplit("(", 1)[-1]
    return inside.startswith(PROJECT)
