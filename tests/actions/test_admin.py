"""The catalog in the Django admin: the same checks as the file loader, every edit a new
version, and a plan previewed under an old version never runs."""

from __future__ import annotations

import json

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import resolve, reverse

from actions.admin import CARD_FIELDS
from actions.catalog import action_define
from actions.export import definition_text
from actions.lib.models import AuditEvent
from actions.models import Action, ActionVersion, AgentScope, Connector, Credential
from approvals.models import Plan, PlanStatus
from approvals.services import approval_record
from executors.services import execution_run
from tests.conftest import READ_TOKEN, WRITE_TOKEN


@pytest.fixture
def admin_user(db):
    return get_user_model().objects.create_superuser(
        username="ada-admin", email="ada@example.test", password="pw-ada-admin"
    )


@pytest.fixture
def client(client, admin_user):
    client.force_login(admin_user)
    return client


def change_url(model, pk) -> str:
    return reverse(f"admin:actions_{model}_change", args=[pk])


def inline_management(response) -> dict[str, str]:
    """The management-form fields of a change page's inlines, as the browser posts them."""
    data = {}
    for inline in response.context["inline_admin_formsets"]:
        formset = inline.formset
        for key, value in formset.management_form.initial.items():
            data[f"{formset.prefix}-{key}"] = value
    return data


def edit_definition(client, action: Action, text: str):
    url = change_url("action", action.pk)
    page = client.get(url)
    assert page.status_code == 200
    data = {
        **inline_management(page),
        "definition_yaml": text,
        "based_on_version": str(action.version),
    }
    return client.post(url, data)


def edited(action: Action, **changes) -> str:
    return definition_text({**action.definition, **changes})


def errors_of(response) -> list[str]:
    return list(response.context["adminform"].form.errors.get("definition_yaml", []))


# --- pages load ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "admin:actions_connector_changelist",
        "admin:actions_credential_changelist",
        "admin:actions_action_changelist",
        "admin:actions_actionversion_changelist",
        "admin:actions_agent_changelist",
        "admin:approvals_plan_changelist",
        "admin:lib_auditevent_changelist",
        "admin:actions_action_add",
        "admin:actions_connector_add",
        "admin:actions_action_import_openapi",
    ],
)
def test_the_pages_load(client, catalog, agent, make_plan, url):
    make_plan()
    assert client.get(reverse(url)).status_code == 200


def test_change_pages_load(client, catalog, agent):
    action = catalog["update_contact_email"]
    for url in [
        change_url("action", action.pk),
        change_url("connector", action.connector_id),
        change_url("agent", agent.pk),
        change_url("actionversion", action.versions.get().pk),
        *(change_url("credential", c.pk) for c in Credential.objects.all()),
    ]:
        assert client.get(url).status_code == 200, url


def test_it_is_for_staff_only(client, catalog, reviewer):
    client.force_login(reviewer)
    response = client.get(reverse("admin:actions_action_changelist"))
    assert response.status_code == 302


# --- credentials ---------------------------------------------------------------------


def test_credential_pages_never_show_secrets(client, catalog):
    pages = [client.get(reverse("admin:actions_credential_changelist"))]
    pages += [client.get(change_url("credential", c.pk)) for c in Credential.objects.all()]
    for page in pages:
        text = page.content.decode()
        assert page.status_code == 200
        assert READ_TOKEN not in text and WRITE_TOKEN not in text
        assert "ciphertext" not in text
    assert "sealed to the worker" in pages[0].content.decode()


def test_credentials_cannot_be_added_or_deleted(client, catalog):
    assert client.get(reverse("admin:actions_credential_add")).status_code == 403
    credential = Credential.objects.first()
    url = reverse("admin:actions_credential_delete", args=[credential.pk])
    assert client.get(url).status_code == 403


def test_revoking_a_credential_is_audited(client, catalog):
    credential = Credential.objects.get(role="write")
    response = client.post(
        reverse("admin:actions_credential_changelist"),
        {"action": "revoke", "_selected_action": [str(credential.pk)]},
    )
    assert response.status_code == 302
    credential.refresh_from_db()
    assert credential.revoked_at is not None
    event = AuditEvent.objects.filter(kind="credential.revoked").get()
    assert event.actor == "user:ada-admin"
    assert event.data["credential"] == str(credential.pk)


