"""The load generator of ``make bench``: a separate process, so the client's CPU is not
the server's. Reads one JSON job on stdin, writes one JSON result on stdout.

Jobs (``"mode"``):

* ``submit``: POST plans (or the baseline) from ``concurrency`` tasks for ``seconds``;
  returns the count, errors and every latency.
* ``prepare``: submit one plan per contact id (the new address in ``domain``, by default
  bench.test); returns ``[{id, fingerprint, contact}]``.
* ``wait``: hold one ``GET /api/v1/plans/{id}?wait=N`` per plan id at once; touches
  ``ready_file`` once every request has been sent; returns when each came back (wall
  clock, to compare with the approver's commit times).
* ``get``: GET each path ``repeat`` times, one at a time; returns the latencies.
* ``interleave``: GET each of ``targets`` (``{name, url, path, cookies, headers}``, on
  servers of their own) ``warmup`` times, then ``repeat`` times in ``rounds`` rounds, a
  share of each target in every round, the order reversed every other round; returns
  each name's latencies. Two servers measured this way are measured at the same moments.
* ``decide``: reviewers approving plans over HTTP, as the review page's form does: one
  lane per reviewer session (``lanes: [{cookies, plans}]``), all lanes at once, each
  posting its plans one after the other; returns every latency and the elapsed time. A
  lane given its ``csrftoken`` (set among its cookies too) skips the queue page that
  would otherwise set it.
* ``mcp_read``: the official MCP client calling one tool on a kept stdio session from
  ``concurrency`` tasks for ``seconds`` (B9's floor).
* ``hammer``: GET one path from ``concurrency`` tasks for ``seconds`` (the upstream's
  own rate: the floor a submission, which reads the upstream once, cannot beat).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import sys
import time
from pathlib import Path

import httpx


def _filled(template, i: int, tag: str):
    """A body template with ``{i}`` and ``{tag}`` filled in its strings (B9's plans)."""
    if isinstance(template, dict):
        return {k: _filled(v, i, tag) for k, v in template.items()}
    if isinstance(template, list):
        return [_filled(v, i, tag) for v in template]
    if isinstance(template, str):
        return template.replace("{i}", str(i)).replace("{tag}", tag)
    return template


def _body(
    i: int,
    contacts: list[str],
    tag: str,
    domain: str = "bench.test",
    template: dict | None = None,
) -> dict:
    if template is not None:
        return _filled(template, i, tag)
    return {
        "action": "update_contact_email",
        "input": {"contact_id": contacts[i % len(contacts)], "email": f"{tag}{i}@{domain}"},
        "reason": "bench",
    }


async def submit(job: dict) -> dict:
    url, path, contacts = job["url"], job["path"], job["contacts"]
    headers = {"Authorization": f"Bearer {job['token']}"}
    latencies: list[float] = []
    errors: dict[str, int] = {}
    plans: list[dict] = []  # what POST /api/v1/plans created (reused by later scenarios)
    counter = iter(range(job.get("offset", 0), 10**9))
    limits = httpx.Limits(max_connections=job["concurrency"], max_keepalive_connections=None)
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=30) as c:

        async def one(record: bool) -> None:
            i = next(counter)
            began = time.perf_counter()
            try:
                body = _body(i, contacts, job["tag"], template=job.get("body"))
                response = await c.post(path, json=body)
                status = response.status_code
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            if not record:
                return
            if status == 201 and path == "/api/v1/plans":
                plan = response.json()
                plans.append(
                    {
                        "id": plan["id"],
                        "fingerprint": plan["fingerprint"],
                        "contact": plan["input"].get("contact_id", ""),
                    }
                )
            if status == 201:
                latencies.append((time.perf_counter() - began) * 1000)
            else:
                errors[str(status)] = errors.get(str(status), 0) + 1

        async def loop(until: float, record: bool) -> None:
            while time.perf_counter() < until:
                await one(record)

        warm = time.perf_counter() + job.get("warmup", 2.0)
        await asyncio.gather(*(loop(warm, False) for _ in range(job["concurrency"])))
        began = time.perf_counter()
        until = began + job["seconds"]
        await asyncio.gather(*(loop(until, True) for _ in range(job["concurrency"])))
        elapsed = time.perf_counter() - began
    return {
        "count": len(latencies),
        "elapsed": elapsed,
        "errors": errors,
        "latencies": latencies,
        "plans": plans,
        "next": next(counter),  # the next contact index (warm-up included)
    }


