"""Helpers for end-to-end tests: an agent and a reviewer talking to the real web server,
and waiting (with deadlines, never fixed sleeps) on plans, the upstream and worker logs."""

from __future__ import annotations

import html
import re
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from clients.countersign_client import SETTLED  # statuses the worker leaves alone
from demo.processes import Process

NEW_EMAIL = "ada@new.example"
OLD_EMAIL = "ada@example.test"  # the demo upstream's seed for c-1001


def eventually(
    check: Callable[[], Any], *, timeout: float = 15, interval: float = 0.05, what: str = ""
) -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")
        time.sleep(interval)


def header(entry: dict[str, Any], name: str) -> str | None:
    """A header from an upstream request-log entry, case-insensitively."""
    for key, value in entry["headers"].items():
        if key.lower() == name.lower():
            return value
    return None


# --- the agent --------------------------------------------------------------------------


class AgentClient:
    """The agent's side: the JSON API with its bearer token."""

    def __init__(self, base_url: str, token: str) -> None:
        self.http = httpx.Client(
            base_url=base_url + "/api/v1",
            headers={"Authorization": f"Bearer {token}"},
            timeout=40,
        )

    def propose(
        self,
        *,
        contact_id: str = "c-1001",
        email: str = NEW_EMAIL,
        reason: str = "customer asked",
    ) -> dict[str, Any]:
        response = self.http.post(
            "/plans",
            json={
                "action": "update_contact_email",
                "input": {"contact_id": contact_id, "email": email},
                "reason": reason,
            },
        )
        assert response.status_code == 201, response.text
        return response.json()

    def get(self, plan_id: str) -> dict[str, Any]:
        response = self.http.get(f"/plans/{plan_id}")
        assert response.status_code == 200, response.text
        return response.json()

    def wait_for(
        self, plan_id: str, statuses: Iterable[str] = SETTLED, timeout: float = 20
    ) -> dict[str, Any]:
        """Long-poll until the plan reaches one of ``statuses``."""
        wanted = set(statuses)
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            wait = max(0.0, min(10.0, remaining))
            response = self.http.get(f"/plans/{plan_id}", params={"wait": wait})
            assert response.status_code == 200, response.text
            plan = response.json()
            if plan["status"] in wanted:
                return plan
            if remaining <= 0:
                raise AssertionError(f"plan stayed {plan['status']}, wanted one of {wanted}")

    def close(self) -> None:
        self.http.close()


# --- a reviewer without a browser ---------------------------------------------------------


def while_a_slow_submission_runs(
    url: str, token: str, upstream, during: Callable[[httpx.Client], Any]
) -> tuple[httpx.Response, Any]:
    """Submit a plan whose preview read the upstream answers slowly (4 s at most: it is
    let go once ``during`` returned) and, once that read is at the upstream, call
    ``during(client)``; returns (the submission's answer, what ``during`` returned). The
    submission holds its thread and connection all along."""
    upstream.add_fault(method="GET", path_prefix="/contacts/", delay=4)
    body = {
        "action": "update_contact_email",
        "input": {"contact_id": "c-1001", "email": "a@b.test"},
    }
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
        with ThreadPoolExecutor(1) as pool:
            slow = pool.submit(http.post, "/api/v1/plans", json=body)
            reads = len(upstream.requests_log())
            eventually(lambda: len(upstream.requests_log()) > reads, timeout=10)
            try:
                seen = during(http)
            finally:
                upstream.release_delays()
            return slow.result(), seen


def csrf_token(page: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)


def error_messages(page: str) -> list[str]:
    """The error flashes (django.contrib.messages) on a rendered page."""
    return [html.unescape(m) for m in re.findall(r'<li class="msg-error"[^>]*>([^<]*)</li>', page)]


class ReviewerClient:
    """A reviewer posting the real HTML forms over HTTP, cookies and CSRF included."""

    def __init__(self, base_url: str, username: str, password: str) -> None:
        self.base_url = base_url
        self.http = httpx.Client(base_url=base_url, timeout=10)
        page = self.http.get("/accounts/login/")
        response = self.http.post(
            "/accounts/login/",
            data={
                "username": username,
                "password": password,
                "csrfmiddlewaretoken": csrf_token(page.text),
            },
            headers={"Referer": base_url + "/accounts/login/"},
        )
        assert response.status_code == 302, response.text

    def page(self, plan_id: str) -> str:
        response = self.http.get(f"/plans/{plan_id}/")
        assert response.status_code == 200, response.text
        return response.text

    def decide(
        self,
        plan_id: str,
        decision: str,
        *,
        fingerprint: str | None = None,
        page: str | None = None,
    ) -> str:
        """Post the decision form as the browser would; returns the page redirected to.

        ``fingerprint`` overrides the one the page carries (to post one never shown);
        ``page`` reuses a page rendered earlier (to re-post a stale form).
        """
        page = page or self.page(plan_id)
        shown = re.search(r'name="fingerprint" value="([0-9a-f]{64})"', page)
        response = self.http.post(
            f"/plans/{plan_id}/decide",
            data={
                "decision": decision,
                "fingerprint": fingerprint if fingerprint is not None else shown.group(1),
                "comment": "",
                "csrfmiddlewaretoken": csrf_token(page),
            },
            headers={"Referer": self.base_url + f"/plans/{plan_id}/"},
        )
        assert response.status_code == 302, response.text
        followed = self.http.get(response.headers["Location"])
        assert followed.status_code == 200
        return followed.text

    def close(self) -> None:
        self.http.close()


# --- worker logs ------------------------------------------------------------------------

_FINISHED = re.compile(
    r"Task executors\.execute_plan\[[0-9a-f-]+\] (succeeded in [0-9.e-]+s: (?P<value>.*)"
    r"|raised .*|failed.*)$",
    re.MULTILINE,
)


class WorkerLogs:
    """What workers logged about execution tasks since this object was made."""

    def __init__(self, *workers: Process) -> None:
        self.offsets: dict[Process, int] = {}
        for worker in workers:
            self.watch(worker)

    def watch(self, worker: Process, *, from_start: bool = False) -> None:
        self.offsets[worker] = 0 if from_start else worker.log_path.stat().st_size

    def _new_text(self) -> str:
        parts = []
        for worker, offset in self.offsets.items():
            with open(worker.log_path, "rb") as fh:
                fh.seek(offset)
                parts.append(fh.read().decode("utf-8", "replace"))
        return "\n".join(parts)

    def finished(self) -> list[str]:
        """One entry per finished task: its return value (quoted), or the error line."""
        return [m.group("value") or m.group(1) for m in _FINISHED.finditer(self._new_text())]

    def wait_finished(self, count: int, timeout: float = 20) -> list[str]:
        eventually(
            lambda: len(self.finished()) >= count,
            timeout=timeout,
            what=f"{count} finished execution task(s) in the worker logs",
        )
        return self.finished()


def orm(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` (database queries) in a thread of its own: Django refuses ORM calls in
    a thread where Playwright's event loop runs. The thread's connection is closed after."""
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415 - test helper only

    from django.db import connection  # noqa: PLC0415 - test helper only

    def run():
        try:
            return fn()
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()