# --- editing actions -----------------------------------------------------------------


def test_the_form_shows_the_definition_as_yaml(client, catalog):
    action = catalog["update_contact_email"]
    page = client.get(change_url("action", action.pk))
    initial = page.context["adminform"].form["definition_yaml"].value()
    assert yaml.safe_load(initial) == action.definition


def test_an_edit_creates_a_new_version(client, catalog):
    action = catalog["update_contact_email"]
    response = edit_definition(client, action, edited(action, title="Change one contact's email"))
    assert response.status_code == 302

    action.refresh_from_db()
    assert action.version == 2
    assert action.title == "Change one contact's email"
    assert action.definition["title"] == "Change one contact's email"
    assert action.source == Action.Source.ADMIN
    assert action.updated_by == "user:ada-admin"
    latest = action.versions.order_by("-version").first()
    assert (latest.version, latest.changed_by, latest.digest) == (
        2,
        "user:ada-admin",
        action.digest,
    )
    assert action.versions.count() == 2
    event = AuditEvent.objects.filter(kind="action.updated").last()
    assert event.actor == "user:ada-admin" and event.data["version"] == 2


def test_saving_an_unchanged_definition_makes_no_version(client, catalog):
    action = catalog["update_contact_email"]
    response = edit_definition(client, action, definition_text(action.definition))
    assert response.status_code == 302
    action.refresh_from_db()
    assert action.version == 1
    assert action.versions.count() == 1


def test_the_history_is_shown_and_read_only(client, catalog):
    action = catalog["update_contact_email"]
    edit_definition(client, action, edited(action, title="Second title"))
    page = client.get(change_url("action", action.pk))
    text = page.content.decode()
    assert "version history" in text.lower()
    latest = action.versions.order_by("-version").first()
    assert latest.digest[:12] in text
    (inline,) = page.context["inline_admin_formsets"]
    assert not inline.has_add_permission and not inline.has_change_permission


@pytest.mark.parametrize(
    ("text", "pointer", "message"),
    [
        ("title: [unclosed", "/", "not valid YAML"),
        ("- a list", "/", "mapping"),
        (None, "/input_schema/additionalProperties", "must be false"),
        (None, "/write/body", "names no input property"),
        (None, "/frobnicate", "Additional properties"),
    ],
)
def test_an_invalid_edit_shows_pointer_and_message_and_changes_nothing(
    client, catalog, text, pointer, message
):
    action = catalog["update_contact_email"]
    before = (action.version, action.digest, ActionVersion.objects.count())
    if text is None:
        definition = yaml.safe_load(definition_text(action.definition))
        if pointer == "/input_schema/additionalProperties":
            definition["input_schema"]["additionalProperties"] = True
        elif pointer == "/write/body":
            definition["write"]["body"] = {"email": {"$input": "nope"}}
        else:
            definition["frobnicate"] = 1
            pointer = ""
        text = definition_text(definition)

    response = edit_definition(client, action, text)

    assert response.status_code == 200
    errors = errors_of(response)
    assert any(pointer in e and message in e for e in errors), errors
    action.refresh_from_db()
    assert (action.version, action.digest, ActionVersion.objects.count()) == before


def test_an_edit_over_a_newer_version_is_refused(client, catalog):
    action = catalog["update_contact_email"]
    url = change_url("action", action.pk)
    page = client.get(url)
    # Someone else saves first.
    action_define(
        name=action.name,
        definition={**action.definition, "title": "Theirs"},
        actor="user:someone",
    )
    response = client.post(
        url,
        {
            **inline_management(page),
            "definition_yaml": edited(action, title="Mine"),
            "based_on_version": "1",
        },
    )
    assert response.status_code == 200
    assert "changed since you opened it" in response.content.decode()
    action.refresh_from_db()
    assert (action.version, action.title) == (2, "Theirs")


