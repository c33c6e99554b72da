"""The canary over real processes: an OAuth2 read credential used by the live web server
and an OAuth2 write credential opened only by the live worker, through a success and an
upstream error page that echoes every request header and body. Afterwards neither
process's log nor any database column holds a secret or an access token, and neither do
the /readyz, /metrics and /healthz answers (JSON log lines: tests/e2e/test_operations.py)."""

from __future__ import annotations

import pytest

from tests.conftest import secrets_in
from tests.security.test_canary_db import secret_hits, use_oauth2_credentials

pytestmark = pytest.mark.e2e


def test_live_logs_and_columns_hold_no_secret(agent_api, rita, upstream, live):
    use_oauth2_credentials()

    plan = agent_api.propose(email="ada.live@new.example")
    rita.decide(plan["id"], "approve")
    assert agent_api.wait_for(plan["id"])["status"] == "completed"

    upstream.add_fault(
        method="PATCH", path_prefix="/contacts/", status=500, body="echo-request", apply=True
    )
    plan = agent_api.propose(email="ada.echo@new.example")
    rita.decide(plan["id"], "approve")
    agent_api.wait_for(plan["id"])

    tokens = upstream.issued_tokens()
    assert upstream.token_requests() >= 2  # one in the web process, one in the worker
    writes = upstream.writes()
    assert writes and all(w["headers"]["authorization"].startswith("Bearer oat-") for w in writes)
    for name in ("web", "worker"):
        log = (live["worker"].log_path.parent / f"{name}.log").read_text(errors="replace")
        assert log, name
        assert secrets_in(log, tokens) == [], f"the live {name}'s log"
    hits, _ = secret_hits(tokens)
    assert hits == []

    # The operations endpoints too (the canary fixture checks every response of the live
    # server; these say so explicitly): nothing secret, no upstream address.
    for path in ("/readyz", "/metrics", "/healthz"):
        response = agent_api.http.get(live["url"] + path)
        assert response.status_code in (200, 503), path
        assert secrets_in(response.text, tokens) == [], path
        assert upstream.url.removeprefix("http://") not in response.text, path
        assert "Authorization" not in response.text, path
