"""No crafted yes: hostile e-mail addresses submitted through the agent API, with the demo
catalog's decision rules and policies in force, against the demo upstream. Each is refused
at input (422, with its pointer and a reason) or goes to a person; a plan that runs writes
byte for byte the value its policy judged."""

from __future__ import annotations

import json
import unicodedata

import httpx
import pytest
import yaml
from django.conf import settings

from actions.catalog import load_catalog
from actions.lib.exceptions import InvalidInput
from actions.lib.formats import email_parse
from actions.policy.requests import plan_request
from actions.policy.versions import policies_in_force
from approvals.decisions.policies import plan_policy_facts
from approvals.grants import grant_create
from approvals.models import Plan, PlanStatus
from approvals.services import approval_record, plan_submit
from executors.services import execution_run
from tests.actions.test_formats import HOSTILE_EMAILS
from tests.approvals.test_decision_rules import demo_rules, load_rules, person
from tests.conftest import DEMO_CATALOG, READ_TOKEN, WRITE_TOKEN, demo_policies_load

MAX_BODY = settings.DATA_UPLOAD_MAX_MEMORY_SIZE  # the API refuses a longer body whole
GRACE = "c-1002"  # grace@example.test, no tags
KAT = "c-2001"  # kat@kit.example, made for these tests

# Hostile through JSON: every value of the checker's corpus a JSON body can carry (a lone
# surrogate cannot be sent as UTF-8), and the ones aimed at the demo's routine-email policy.
CORPUS = [value for value, _ in HOSTILE_EMAILS if "\ud800" not in value] + [
    "grace@example.test\r\n",
    "grace@example.test\x00",
    "grace@EXAMPLE.TEST\u212a",
    "grace@ex\u0430mple.test",  # Cyrillic a
    "grace@\u0435xample.test",  # Cyrillic e
    "grace@xn--xample-2of.test",  # the same, as an A-label
    "grace@xn--exmple-cua.test",
    "grace@example.test@example.test",
    "grace@example.test\u3000",
    "grace\uff20example.test",  # a fullwidth @
]


@pytest.fixture
def in_force(catalog, upstream):
    """The demo's decision rules and policies, their groups staffed, and a contact at
    kit.example."""
    load_rules(demo_rules())
    demo_policies_load()
    person("bea", "billing-approvers")
    person("leo", "support-leads")
    created = httpx.put(
        f"{upstream.url}/contacts/{KAT}",
        json={"id": KAT, "name": "Kat", "email": "kat@kit.example", "workspace": "ws-blue"},
        headers={"Authorization": f"Bearer {WRITE_TOKEN}", "If-None-Match": "*"},
    )
    assert created.status_code == 201
    seeded = len(upstream.writes())
    # What the upstream was sent after this seeding.
    return lambda: upstream.writes()[seeded:]


def submit(client, api_headers, contact: str, email: str):
    return client.post(
        "/api/v1/plans",
        data=json.dumps(
            {"action": "update_contact_email", "input": {"contact_id": contact, "email": email}}
        ),
        content_type="application/json",
        **api_headers,
    )


@pytest.fixture
def run(reviewer, executor_key, monkeypatch, django_capture_on_commit_callbacks):
    """Approve (by a person, when no policy did) and execute one plan in this process,
    publishing nothing to the broker."""

    def run(plan_id) -> Plan:
        monkeypatch.setattr("actions.lib.dispatch.publish", lambda *a, **k: None)
        plan = Plan.objects.get(pk=plan_id)
        if plan.status == PlanStatus.AWAITING_APPROVAL:
            with django_capture_on_commit_callbacks(execute=False):
                approval_record(
                    plan_id=plan.id,
                    reviewer=reviewer,
                    decision="approve",
                    fingerprint_seen=plan.fingerprint,
                )
        with django_capture_on_commit_callbacks(execute=False):
            execution_run(plan_id=plan.id)
        return Plan.objects.get(pk=plan_id)

    return run