def test_adding_an_action(client, catalog):
    source = catalog["update_contact_email"]
    response = client.post(
        reverse("admin:actions_action_add"),
        {"name": "update_contact_email_too", "definition_yaml": definition_text(source.definition)},
    )
    assert response.status_code == 302
    added = Action.objects.get(name="update_contact_email_too")
    assert (added.version, added.source, added.class_confirmed) == (1, "admin", True)
    assert added.digest == source.digest
    assert added.versions.get().changed_by == "user:ada-admin"


def test_adding_an_invalid_action_stores_nothing(client, catalog):
    source = catalog["update_contact_email"]
    definition = {**source.definition, "connector": "nowhere"}
    response = client.post(
        reverse("admin:actions_action_add"),
        {"name": "Bad-Name", "definition_yaml": definition_text(definition)},
    )
    assert response.status_code == 200
    assert "lowercase slug" in response.content.decode()
    response = client.post(
        reverse("admin:actions_action_add"),
        {"name": "fine_name", "definition_yaml": definition_text(definition)},
    )
    assert any("/connector" in e and "unknown connector" in e for e in errors_of(response))
    assert not Action.objects.filter(name__in=["fine_name", "Bad-Name"]).exists()


# --- the acceptance criterion: an edit stops old plans -------------------------------


def test_a_plan_made_under_the_old_version_cannot_execute(
    client, catalog, make_plan, reviewer, upstream, executor_key, django_capture_on_commit_callbacks
):
    plan = make_plan()
    with django_capture_on_commit_callbacks(execute=False):
        approval_record(
            plan_id=plan.id,
            reviewer=reviewer,
            decision="approve",
            fingerprint_seen=plan.fingerprint,
        )
    assert Plan.objects.get(pk=plan.pk).status == PlanStatus.APPROVED
    action = Action.objects.get(name="update_contact_email")
    response = edit_definition(client, action, edited(action, summary="Set {contact_id} email."))
    assert response.status_code == 302

    with django_capture_on_commit_callbacks(execute=False):
        outcome = execution_run(plan_id=plan.id)

    plan.refresh_from_db()
    assert outcome == "skipped:refused"
    assert plan.status == PlanStatus.REFUSED
    assert "definition changed" in plan.outcome_detail
    assert upstream.writes() == []


def test_a_plan_made_under_the_old_version_cannot_be_approved(client, catalog, make_plan, reviewer):
    from actions.lib.exceptions import ActionChanged

    plan = make_plan()
    action = Action.objects.get(name="update_contact_email")
    edit_definition(client, action, edited(action, summary="Set {contact_id} email."))
    with pytest.raises(ActionChanged):
        approval_record(
            plan_id=plan.id,
            reviewer=reviewer,
            decision="approve",
            fingerprint_seen=plan.fingerprint,
        )
    assert Plan.objects.get(pk=plan.pk).status == PlanStatus.AWAITING_APPROVAL


# --- enabling ------------------------------------------------------------------------


def bulk(client, admin_action: str, *actions: Action):
    return client.post(
        reverse("admin:actions_action_changelist"),
        {"action": admin_action, "_selected_action": [str(a.pk) for a in actions]},
        follow=True,
    )


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def make_unconfirmed(action: Action, **changes) -> Action:
    """What an OpenAPI import leaves: disabled, class not confirmed."""
    definition = {**action.definition, "enabled": False, **changes}
    stored, _ = action_define(
        name=action.name,
        definition=definition,
        actor="openapi",
        source="openapi",
        class_confirmed=False,
    )
    return stored


def test_confirm_class_and_enable(client, catalog):
    action = make_unconfirmed(catalog["send_reminder"])
    assert (action.enabled, action.class_confirmed) == (False, False)

    response = bulk(client, "confirm_class_and_enable", action)

    action.refresh_from_db()
    assert (action.enabled, action.class_confirmed) == (True, True)
    assert action.definition["enabled"] is True
    assert action.source == "openapi"  # switching on does not change where it came from
    assert action.versions.order_by("-version").first().changed_by == "user:ada-admin"
    assert any("confirmed" in m for m in messages_of(response))