async def prepare(job: dict) -> dict:
    headers = {"Authorization": f"Bearer {job['token']}"}
    limits = httpx.Limits(max_connections=job.get("concurrency", 8))
    semaphore = asyncio.Semaphore(job.get("concurrency", 8))
    async with httpx.AsyncClient(
        base_url=job["url"], headers=headers, limits=limits, timeout=60
    ) as c:

        async def one(i: int, contact: str) -> dict:
            async with semaphore:
                body = _body(i, [contact], job.get("tag", "p"), job.get("domain", "bench.test"))
                for attempt in range(12):
                    response = await c.post("/api/v1/plans", json=body)
                    if response.status_code == 201:
                        plan = response.json()
                        return {
                            "id": plan["id"],
                            "fingerprint": plan["fingerprint"],
                            "contact": contact,
                        }
                    if response.status_code < 500 and response.status_code != 429:
                        break
                    # A shared machine's database may be out of connections for a moment.
                    await asyncio.sleep(min(5.0, 0.25 * 2**attempt))
                raise RuntimeError(f"submit failed: {response.status_code} {response.text[:300]}")

        plans = await asyncio.gather(*(one(i, c_) for i, c_ in enumerate(job["contacts"])))
    return {"plans": plans}


# Waiters per HTTP client in ``wait``. httpcore's pool looks at every one of its
# connections each time a response is closed, so one client holding a thousand waits
# spent its time on that (measured: 88% of the load generator's samples during a burst
# of 1,000 answers), and the answers' times were the client's more than the server's.
# Agents are separate clients; a few dozen connections per pool keep that cost small.
WAITERS_PER_CLIENT = 20