def judged(plan: Plan) -> dict:
    """The context the policies in force judged ``plan`` by (its recorded facts)."""
    compiled = policies_in_force()
    request, _ = plan_request(plan_policy_facts(plan), compiled.types[plan.action.name])
    return request["context"]


def assert_written_as_judged(plan: Plan, writes) -> str:
    """The one write carries exactly the address the policies judged, and the domain
    they compared is that address's own."""
    assert plan.status == PlanStatus.COMPLETED, plan.outcome_detail
    (write,) = writes()
    written = write["body"]["email"]
    context = judged(plan)
    assert written.encode("utf-8") == context["after"]["email"].encode("utf-8")
    assert written == plan.input["email"] == plan.after["email"]
    domain = context["email_domains"]["/email"].get("after")
    assert domain == email_parse(written).domain_key
    assert domain == written.split("@")[1].translate(
        str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
    )
    return written


def nfc(value: str) -> str:
    return unicodedata.normalize("NFC", value)


# Every string an agent sends is put in Unicode normal form (NFC) as it arrives, after a
# format field was checked as sent: a value NFC changes is refused, never mapped
# (test_a_value_in_another_spelling_is_refused_not_mapped).
AS_SENT = [v for v in CORPUS if nfc(v) == v and len(v) < MAX_BODY]
NORMALIZED = [v for v in CORPUS if nfc(v) != v]


def contact_for(value: str) -> str:
    return KAT if "kit" in value.lower() else GRACE


@pytest.mark.parametrize("value", AS_SENT, ids=range(len(AS_SENT)))
def test_a_hostile_address_is_refused_or_left_to_a_person(
    in_force, client, api_headers, upstream, run, value
):
    answer = submit(client, api_headers, contact_for(value), value)
    if answer.status_code == 422:
        problem = answer.json()
        assert answer.headers["content-type"].startswith("application/problem+json")
        messages = {e["pointer"]: e["message"] for e in problem["errors"]}
        assert set(messages) == {"/input/email"}, messages
        assert not messages["/input/email"].endswith("is not a 'email'")
        assert not Plan.objects.exists()
        assert in_force() == []
        return
    assert answer.status_code == 201, answer.text
    plan = answer.json()
    # Never approved with no person.
    assert plan["status"] == "awaiting_approval", plan
    assert plan["approved_by"] is None
    assert in_force() == []
    # A person may still approve it; what runs is what was judged.
    assert_written_as_judged(run(plan["id"]), in_force)


@pytest.mark.parametrize("value", NORMALIZED, ids=range(len(NORMALIZED)))
def test_a_value_in_another_spelling_is_refused_not_mapped(
    in_force, client, api_headers, upstream, value
):
    answer = submit(client, api_headers, contact_for(value), value)
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["errors"]
    assert error["pointer"] == "/input/email"
    assert "normaliz" in error["message"], error
    assert not Plan.objects.exists()
    assert in_force() == []


def test_a_value_beyond_the_body_limit_is_refused_whole(in_force, client, api_headers):
    (value,) = [v for v in CORPUS if len(v) >= MAX_BODY]
    answer = submit(client, api_headers, GRACE, value)
    assert answer.status_code == 413
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert not Plan.objects.exists()
    assert in_force() == []


def test_the_demo_corpus_is_refused_at_input(in_force, client, api_headers, upstream):
    # The four that were written with no person before, each with its reason.
    for value, reason in [
        ("grace@evil.example@example.test", "more than one @"),
        ("grace@evil.example\n@example.test", "it contains whitespace (U+000A)"),
        ("grace@example.test ", "it contains whitespace (U+0020)"),
        ("grace@example.test\t", "it contains whitespace (U+0009)"),
        ("not-an-email", "there is no @"),
    ]:
        answer = submit(client, api_headers, GRACE, value)
        assert answer.status_code == 422
        assert answer.json()["errors"] == [
            {"pointer": "/input/email", "message": f"not a valid e-mail address: {reason}"}
        ]
    assert not Plan.objects.exists()
    assert in_force() == []