def test_an_incomplete_card_cannot_be_enabled(client, catalog):
    source = catalog["send_reminder"]
    card = {**source.definition["card"], "consent": " "}
    action = make_unconfirmed(source, card=card)
    version = action.version

    response = bulk(client, "confirm_class_and_enable", action)

    action.refresh_from_db()
    assert (action.enabled, action.class_confirmed, action.version) == (False, False, version)
    assert any("not enabled" in m and "/card/consent" in m for m in messages_of(response))


def test_an_unconfirmed_class_cannot_be_enabled_by_editing(client, catalog):
    action = make_unconfirmed(catalog["send_reminder"])
    response = edit_definition(client, action, edited(action, enabled=True))
    assert response.status_code == 200
    assert any("/enabled" in e and "not been confirmed" in e for e in errors_of(response))
    action.refresh_from_db()
    assert (action.enabled, action.class_confirmed) == (False, False)


def test_an_edit_to_an_unconfirmed_action_keeps_it_unconfirmed(client, catalog):
    action = make_unconfirmed(catalog["send_reminder"])
    response = edit_definition(client, action, edited(action, title="Schedule one reminder"))
    assert response.status_code == 302
    action.refresh_from_db()
    assert (action.title, action.enabled, action.class_confirmed) == (
        "Schedule one reminder",
        False,
        False,
    )


def test_an_incomplete_card_cannot_be_enabled_by_editing(client, catalog):
    action = catalog["send_reminder"]
    card = {**action.definition["card"], "retry": ""}
    response = edit_definition(client, action, edited(action, card=card))
    assert response.status_code == 200
    assert any("/card/retry" in e for e in errors_of(response))
    action.refresh_from_db()
    assert action.version == 1


def test_disable(client, catalog, make_plan):
    plan = make_plan()
    action = catalog["update_contact_email"]
    bulk(client, "disable", action)
    action.refresh_from_db()
    assert action.enabled is False
    assert action.definition["enabled"] is False
    assert action.version == 2
    assert plan.action_version == 1  # so the plan can no longer run


# --- connectors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("base_url", "ftp://files.example", "base_url"),
        ("base_url", "files.example", "base_url"),
        ("base_url", "https://user:pw@files.example", "base_url"),
        ("connect_timeout", "0", "connect_timeout"),
        ("connect_timeout", "31", "connect_timeout"),
        ("read_timeout", "121", "read_timeout"),
        ("read_timeout", "-1", "read_timeout"),
        ("name", "Not A Slug", "name"),
    ],
)
def test_connector_validation_matches_the_loader(client, db, field, value, error):
    data = {
        "name": "crm",
        "base_url": "https://crm.example",
        "connect_timeout": "2",
        "read_timeout": "5",
        field: value,
    }
    response = client.post(reverse("admin:actions_connector_add"), data)
    assert response.status_code == 200
    assert error in response.context["adminform"].form.errors
    assert not Connector.objects.exists()


def test_adding_a_connector(client, db):
    response = client.post(
        reverse("admin:actions_connector_add"),
        {
            "name": "crm",
            "base_url": "https://crm.example/api/",
            "connect_timeout": "30",
            "read_timeout": "120",
        },
    )
    assert response.status_code == 302
    connector = Connector.objects.get(name="crm")
    assert connector.base_url == "https://crm.example/api"
    assert AuditEvent.objects.filter(kind="connector.created", actor="user:ada-admin").exists()


# --- agents --------------------------------------------------------------------------


def agent_post(client, agent, *, scopes=(), **fields):
    data = {
        "is_active": "on",
        "actions": [str(a.pk) for a in agent.actions.all()],
        "attributes": json.dumps(agent.attributes),
        "scopes-TOTAL_FORMS": str(len(scopes)),
        "scopes-INITIAL_FORMS": "0",
        "scopes-MIN_NUM_FORMS": "0",
        "scopes-MAX_NUM_FORMS": "1000",
        **fields,
    }
    for i, scope in enumerate(scopes):
        for key, value in scope.items():
            data[f"scopes-{i}-{key}"] = value
    return client.post(change_url("agent", agent.pk), data)