async def wait(job: dict) -> dict:
    headers = {"Authorization": f"Bearer {job['token']}"}
    n = len(job["plan_ids"])
    sent = 0
    all_sent = asyncio.Event()
    results: list[dict] = []
    timeout = httpx.Timeout(job["wait"] + 30, connect=30)
    per = WAITERS_PER_CLIENT
    limits = httpx.Limits(max_connections=per + 2, max_keepalive_connections=per + 2)
    tls = ssl.create_default_context()  # one for all the clients (plain HTTP here)
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(
                httpx.AsyncClient(
                    base_url=job["url"],
                    headers=headers,
                    limits=limits,
                    timeout=timeout,
                    verify=tls,
                )
            )
            for _ in range(max(1, -(-n // per)))
        ]

        async def one(i: int, plan_id: str) -> None:
            nonlocal sent
            c = clients[i // per]
            began = time.time()
            request = c.build_request("GET", f"/api/v1/plans/{plan_id}?wait={job['wait']}")
            task = asyncio.ensure_future(c.send(request))
            await asyncio.sleep(0)
            sent += 1
            if sent == n:
                all_sent.set()
            rounds = 1
            while True:
                try:
                    response = await task
                    status, plan_status = response.status_code, response.json().get("status")
                except httpx.HTTPError as exc:
                    status, plan_status = type(exc).__name__, None
                # Like an agent: a wait that ended without a change is asked again.
                if plan_status != "awaiting_approval" or rounds >= job.get("rounds", 3):
                    break
                rounds += 1
                task = asyncio.ensure_future(c.get(f"/api/v1/plans/{plan_id}?wait={job['wait']}"))
            results.append(
                {
                    "id": plan_id,
                    "sent": began,
                    "received": time.time(),
                    "http": status,
                    "status": plan_status,
                    "rounds": rounds,
                }
            )

        async def signal_ready() -> None:
            await all_sent.wait()
            Path(job["ready_file"]).write_text(str(time.time()))

        # Open the connections a few at a time, as agents would arrive.
        tasks = []
        for i, plan_id in enumerate(job["plan_ids"]):
            tasks.append(asyncio.ensure_future(one(i, plan_id)))
            if i % 50 == 49:
                await asyncio.sleep(0.02)
        await asyncio.gather(signal_ready(), *tasks)
    return {"results": results}


async def get(job: dict) -> dict:
    headers = job.get("headers", {})
    out: dict[str, list[float]] = {}
    async with httpx.AsyncClient(
        base_url=job["url"], headers=headers, cookies=job.get("cookies", {}), timeout=60
    ) as c:
        for path in job["paths"]:
            times = []
            for i in range(job["warmup"] + job["repeat"]):
                began = time.perf_counter()
                response = await c.get(path)
                elapsed = (time.perf_counter() - began) * 1000
                if response.status_code != 200:
                    raise RuntimeError(f"GET {path}: {response.status_code} {response.text[:300]}")
                if i >= job["warmup"]:
                    times.append(elapsed)
            out[path] = times
    return {"latencies": out}


async def interleave(job: dict) -> dict:
    targets = job["targets"]
    rounds = max(1, job["rounds"])
    out: dict[str, list[float]] = {t["name"]: [] for t in targets}
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(
                httpx.AsyncClient(
                    base_url=t["url"],
                    headers=t.get("headers", {}),
                    cookies=t.get("cookies", {}),
                    timeout=60,
                )
            )
            for t in targets
        ]

        async def one(i: int) -> float:
            began = time.perf_counter()
            response = await clients[i].get(targets[i]["path"])
            elapsed = (time.perf_counter() - began) * 1000
            if response.status_code != 200:
                path = targets[i]["path"]
                raise RuntimeError(f"GET {path}: {response.status_code} {response.text[:300]}")
            return elapsed

        for i in range(len(targets)):
            for _ in range(job["warmup"]):
                await one(i)
        for r in range(rounds):
            share = job["repeat"] // rounds + (1 if r < job["repeat"] % rounds else 0)
            order = range(len(targets)) if r % 2 == 0 else reversed(range(len(targets)))
            for i in order:
                for _ in range(share):
                    out[targets[i]["name"]].append(await one(i))
    return {"latencies": out}


async def decide(job: dict) -> dict:
    latencies: list[float] = []
    statuses: dict[str, int] = {}

    async def lane(spec: dict) -> None:
        async with httpx.AsyncClient(base_url=job["url"], cookies=spec["cookies"], timeout=60) as c:
            token = spec.get("csrftoken")
            if not token:
                # The queue page sets the CSRF cookie, as it does for a browser.
                (await c.get("/plans/")).raise_for_status()
                token = c.cookies.get("csrftoken")
            await ready.wait()
            for plan in spec["plans"]:
                began = time.perf_counter()
                response = await c.post(
                    f"/plans/{plan['id']}/decide",
                    data={"decision": "approve", "fingerprint": plan["fingerprint"]},
                    headers={"X-CSRFToken": token},
                )
                latencies.append((time.perf_counter() - began) * 1000)
                key = str(response.status_code)
                statuses[key] = statuses.get(key, 0) + 1

    ready = asyncio.Event()
    tasks = [asyncio.ensure_future(lane(spec)) for spec in job["lanes"]]
    await asyncio.sleep(1.0)  # every lane signed in and holding its token
    began = time.perf_counter()
    ready.set()
    await asyncio.gather(*tasks)
    return {"elapsed": time.perf_counter() - began, "latencies": latencies, "http": statuses}


async def hammer(job: dict) -> dict:
    count = 0
    errors: dict[str, int] = {}
    limits = httpx.Limits(max_connections=job["concurrency"], max_keepalive_connections=None)
    async with httpx.AsyncClient(
        base_url=job["url"], headers=job.get("headers", {}), limits=limits, timeout=30
    ) as c:

        async def loop(until: float, record: bool) -> None:
            nonlocal count
            while time.perf_counter() < until:
                response = await c.get(job["path"])
                if not record:
                    continue
                if response.status_code == 200:
                    count += 1
                else:
                    errors[str(response.status_code)] = errors.get(str(response.status_code), 0) + 1

        warm = time.perf_counter() + 1.0
        await asyncio.gather(*(loop(warm, False) for _ in range(job["concurrency"])))
        began = time.perf_counter()
        until = began + job["seconds"]
        await asyncio.gather(*(loop(until, True) for _ in range(job["concurrency"])))
    return {"count": count, "elapsed": time.perf_counter() - began, "errors": errors}


async def mcp_read(job: dict) -> dict:
    """B9's floor: the official MCP client calling one read tool from ``concurrency``
    tasks for ``seconds`` on one kept stdio session (the server started once, before the
    clock): what a submission previewed through that server cannot beat."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    server = StdioServerParameters(command=job["command"], args=job["args"])
    latencies: list[float] = []
    errors: dict[str, int] = {}
    async with Client(server, mode="auto") as client:

        async def one(record: bool) -> None:
            began = time.perf_counter()
            result = await client.call_tool(job["tool"], job["arguments"])
            if not record:
                return
            if result.is_error:
                errors["isError"] = errors.get("isError", 0) + 1
            else:
                latencies.append((time.perf_counter() - began) * 1000)

        async def loop(until: float, record: bool) -> None:
            while time.perf_counter() < until:
                await one(record)

        warm = time.perf_counter() + job.get("warmup", 1.0)
        await asyncio.gather(*(loop(warm, False) for _ in range(job["concurrency"])))
        began = time.perf_counter()
        until = began + job["seconds"]
        await asyncio.gather(*(loop(until, True) for _ in range(job["concurrency"])))
        elapsed = time.perf_counter() - began
    return {"count": len(latencies), "elapsed": elapsed, "errors": errors, "latencies": latencies}


MODES = {
    "mcp_read": mcp_read,
    "submit": submit,
    "prepare": prepare,
    "wait": wait,
    "get": get,
    "interleave": interleave,
    "decide": decide,
    "hammer": hammer,
}


def main() -> int:
    job = json.load(sys.stdin)
    result = asyncio.run(MODES[job["mode"]](job))
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