def test_a_routine_change_still_needs_no_one_and_writes_what_was_judged(
    in_force, client, api_headers, upstream, run
):
    answer = submit(client, api_headers, GRACE, "g.hopper@example.test")
    assert answer.json()["approved_by"] == "policy"
    assert assert_written_as_judged(run(answer.json()["id"]), in_force) == "g.hopper@example.test"


def test_ascii_case_in_the_domain_is_the_same_domain_and_is_written_as_sent(
    in_force, client, api_headers, upstream, run
):
    answer = submit(client, api_headers, GRACE, "Grace@EXAMPLE.test")
    assert answer.json()["approved_by"] == "policy"
    assert assert_written_as_judged(run(answer.json()["id"]), in_force) == "Grace@EXAMPLE.test"


def test_a_kelvin_sign_is_refused_not_mapped_into_a_k(in_force, client, api_headers, upstream):
    # Python lower-cases a Kelvin sign into "k", and Unicode normalization makes it a
    # "K": either way kit.example, the contact's own domain. It is refused, saying why.
    for value in ("kat@\u212ait.example", "kat@\u212aIT.example"):
        answer = submit(client, api_headers, KAT, value)
        assert answer.status_code == 422, answer.text
        assert answer.json()["errors"] == [
            {
                "pointer": "/input/email",
                "message": "not a valid e-mail address: a domain label is not in its "
                "normalized (NFC) form: a character in it, such as the Kelvin sign, "
                "normalizes into another",
            }
        ]
    assert not Plan.objects.exists()
    assert in_force() == []
    # The same address written with a K is the contact's own domain: no one needs to look.
    plain = submit(client, api_headers, KAT, "kat@Kit.example")
    assert plain.json()["approved_by"] == "policy"


def test_the_service_refuses_it_too_for_mcp_and_the_pages(in_force, agent):
    # MCP's tools and a reviewer's revision hand the input to plan_submit as sent.
    with pytest.raises(InvalidInput) as refused:
        plan_submit(
            agent=agent,
            action_name="update_contact_email",
            input={"contact_id": KAT, "email": "kat@\u212ait.example"},
        )
    assert [e["pointer"] for e in refused.value.errors] == ["/input/email"]
    assert not Plan.objects.exists()


def test_a_stored_address_that_does_not_parse_gives_no_domain_so_a_person_decides(
    in_force, client, api_headers, upstream, run
):
    # The upstream holds an address crafted so that its last @ names kit.example.
    stored = httpx.patch(
        f"{upstream.url}/contacts/{KAT}",
        json={"email": "kat@evil.example@kit.example"},
        headers={
            "Authorization": f"Bearer {WRITE_TOKEN}",
            "Content-Type": "application/merge-patch+json",
            "If-Match": httpx.get(
                f"{upstream.url}/contacts/{KAT}",
                headers={"Authorization": f"Bearer {READ_TOKEN}"},
            ).headers["ETag"],
        },
    )
    assert stored.status_code == 200, stored.text
    answer = submit(client, api_headers, KAT, "kat@kit.example")
    assert answer.status_code == 201, answer.text
    plan = answer.json()
    assert plan["status"] == "awaiting_approval" and plan["approved_by"] is None
    assert plan["policy"]["errors"] == [""]  # the plan's own evaluation: no domain
    stored_plan = Plan.objects.get(pk=plan["id"])
    assert "before" not in judged(stored_plan)["email_domains"]["/email"]


def test_a_grants_fixed_value_is_checked_as_strictly(in_force, reviewer, agent):
    definition = yaml.safe_load(DEMO_CATALOG.read_text())["actions"]["update_contact_email"]
    definition["approval"] = {"session_grant": True}
    load_catalog(yaml.safe_dump({"version": 1, "actions": {"update_contact_email": definition}}))
    with pytest.raises(InvalidInput) as refused:
        grant_create(
            creator=reviewer,
            agent=agent,
            action_names=["update_contact_email"],
            duration_seconds=600,
            fixed_values={"email": "grace@evil.example@example.test"},
        )
    assert refused.value.errors == [
        {
            "pointer": "/fixed_values/email",
            "message": "update_contact_email: not a valid e-mail address: more than one @",
        }
    ]