def scope_errors(response) -> list[dict]:
    (inline,) = response.context["inline_admin_formsets"]
    return inline.formset.errors


def test_an_agent_scope_is_saved(client, catalog, agent):
    action = catalog["update_contact_email"]
    response = agent_post(
        client,
        agent,
        scopes=[{"action": action.pk, "field": "contact_id", "values": '["c-1001", "c-1002"]'}],
        attributes='{"workspace": "ws-blue"}',
    )
    assert response.status_code == 302
    scope = AgentScope.objects.get(agent=agent)
    assert (scope.field, scope.values) == ("contact_id", ["c-1001", "c-1002"])
    agent.refresh_from_db()
    assert agent.attributes == {"workspace": "ws-blue"}
    event = AuditEvent.objects.filter(kind="agent.changed").get()
    assert event.data["scopes"] == [
        {"action": "update_contact_email", "field": "contact_id", "values": ["c-1001", "c-1002"]}
    ]


@pytest.mark.parametrize(
    ("field", "values", "error_field", "message"),
    [
        ("nope", '["x"]', "field", "not an input field"),
        ("contact_id", "[]", "values", "non-empty"),
        ("contact_id", '"c-1001"', "values", "non-empty JSON list"),
        ("contact_id", "[true]", "values", "string or an integer"),
        ("contact_id", '[{"a": 1}]', "values", "string or an integer"),
        ("contact_id", '["c-1001", "../x"]', "values", "not valid for contact_id"),
    ],
)
def test_agent_scope_validation(client, catalog, agent, field, values, error_field, message):
    action = catalog["update_contact_email"]
    response = agent_post(
        client, agent, scopes=[{"action": action.pk, "field": field, "values": values}]
    )
    assert response.status_code == 200
    (errors,) = scope_errors(response)
    assert any(message in e for e in errors[error_field]), errors
    assert not AgentScope.objects.exists()


def test_agent_attributes_are_validated(client, catalog, agent):
    response = agent_post(client, agent, attributes='{"bad name": 1}')
    assert response.status_code == 200
    assert "attributes" in response.context["adminform"].form.errors
    response = agent_post(client, agent, attributes='["a"]')
    assert "attributes" in response.context["adminform"].form.errors


def test_deactivating_an_agent(client, catalog, agent):
    response = agent_post(client, agent, is_active="")
    assert response.status_code == 302
    agent.refresh_from_db()
    assert agent.is_active is False


def test_agents_are_not_added_here(client, catalog):
    # The token is made and shown once by `manage.py create_agent`.
    assert client.get(reverse("admin:actions_agent_add")).status_code == 403


def test_the_agent_page_shows_no_token_hash(client, catalog, agent):
    text = client.get(change_url("agent", agent.pk)).content.decode()
    assert agent.token_hash not in text
    assert agent.token_prefix in text


# --- OpenAPI import ------------------------------------------------------------------

PEOPLE_API = json.dumps(
    {
        "openapi": "3.1.0",
        "info": {"title": "People", "version": "1"},
        "paths": {
            "/people/{person_id}": {
                "get": {
                    "operationId": "getPerson",
                    "parameters": [
                        {
                            "name": "person_id",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string", "pattern": "^p-[0-9]{1,10}$"},
                        }
                    ],
                    "responses": {"200": {"description": "the person"}},
                },
                "delete": {
                    "operationId": "deletePerson",
                    "parameters": [
                        {
                            "name": "person_id",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string", "pattern": "^p-[0-9]{1,10}$"},
                        }
                    ],
                    "responses": {"204": {"description": "deleted"}},
                },
            }
        },
    }
)


def import_url() -> str:
    return reverse("admin:actions_action_import_openapi")


def test_the_project_serves_the_action_admin_import_view(db):
    # Nothing routed before admin.site.urls may shadow it.
    assert resolve(import_url()).url_name == "actions_action_import_openapi"


def test_the_import_page_renders(client, catalog):
    page = client.get(import_url())
    assert page.status_code == 200
    text = page.content.decode()
    assert 'enctype="multipart/form-data"' in text
    assert "demo" in text  # the connector choice
    assert import_url() in client.get(reverse("admin:actions_action_changelist")).content.decode()


