"""schemathesis against the agent API's own OpenAPI document (/api/v1/openapi.json).

The schema is loaded from the WSGI application in this process (no server), every
operation gets a bounded, deterministic set of generated requests sent with a valid
agent token, and each answer must: not be a 5xx, use a status code the schema declares,
carry the declared content type, and match the declared response schema.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def _app():
    from django.core.wsgi import get_wsgi_application

    return get_wsgi_application()


# Loaded from the application at collection time (the schema view needs no database).
# schemathesis.pytest.from_fixture would defer this, but its lazy loader does not work
# with pytest 9 yet.
schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", _app())


@pytest.fixture(autouse=True)
def _in_process(db, catalog, settings):
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    # Fuzzing sends far more plans than an agent's budget allows; the limiter has its
    # own tests (tests/security/test_agents.py). 429 stays declared and checked anyway.
    settings.COUNTERSIGN_RATE_LIMIT = "100000/minute"
    # The WSGI handler closes the connection after each request, which would end the
    # test's transaction; Django's own test client unhooks the same receivers.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@schema.parametrize()
@settings(
    max_examples=25,
    derandomize=True,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_the_api_keeps_its_own_contract(case, agent_token):
    case.call_and_validate(headers={"Authorization": f"Bearer {agent_token}"}, checks=CHECKS)