def test_the_import_refuses_large_files(client, catalog):
    demo = Connector.objects.get(name="demo")
    upload = SimpleUploadedFile("big.json", b" " * (16 * 1024 * 1024 + 1))
    response = client.post(import_url(), {"connector": demo.pk, "file": upload, "dry_run": "on"})
    assert response.status_code == 200
    assert "larger than 16 MiB" in response.content.decode()


def test_the_import_needs_add_permission(client, catalog, reviewer):
    reviewer.is_staff = True
    reviewer.save()
    client.force_login(reviewer)
    assert client.get(import_url()).status_code == 403


def test_a_dry_run_import_shows_the_report_and_stores_nothing(client, catalog):
    demo = Connector.objects.get(name="demo")
    before = (Action.objects.count(), ActionVersion.objects.count())
    upload = SimpleUploadedFile("people.json", PEOPLE_API.encode(), "application/json")

    response = client.post(import_url(), {"connector": demo.pk, "file": upload, "dry_run": "on"})

    assert response.status_code == 200
    report = response.context["report"]
    assert [p.operation for p in report.proposed] == ["DELETE /people/{person_id}"]
    assert "Dry run: nothing was stored" in response.content.decode()
    for proposed in report.proposed:
        assert proposed.name in response.content.decode()
    assert (Action.objects.count(), ActionVersion.objects.count()) == before


def test_a_refused_document_shows_the_problems(client, catalog):
    demo = Connector.objects.get(name="demo")
    upload = SimpleUploadedFile("bad.json", b'{"swagger": "2.0"}', "application/json")
    response = client.post(import_url(), {"connector": demo.pk, "file": upload, "dry_run": "on"})
    assert response.status_code == 200
    assert response.context["problems"]
    assert "nothing was imported" in response.content.decode()


def test_an_imported_action_is_reviewed_then_enabled(client, catalog):
    demo = Connector.objects.get(name="demo")
    upload = SimpleUploadedFile("people.json", PEOPLE_API.encode(), "application/json")
    response = client.post(import_url(), {"connector": demo.pk, "file": upload})
    assert response.status_code == 200
    (proposed,) = response.context["report"].proposed
    action = Action.objects.get(name=proposed.name)
    assert (action.enabled, action.class_confirmed, action.source) == (False, False, "openapi")

    # A person completes the card in the editor; the class stays unconfirmed...
    card = {key: f"The {key}, in plain words." for key in CARD_FIELDS}
    assert edit_definition(client, action, edited(action, card=card)).status_code == 302
    action.refresh_from_db()
    assert (action.enabled, action.class_confirmed) == (False, False)

    # ...until they confirm it, which also switches the action on.
    bulk(client, "confirm_class_and_enable", action)
    action.refresh_from_db()
    assert (action.enabled, action.class_confirmed, action.source) == (True, True, "admin")


JOB = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "maxLength": 40},
        "state": {"type": "string", "enum": ["queued", "done"]},
        "log": {"type": "array", "items": {"type": "string"}},
    },
}
JOB_ID = {"type": "string", "pattern": "^j-[0-9]{1,10}$"}
JOBS_API = json.dumps(
    {
        "openapi": "3.1.0",
        "info": {"title": "Jobs", "version": "1"},
        "paths": {
            "/jobs": {
                "get": {"operationId": "listJobs", "responses": {"200": {"description": "all"}}},
                "post": {
                    "operationId": "startJob",
                    "summary": "Start one job",
                    "requestBody": {
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "properties": {"kind": {"enum": ["export"]}},
                                }
                            }
                        }
                    },
                    "responses": {
                        "202": {
                            "description": "queued",
                            "content": {"application/json": {"schema": JOB}},
                            "links": {
                                "Loop": {"$ref": "#/components/links/Loop"},
                                "Job": {
                                    "operationId": "getJob",
                                    "parameters": {"job_id": "$response.body#/id"},
                                },
                            },
                        }
                    },
                },
            },
            "/jobs/{job_id}": {
                "get": {
                    "operationId": "getJob",
                    "summary": "Read one job's state",
                    "parameters": [
                        {"name": "job_id", "in": "path", "required": True, "schema": JOB_ID}
                    ],
                    "responses": {
                        "200": {
                            "description": "the job",
                            "content": {"application/json": {"schema": JOB}},
                        }
                    },
                }
            },
        },
        "components": {"links": {"Loop": {"$ref": "#/components/links/Loop"}}},
    }
)


def test_the_import_page_shows_reads_their_results_and_checks(client, catalog):
    demo = Connector.objects.get(name="demo")
    upload = SimpleUploadedFile("jobs.json", JOBS_API.encode(), "application/json")

    response = client.post(import_url(), {"connector": demo.pk, "file": upload})

    assert response.status_code == 200
    report = response.context["report"]
    assert [(p.name, p.kind) for p in report.proposed] == [
        ("start_job", "invoke"),
        ("get_job", "read"),
    ]
    page = response.content.decode()
    # Each proposal says what the agent would receive, and the write names its check.
    assert page.count('data-testid="result-fields"') == 2
    assert "<code>id (string)</code>" in page
    assert "<code>state (string: queued, done)</code>" in page
    assert '<code data-testid="check-with">get_job</code>' in page
    assert "Read operation not proposed (1)" in page
    assert "listJobs: GET /jobs" in page and "lists and searches are not proposed" in page
    # A link that refers to itself is said, not a 500.
    assert "link &#x27;Loop&#x27;: recursive schema" in page

    # In Portuguese, the new wording is translated.
    upload = SimpleUploadedFile("jobs.json", JOBS_API.encode(), "application/json")
    translated = client.post(
        import_url(),
        {"connector": demo.pk, "file": upload, "dry_run": "on"},
        HTTP_ACCEPT_LANGUAGE="pt-BR,pt;q=0.9",
    ).content.decode()
    assert "devolve ao agente" in translated and "verificada com" in translated
    assert "Operação de leitura não proposta (1)" in translated

    # The stored read is reviewed like any import: card completed, class confirmed, on.
    read = Action.objects.get(name="get_job")
    assert read.definition["result"]["id"] == {"pointer": "/id", "type": "string", "max_length": 40}
    card = {
        **read.definition["card"],
        **{k: f"The {k}, in plain words." for k in CARD_FIELDS if k != "result"},
    }
    assert edit_definition(client, read, edited(read, card=card)).status_code == 302
    bulk(client, "confirm_class_and_enable", Action.objects.get(name="get_job"))
    read.refresh_from_db()
    assert (read.enabled, read.class_confirmed, read.kind) == (True, True, "read")
    assert Action.objects.get(name="start_job").definition["check_with"] == {
        "action": "get_job",
        "input": {"job_id": {"$result": "id"}},
    }


def test_decision_rules_are_shown_read_only(client, catalog):
    import json

    import yaml

    from actions.catalog import load_catalog
    from actions.models import DecisionRule
    from tests.conftest import demo_catalog_text

    section = yaml.safe_load(demo_catalog_text(decision_rules=True))["reviewers"]
    load_catalog(json.dumps({"version": 1, "reviewers": section}))
    listing = client.get(reverse("admin:actions_decisionrule_changelist")).content.decode()
    assert "deleting-a-contact" in listing
    assert (
        "1 of billing-approvers and 1 of support-leads" in listing
        or "1 of support-leads and 1 of billing-approvers" in listing
    )
    rule = DecisionRule.objects.get(name="invoices-are-billings")
    page = client.get(change_url("decisionrule", rule.pk))
    assert page.status_code == 200
    assert "billing-approvers" in page.content.decode()
    assert client.get(reverse("admin:actions_decisionrule_add")).status_code == 403
    digest = rule.digest
    client.post(change_url("decisionrule", rule.pk), {"name": "renamed"})
    assert DecisionRule.objects.get(pk=rule.pk).digest == digest
    assert (
        client.post(
            reverse("admin:actions_decisionrule_delete", args=[rule.pk]), {"post": "yes"}
        ).status_code
        == 403
    )
    assert DecisionRule.objects.filter(pk=rule.pk).exists()
