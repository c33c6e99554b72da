"""Importing OpenAPI documents: proposals, refusals, lint, and nothing half-stored."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from actions.catalog import load_catalog, validate_action_definition, validate_catalog
from actions.lib.models import AuditEvent
from actions.models import Action, ActionVersion, Connector
from actions.openapi import ImportReport, OpenAPIImportError, import_openapi
from actions.openapi.schemas import IDENTIFIER_PATTERN
from tests.conftest import DEMO_CATALOG

DOCS = Path(__file__).with_name("openapi")


def text_of(name: str) -> str:
    return (DOCS / f"{name}.yaml").read_text()


def run(name_or_text: str, *, connector: str = "api", **kw) -> ImportReport:
    text = text_of(name_or_text) if "\n" not in name_or_text else name_or_text
    return import_openapi(text, connector=connector, actor="ada", **kw)


def messages(item) -> list[str]:
    warnings = item.warnings if hasattr(item, "warnings") else item
    return [w["message"] for w in warnings]


def has_warning(item, fragment: str) -> bool:
    return any(fragment in m for m in messages(item))


def refused(report: ImportReport) -> dict[str, str]:
    return {r.operation: r.reason for r in report.refused}


def writes(report: ImportReport) -> list:
    """The proposed changes (everything but the proposed reads)."""
    return [p for p in report.proposed if p.kind != "read"]


def listed(report: ImportReport) -> dict[str, str]:
    """The GETs and HEADs not proposed, and why."""
    return {r.operation: r.reason for r in report.reads}


def mini(paths: dict, *, version: str = "3.1.0", **extra) -> str:
    """A small inline document."""
    document = {"openapi": version, "info": {"title": "t", "version": "1"}, "paths": paths}
    document.update(extra)
    return yaml.safe_dump(document, sort_keys=False)


CONTACT_GET = {
    "operationId": "getContact",
    "responses": {
        "200": {
            "description": "ok",
            "headers": {"ETag": {"schema": {"type": "string"}}},
            "content": {
                "application/json": {
                    "schema": {"type": "object", "properties": {"email": {"type": "string"}}}
                }
            },
        }
    },
}
ID_PARAM = {
    "name": "contact_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": "^c-[0-9]{1,10}$"},
}


def json_body(schema: dict) -> dict:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def contact_patch(schema: dict | None = None, **op) -> dict:
    body = schema or {
        "type": "object",
        "properties": {"email": {"type": "string", "format": "email", "maxLength": 254}},
    }
    return {
        "/contacts/{contact_id}": {
            "parameters": [ID_PARAM],
            "get": CONTACT_GET,
            "patch": {
                "operationId": "updateContactEmail",
                "summary": "Change one contact's email address",
                "requestBody": json_body(body),
                "responses": {"200": {"description": "ok"}},
                **op,
            },
        }
    }


@pytest.fixture
def api(db):
    return Connector.objects.create(name="api", base_url="https://api.example.com")


@pytest.fixture
def connectors(db):
    for name in ("deployments", "invoicing", "crm"):
        Connector.objects.create(name=name, base_url=f"https://{name}.example.com")


def assert_loadable(report: ImportReport) -> None:
    """Every proposal passes the loader's checks: alone (a check_with checked against the
    read proposed with it) and all together, as one catalog file."""
    reads = {p.name: p.definition for p in report.proposed if p.kind == "read"}
    for proposed in report.proposed:
        check = proposed.definition.get("check_with")
        targets = {check["action"]: reads[check["action"]]} if check else {}
        problems = validate_action_definition(
            proposed.name, proposed.definition, follow_up_targets=targets
        )
        assert problems == [], proposed.name
    validate_catalog(
        {"version": 1, "actions": {p.name: p.definition for p in report.proposed}}, "import"
    )


def walk_schemas(schema: dict, where: str = ""):
    yield where, schema
    for name, sub in (schema.get("properties") or {}).items():
        yield from walk_schemas(sub, f"{where}/{name}")
    if isinstance(schema.get("items"), dict):
        yield from walk_schemas(schema["items"], f"{where}/items")


# --- the three documents ---------------------------------------------------------------------


def test_deployments_api(connectors):
    report = run("deployments", connector="deployments")

    assert [(p.name, p.operation, p.kind, p.consequence_class) for p in report.proposed] == [
        (
            "get_build_status",
            "GET /projects/{project_id}/builds/{build_id}",
            "read",
            "observation",
        ),
        (
            "create_preview_deployment",
            "POST /projects/{project_id}/deployments",
            "invoke",
            "external",
        ),
        (
            "get_deployment",
            "GET /projects/{project_id}/deployments/{deployment_id}",
            "read",
            "observation",
        ),
        (
            "set_deployment_ttl",
            "PATCH /projects/{project_id}/deployments/{deployment_id}",
            "update",
            "reversible",
        ),
        (
            "delete_preview_deployment",
            "DELETE /projects/{project_id}/deployments/{deployment_id}",
            "delete",
            "irreversible",
        ),
        (
            "promote_deployment",
            "POST /projects/{project_id}/deployments/{deployment_id}/promote",
            "invoke",
            "external",
        ),
    ]
    assert report.refused == []
    # A list is not a read an agent gets one record from.
    assert listed(report) == {
        "listDeployments: GET /projects/{project_id}/deployments": "the answer is a list: "
        "not proposed"
    }
    assert has_warning(report.warnings, "webhooks at the top level is not imported")

    create = report.action("create_preview_deployment")
    # The class is the document's declaration; the card comes whole from x-countersign.
    assert create.class_source == "x-countersign"
    assert create.definition["card"]["scope"] == (
        "One project and one build; never staging or production."
    )
    assert not has_warning(create, "card incomplete")
    assert create.status_operation == (
        "getDeployment: GET /projects/{project_id}/deployments/{deployment_id}"
    )
    # The 202's link names the read and where its input comes from: the project from the
    # write's input, the deployment from the answer's id, which the result declares.
    assert create.definition["check_with"] == {
        "action": "get_deployment",
        "input": {"project_id": {"$input": "project_id"}, "deployment_id": {"$result": "id"}},
    }
    assert create.definition["result"] == {
        "id": {"pointer": "/id", "type": "string", "max_length": 200},
        "state": {
            "pointer": "/state",
            "type": "string",
            "max_length": 200,
            "enum": ["queued", "running", "ready", "failed"],
        },
        "revision": {"pointer": "/revision", "type": "integer"},
        "build_id": {"pointer": "/build_id", "type": "string", "max_length": 200},
    }
    assert has_warning(create, "'url' is a URL (results never carry URLs")
    # x-countersign's rules, asked at the 202's Location.
    assert create.definition["status"] == {
        "from_location": True,
        "done_when": {"pointer": "/state", "equals": "ready"},
        "failed_when": {"pointer": "/state", "equals": "failed"},
        "max_checks": 20,
    }
    assert has_warning(
        create, "202 Accepted: the agent checks the work with the read get_deployment"
    )
    assert not has_warning(create, "202 without a status operation")
    assert has_warning(create, "POST with no idempotency key and no conditional write")
    assert create.definition["input_schema"]["required"] == ["project_id", "build_id", "reason"]
    assert create.definition["write"] == {
        "method": "POST",
        "body": {"build_id": {"$input": "build_id"}, "reason": {"$input": "reason"}},
        "content_type": "application/json",
    }
    assert "read" not in create.definition

    read = report.action("get_deployment")
    assert read.definition["input_schema"]["required"] == ["project_id", "deployment_id"]
    assert read.definition["target"] == "/projects/{project_id}/deployments/{deployment_id}"
    assert read.definition["result"] == create.definition["result"]
    assert read.definition["card"]["result"] == (
        "Only these fields of the upstream's answer: id, build_id, state, revision."
    )
    assert read.definition["enabled"] is False
    assert has_warning(read, "card incomplete (scope, consent, retry)")
    assert has_warning(read, "mark it sensitive: true")

    ttl = report.action("set_deployment_ttl")
    assert ttl.class_source == "method"
    assert ttl.definition["read"] == {"path": "/projects/{project_id}/deployments/{deployment_id}"}
    assert ttl.definition["version"] == {"source": "field", "field": "/revision"}
    assert ttl.definition["write"]["precondition"] == "field"
    assert ttl.definition["write"]["precondition_field"] == "/expected_revision"
    # The expected revision is filled in by the worker, never by the agent.
    assert set(ttl.definition["input_schema"]["properties"]) == {
        "project_id",
        "deployment_id",
        "ttl_hours",
    }
    assert ttl.definition["write"]["body"] == {"ttl_hours": {"$input": "ttl_hours"}}
    assert not has_warning(ttl, "no idempotency key")
    assert ttl.definition["input_schema"]["properties"]["deployment_id"] == {
        "type": "string",
        "pattern": IDENTIFIER_PATTERN,
        "maxLength": 100,
    }
    assert has_warning(ttl, "identifier 'deployment_id' has no pattern or enum")
    assert has_warning(ttl, "card incomplete (scope, result, consent, retry)")
    assert ttl.definition["card"]["effect"] == "Change how long one preview deployment is kept"
    # Its 200 documents no body: no result. An unknown outcome is checked by the read of
    # the very GET the update reads.
    assert "result" not in ttl.definition
    assert ttl.definition["check_with"] == {
        "action": "get_deployment",
        "input": {
            "project_id": {"$input": "project_id"},
            "deployment_id": {"$input": "deployment_id"},
        },
    }

    delete = report.action("delete_preview_deployment")
    assert delete.definition["version"] == {"source": "field", "field": "/revision"}
    assert delete.definition["write"] == {"method": "DELETE"}
    assert has_warning(delete, "DELETE with no idempotency key and no conditional write")

    promote = report.action("promote_deployment")
    assert promote.status_operation == ""
    assert has_warning(promote, "202 without a status operation: outcomes would stay pending")
    note = promote.definition["input_schema"]["properties"]["note"]
    assert note == {"type": ["string", "null"], "maxLength": 240}


def test_invoicing_api(connectors):
    report = run("invoicing", connector="invoicing")

    assert {p.name: (p.kind, p.consequence_class) for p in report.proposed} == {
        "create_invoice": ("invoke", "external"),
        "get_invoice": ("read", "observation"),
        "update_invoice": ("update", "reversible"),
        "void_invoice": ("delete", "irreversible"),
        "send_invoice": ("invoke", "external"),
    }
    assert report.reads == []
    assert refused(report) == {
        "POST /invoices/{invoice_id}/actions": "free-form request body (an object with no "
        "named fields): generic passthrough",
        "POST /webhooks": "'callback_url' names a URL: a URL an agent chooses makes the "
        "action a generic passthrough",
    }

    create = report.action("create_invoice")
    assert create.definition["write"]["idempotency_header"] == "Idempotency-Key"
    assert not has_warning(create, "no idempotency key")
    assert has_warning(create, "header 'X-Request-Id' is not forwarded")
    schema = create.definition["input_schema"]
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["customer_id", "currency", "lines"]
    # OpenAPI 3.0: nullable becomes a null type; boolean exclusiveMinimum a number.
    assert schema["properties"]["memo"] == {"type": ["string", "null"], "maxLength": 500}
    line = schema["properties"]["lines"]["items"]
    assert line["additionalProperties"] is False
    assert line["properties"]["amount_cents"] == {
        "type": "integer",
        "maximum": 100000000,
        "exclusiveMinimum": 0,
    }
    assert schema["properties"]["lines"]["maxItems"] == 100
    assert has_warning(create, "'lines': no maxItems; proposed 100")
    # An open map is not offered to agents (it is optional, so the action stays usable).
    assert "metadata" not in schema["properties"]
    assert has_warning(create, "optional field 'metadata' is a free-form object: not offered")
    # The 201 answer (allOf of the new invoice and its server fields) gives the result:
    # the ids first, then status and version, then the rest; the line items and the
    # metadata are nested, so a person adds what the agent needs.
    assert list(create.definition["result"]) == [
        "id",
        "customer_id",
        "status",
        "version",
        "currency",
        "memo",
    ]
    assert create.definition["result"]["status"]["enum"] == ["draft", "open", "paid", "void"]
    assert has_warning(create, "nested objects and arrays are never proposed (lines, metadata)")
    # No link and no GET of the same path: nothing checks a create's work.
    assert "check_with" not in create.definition

    update = report.action("update_invoice")
    vague = [w for w in update.warnings if "vague verb 'manage'" in w["message"]]
    assert vague and vague[0]["pointer"] == "/paths/~1invoices~1{invoice_id}/patch/summary"
    # The version field is found through the response schema's allOf.
    assert update.definition["version"] == {"source": "field", "field": "/version"}
    assert "precondition" not in update.definition["write"]
    assert has_warning(update, "PATCH with no idempotency key and no conditional write")
    assert update.definition["input_schema"]["properties"]["memo"] == {
        "type": ["string", "null"],
        "maxLength": 200,
    }
    assert has_warning(update, "'memo': string without maxLength; proposed 200")
    assert update.definition["write"]["content_type"] == "application/json"

    for change in (update, report.action("void_invoice")):
        assert change.check_with == "get_invoice"
    invoice = report.action("get_invoice")
    assert invoice.definition["result"] == create.definition["result"]

    void = report.action("void_invoice")
    assert has_warning(void, "query parameter 'reason' is not sent")
    assert "reason" not in void.definition["input_schema"]["properties"]

    send = report.action("send_invoice")
    assert send.definition["write"]["body"] == {}
    assert send.definition["write"]["idempotency_header"] == "Idempotency-Key"
    assert has_warning(send, "no request body documented")


def test_crm_api(connectors):
    report = run("crm", connector="crm")

    assert {p.name: (p.operation, p.kind, p.consequence_class) for p in report.proposed} == {
        "create_contact": ("POST /contacts", "create", "reversible"),
        "get_contact": ("GET /contacts/{contact_id}", "read", "observation"),
        "update_contact": ("PATCH /contacts/{contact_id}", "update", "reversible"),
        "replace_contact_address": ("PUT /contacts/{contact_id}", "replace", "reversible"),
        "delete_contact": ("DELETE /contacts/{contact_id}", "delete", "irreversible"),
    }
    assert refused(report) == {
        "PUT /contacts/{contact_id}/avatar": "'image_url' names a URL: a URL an agent chooses "
        "makes the action a generic passthrough"
    }
    # A search (a required query parameter, no path parameter): not proposed.
    assert listed(report) == {
        "listContacts: GET /contacts": "no path parameter names one resource: lists and "
        "searches are not proposed"
    }
    contact = report.action("get_contact")
    assert contact.definition["result"] == {
        "id": {"pointer": "/id", "type": "string", "max_length": 200},
        "workspace": {
            "pointer": "/workspace",
            "type": "string",
            "max_length": 200,
            "enum": ["ws-blue", "ws-red"],
        },
        "name": {"pointer": "/name", "type": "string", "max_length": 120},
        "email": {"pointer": "/email", "type": "string", "max_length": 254},
    }
    assert has_warning(contact, "nested objects and arrays are never proposed (tags, address)")

    for name in ("update_contact", "replace_contact_address", "delete_contact"):
        action = report.action(name)
        assert action.definition["read"] == {"path": "/contacts/{contact_id}"}
        # ETag on the read (through components/responses and components/headers) and
        # If-Match on the write: a conditional write, so no "unsafe" warning.
        assert action.definition["version"] == {"source": "etag"}
        assert action.definition["write"]["precondition"] == "if_match"
        assert not has_warning(action, "no conditional write")
        assert not has_warning(action, "documents no If-Match")

    update = report.action("update_contact")
    assert update.definition["write"]["content_type"] == "application/merge-patch+json"
    assert update.definition["input_schema"] == {
        "type": "object",
        "additionalProperties": False,
        "required": ["contact_id"],
        "properties": {
            "contact_id": {"type": "string", "pattern": "^c-[0-9]{1,10}$", "maxLength": 200},
            "name": {"type": "string", "minLength": 1, "maxLength": 120},
            "email": {"type": "string", "format": "email", "maxLength": 254},
            "phone": {
                "type": ["string", "null"],
                "pattern": "^\\+[0-9]{6,15}$",
                "maxLength": 200,
            },
        },
    }
    # An anchored, bounded pattern already bounds the value: no warning for the guess.
    assert not has_warning(update, "string without maxLength")

    replace = report.action("replace_contact_address")
    address = replace.definition["input_schema"]["properties"]["address"]
    assert address["additionalProperties"] is False
    assert address["required"] == ["street", "city", "country"]
    assert has_warning(replace, "'address': closed with additionalProperties: false")

    create = report.action("create_contact")
    assert create.class_source == "x-countersign"
    # A POST to a collection gets a server-assigned id: there is nothing to read first.
    assert create.definition["read"] is None
    assert "id" not in create.definition["input_schema"]["properties"]  # readOnly
    # ...but the answer carries it, and the 201's link (an operationRef, through
    # components/links) says the read of the new contact takes it.
    assert create.definition["result"]["id"] == {
        "pointer": "/id",
        "type": "string",
        "max_length": 200,
    }
    assert create.definition["check_with"] == {
        "action": "get_contact",
        "input": {"contact_id": {"$result": "id"}},
    }
    assert has_warning(create, "POST with no idempotency key and no conditional write")


@pytest.mark.parametrize("name", ["deployments", "invoicing", "crm"])
def test_every_proposal_is_a_valid_narrow_definition(connectors, name):
    report = run(name, connector=name, dry_run=True)
    assert report.proposed
    assert_loadable(report)
    for proposed in report.proposed:
        definition = proposed.definition
        assert definition["enabled"] is False
        assert definition["input_schema"]["additionalProperties"] is False
        for where, schema in walk_schemas(definition["input_schema"]):
            types = schema.get("type")
            types = types if isinstance(types, list) else [types]
            if "object" in types:
                assert schema["additionalProperties"] is False, where
            if "string" in types and not {"enum", "const"} & set(schema):
                assert "maxLength" in schema, where
            if "array" in types:
                assert "maxItems" in schema, where


# --- storing ----------------------------------------------------------------------------------


def test_imported_actions_are_stored_disabled_and_unconfirmed(connectors):
    report = run("crm", connector="crm", source_name="crm.yaml")

    assert {p.name: p.stored for p in report.proposed} == dict.fromkeys(
        [
            "create_contact",
            "get_contact",
            "update_contact",
            "replace_contact_address",
            "delete_contact",
        ],
        "created",
    )
    assert Action.objects.count() == 5
    for proposed in report.proposed:
        action = Action.objects.get(name=proposed.name)
        assert action.enabled is False
        assert action.class_confirmed is False
        assert action.source == "openapi"
        assert action.updated_by == "ada"
        assert action.connector.name == "crm"
        assert action.lint == proposed.warnings
        assert action.version == 1
        assert ActionVersion.objects.filter(action=action).count() == 1
    # Even a class the document declares waits for a person to confirm it.
    assert Action.objects.get(name="create_contact").class_confirmed is False
    event = AuditEvent.objects.filter(kind="openapi.imported").get()
    assert event.actor == "ada"
    assert event.data["source"] == "crm.yaml"
    assert event.data["stored"] == sorted(p.name for p in report.proposed)
    assert event.data["refused"] == ["PUT /contacts/{contact_id}/avatar"]


def test_importing_the_same_document_again_changes_nothing(connectors):
    run("crm", connector="crm")
    before = {a.name: (a.version, a.digest) for a in Action.objects.all()}
    events = AuditEvent.objects.count()

    again = run("crm", connector="crm")

    assert {p.stored for p in again.proposed} == {"unchanged"}
    assert {a.name: (a.version, a.digest) for a in Action.objects.all()} == before
    assert AuditEvent.objects.count() == events


def test_a_changed_operation_gets_a_new_version(connectors):
    run("crm", connector="crm")
    changed = text_of("crm").replace(
        "summary: Delete one contact permanently", "summary: Delete one contact for good"
    )

    report = run(changed, connector="crm")

    assert {p.name: p.stored for p in report.proposed}["delete_contact"] == "updated"
    assert {p.name: p.stored for p in report.proposed}["update_contact"] == "unchanged"
    action = Action.objects.get(name="delete_contact")
    assert (action.version, action.title) == (2, "Delete one contact for good")


def test_a_dry_run_stores_nothing(connectors):
    events = AuditEvent.objects.count()

    report = run("invoicing", connector="invoicing", dry_run=True)

    assert report.dry_run
    assert len(report.proposed) == 5
    assert {p.stored for p in report.proposed} == {None}
    assert Action.objects.count() == 0
    assert AuditEvent.objects.count() == events


def test_a_reviewed_action_is_not_overwritten(connectors):
    run("crm", connector="crm")
    # An admin completed the card and confirmed the class.
    Action.objects.filter(name="delete_contact").update(class_confirmed=True)
    before = Action.objects.get(name="delete_contact").digest
    changed = text_of("crm").replace(
        "summary: Delete one contact permanently", "summary: Delete one contact for good"
    )

    report = run(changed, connector="crm")

    delete = report.action("delete_contact")
    assert delete.stored is None
    assert has_warning(delete, "an admin has reviewed this action")
    action = Action.objects.get(name="delete_contact")
    assert (action.version, action.digest, action.class_confirmed) == (1, before, True)


def test_a_name_taken_by_a_catalog_action_is_refused(db):
    load_catalog(DEMO_CATALOG.read_text(), base_dir=DEMO_CATALOG.parent)
    before = Action.objects.get(name="update_contact_email")

    report = run(mini(contact_patch()), connector="demo")

    assert report.proposed == []
    assert (
        "an action named 'update_contact_email' already exists (from catalog file)"
        in (refused(report)["PATCH /contacts/{contact_id}"])
    )
    # The GET's read has the name of the catalog's own read: refused too, never re-pointed.
    assert (
        "an action named 'get_contact' already exists (from catalog file)"
        in (refused(report)["GET /contacts/{contact_id}"])
    )
    after = Action.objects.get(name="update_contact_email")
    assert (after.version, after.digest, after.source) == (before.version, before.digest, "catalog")


# --- whole-document refusals ------------------------------------------------------------------


@pytest.mark.parametrize(
    "ref",
    [
        "https://schemas.example.com/contact.yaml#/Contact",
        "./schemas/contact.yaml#/Contact",
        "contact.yaml",
        "#Contact",
    ],
)
def test_a_reference_outside_the_document_refuses_all_of_it(api, ref):
    paths = contact_patch()
    paths["/notes"] = {
        "post": {
            "operationId": "createNote",
            "requestBody": json_body({"$ref": ref}),
            "responses": {"201": {"description": "ok"}},
        }
    }

    with pytest.raises(OpenAPIImportError) as info:
        run(mini(paths))

    [problem] = info.value.problems
    assert problem.pointer == (
        "/paths/~1notes/post/requestBody/content/application~1json/schema/$ref"
    )
    assert "only internal references (#/...) are followed" in problem.message
    # The good operation was not stored either.
    assert Action.objects.count() == 0


def test_every_outside_reference_is_named(api):
    paths = contact_patch(
        {"$ref": "https://example.com/a.json"},
        parameters=[{"$ref": "common.yaml#/parameters/Trace"}],
    )
    with pytest.raises(OpenAPIImportError) as info:
        run(mini(paths))
    assert len(info.value.problems) == 2


def test_a_dangling_reference_refuses_the_document(api):
    with pytest.raises(OpenAPIImportError, match="points at nothing in this document"):
        run(mini(contact_patch({"$ref": "#/components/schemas/Missing"})))


@pytest.mark.parametrize(
    "text, message",
    [
        ("swagger: '1.2'\ninfo: {title: t, version: '1'}\npaths: {}\n", "Swagger '1.2' is not"),
        (
            "swagger: '2.0'\ninfo: {title: t, version: '1'}\npaths: {}\n",
            "the document has no paths",
        ),
        ("openapi: 3.2.0\npaths: {/a: {}}\n", "OpenAPI 3.2.0 is not supported"),
        ("info: {title: t}\npaths: {/a: {}}\n", "not an OpenAPI document"),
        ("openapi: 3.1.0\npaths: {}\n", "the document has no paths"),
        ("- just\n- a list\n", "must hold a mapping"),
        ("openapi: 3.1.0\npaths: {/a: [\n", "not valid YAML"),
        ("openapi: 3.1.0\nopenapi: 3.0.0\npaths: {}\n", "duplicate key"),
        ('{"openapi": "3.1.0", "openapi": "3.0.0"}', "duplicate key"),
        ("a: &a [*a, *a]\nopenapi: 3.1.0\n", "nested more than 200 levels deep"),
    ],
)
def test_documents_that_are_refused_whole(api, text, message):
    with pytest.raises(OpenAPIImportError) as info:
        import_openapi(text, connector="api", actor="ada")
    assert message in str(info.value)
    assert Action.objects.count() == 0


def test_an_unknown_connector_refuses_the_import(db):
    with pytest.raises(OpenAPIImportError, match="unknown connector 'crm'"):
        run("crm", connector="crm")
    assert Connector.objects.count() == 0
    assert Action.objects.count() == 0


def test_the_connector_can_be_created_from_the_servers_entry(db):
    report = run("crm", connector="crm", create_connector=True)

    assert report.connector_created
    # The server variable's default is filled in.
    assert Connector.objects.get(name="crm").base_url == "https://crm.example.com/api/v7"
    assert Action.objects.filter(connector__name="crm").count() == 5  # 4 changes and a read


def test_a_dry_run_does_not_create_the_connector(db):
    report = run("crm", connector="crm", create_connector=True, dry_run=True)
    assert report.connector_created and len(report.proposed) == 5
    assert Connector.objects.count() == 0


def test_a_relative_server_cannot_become_a_connector(db):
    text = mini(contact_patch(), servers=[{"url": "/v1"}])
    with pytest.raises(OpenAPIImportError, match="servers\\[0\\].url \\('/v1'\\) is not an"):
        import_openapi(text, connector="crm", actor="ada", create_connector=True)
    assert Connector.objects.count() == 0


def test_json_documents_are_accepted(api):
    document = yaml.safe_load(mini(contact_patch()))
    report = import_openapi(json.dumps(document), connector="api", actor="ada", dry_run=True)
    assert [p.name for p in report.proposed] == ["get_contact", "update_contact_email"]


# --- single operations refused ----------------------------------------------------------------


@pytest.mark.parametrize(
    "request_body, reason",
    [
        (
            {"content": {"application/json": {}}},
            "free-form request body (no schema): generic passthrough",
        ),
        (
            json_body({"type": "object"}),
            "free-form request body (an object with no named fields): generic passthrough",
        ),
        (
            json_body({"type": "object", "additionalProperties": {"type": "string"}}),
            "free-form request body (an object with no named fields)",
        ),
        (json_body({"type": "array", "items": {"type": "string"}}), "is array, not an object"),
        (
            json_body({"oneOf": [{"type": "object", "properties": {"a": {"type": "string"}}}]}),
            "one of several shapes (oneOf)",
        ),
        (
            {"content": {"multipart/form-data": {"schema": {"type": "object"}}}},
            "request body types ['multipart/form-data'] cannot be sent",
        ),
        (
            json_body(
                {
                    "type": "object",
                    "required": ["payload"],
                    "properties": {"payload": {"type": "object"}},
                }
            ),
            "required field 'payload' is a free-form object: a generic passthrough",
        ),
        (
            json_body({"type": "object", "properties": {"target": {"type": "string"}}}),
            None,
        ),
        (
            json_body(
                {
                    "type": "object",
                    "required": ["link"],
                    "properties": {"link": {"type": "string", "format": "url"}},
                }
            ),
            "'link' is a URL (format url)",
        ),
        (
            json_body(
                {
                    "type": "object",
                    "required": ["endpoint"],
                    "properties": {"endpoint": {"type": "string", "maxLength": 9}},
                }
            ),
            "'endpoint' names a URL",
        ),
        (
            json_body(
                {
                    "type": "object",
                    "properties": {"hooks": {"type": "array", "items": {"type": "string"}}},
                    "required": ["hooks"],
                }
            ),
            None,
        ),
    ],
)
def test_operations_that_would_be_a_generic_passthrough_are_refused(api, request_body, reason):
    paths = {
        "/messages": {
            "post": {
                "operationId": "sendMessage",
                "summary": "Send one message",
                "requestBody": request_body,
                "responses": {"200": {"description": "ok"}},
            }
        }
    }
    report = run(mini(paths))
    if reason is None:
        assert [p.name for p in report.proposed] == ["send_message"]
        return
    assert report.proposed == []
    assert reason in refused(report)["POST /messages"]
    assert Action.objects.count() == 0


def test_a_url_path_parameter_is_refused(api):
    paths = {
        "/fetch/{url}": {
            "post": {
                "operationId": "fetchUrl",
                "parameters": [
                    {"name": "url", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "responses": {"200": {"description": "ok"}},
            }
        }
    }
    assert "'url' names a URL" in refused(run(mini(paths)))["POST /fetch/{url}"]


def test_a_recursive_schema_refuses_only_its_operation(api):
    paths = contact_patch()
    paths["/folders"] = {
        "post": {
            "operationId": "createFolder",
            "requestBody": json_body({"$ref": "#/components/schemas/Folder"}),
            "responses": {"201": {"description": "ok"}},
        }
    }
    components = {
        "schemas": {
            "Folder": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 50},
                    "children": {"type": "array", "items": {"$ref": "#/components/schemas/Folder"}},
                },
            }
        }
    }

    report = run(mini(paths, components=components))

    assert [p.name for p in writes(report)] == ["update_contact_email"]
    assert (
        "recursive schema: #/components/schemas/Folder refers back to itself"
        in (refused(report)["POST /folders"])
    )
    assert sorted(Action.objects.values_list("name", flat=True)) == [
        "get_contact",
        "update_contact_email",
    ]


def test_a_required_query_parameter_is_refused(api):
    op = {"parameters": [{"name": "notify", "in": "query", "required": True, "schema": {}}]}
    report = run(mini(contact_patch(**op)))
    assert "required query parameter 'notify'" in refused(report)["PATCH /contacts/{contact_id}"]


def test_a_delete_without_a_read_is_refused_and_a_patch_becomes_an_invoke(api):
    paths = {
        "/tags/{tag_id}": {
            "parameters": [{**ID_PARAM, "name": "tag_id"}],
            "delete": {"operationId": "deleteTag", "responses": {"204": {"description": "ok"}}},
            "patch": {
                "operationId": "renameTag",
                "summary": "Rename one tag",
                "requestBody": json_body(
                    {"type": "object", "properties": {"label": {"type": "string"}}}
                ),
                "responses": {"200": {"description": "ok"}},
            },
        }
    }
    report = run(mini(paths))

    assert "a delete must read its target" in refused(report)["DELETE /tags/{tag_id}"]
    rename = report.action("rename_tag")
    # Nothing read, nothing to undo from: an invoke, and as consequential as one.
    assert (rename.kind, rename.consequence_class) == ("invoke", "external")
    assert rename.definition["write"]["method"] == "PATCH"
    assert has_warning(rename, "no GET /tags/{tag_id} to read the target: proposed as invoke")
    assert has_warning(rename, "proposed external, not reversible: with no GET /tags/{tag_id}")


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"responses": "ok"}, None),
        ({"parameters": True}, None),
        ({"requestBody": ["not", "a", "mapping"]}, "the request body is not a Request Body object"),
        (
            {"requestBody": json_body({"type": "object", "properties": {"a": 5}})},
            "'a': not a usable schema",
        ),
        (
            {"requestBody": json_body({"allOf": [{"required": [{}]}, "x"]})},
            "allOf parts must be schema objects",
        ),
    ],
)
def test_a_malformed_operation_is_refused_not_a_crash(api, change, reason):
    report = run(mini(contact_patch(**change)), dry_run=True)
    if reason is None:
        assert [p.name for p in writes(report)] == ["update_contact_email"]
    else:
        assert writes(report) == []
        assert refused(report) == {"PATCH /contacts/{contact_id}": reason}


def test_options_and_trace_are_not_actions(api):
    paths = contact_patch()
    paths["/contacts/{contact_id}"]["options"] = {"responses": {"200": {"description": "ok"}}}
    report = run(mini(paths))
    assert refused(report) == {"OPTIONS /contacts/{contact_id}": "OPTIONS is not an action"}


def test_two_operations_with_one_name(api):
    paths = contact_patch()
    paths["/people/{contact_id}"] = contact_patch()["/contacts/{contact_id}"]
    report = run(mini(paths))
    assert [p.operation for p in report.proposed] == [
        "GET /contacts/{contact_id}",
        "PATCH /contacts/{contact_id}",
    ]
    assert (
        "the name 'update_contact_email' is already proposed for PATCH /contacts"
        in (refused(report)["PATCH /people/{contact_id}"])
    )
    # The second GET of the same name is refused the same way, and the second PATCH is
    # never checked with the read that was refused.
    assert (
        "the name 'get_contact' is already proposed for GET /contacts"
        in (refused(report)["GET /people/{contact_id}"])
    )
    assert report.action("update_contact_email").check_with == "get_contact"


# --- proposals and lint -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "summary, verb",
    [
        ("Manage contacts", "manage"),
        ("Process a contact change", "process"),
        ("Handles contact updates", "handle"),
        ("Perform a contact operation", "perform"),
        ("Change one contact's email address", None),
    ],
)
def test_vague_verbs_in_summaries(api, summary, verb):
    report = run(mini(contact_patch(summary=summary)), dry_run=True)
    action = report.action("update_contact_email")
    assert has_warning(action, f"vague verb '{verb}'") is (verb is not None)
    assert action.definition["title"] == summary


def test_a_missing_operation_id_and_summary(api):
    paths = contact_patch()
    del paths["/contacts/{contact_id}"]["patch"]["operationId"]
    del paths["/contacts/{contact_id}"]["patch"]["summary"]

    report = run(mini(paths), dry_run=True)

    action = report.action("patch_contacts_contact_id")
    assert has_warning(action, "no operationId: the name 'patch_contacts_contact_id' was derived")
    assert has_warning(action, "no summary")
    assert action.definition["title"] == "Patch contacts contact id"


def test_an_etag_without_if_match_is_flagged(api):
    report = run(mini(contact_patch()), dry_run=True)
    action = report.action("update_contact_email")
    assert action.definition["version"] == {"source": "etag"}
    assert action.definition["write"]["precondition"] == "if_match"
    assert has_warning(action, "the read returns an ETag but the write documents no If-Match")


def test_no_version_at_all_falls_back_to_a_hash(api):
    paths = contact_patch()
    paths["/contacts/{contact_id}"]["get"] = {
        "operationId": "getContact",
        "responses": {"200": {"description": "ok"}},
    }
    report = run(mini(paths), dry_run=True)
    action = report.action("update_contact_email")
    assert action.definition["version"] == {"source": "hash"}
    assert has_warning(action, "no ETag and no version field")
    assert has_warning(action, "PATCH with no idempotency key and no conditional write")


def test_x_countersign_declares_class_kind_card_version_and_retry(api):
    op = {
        "parameters": [{"name": "Idempotency-Key", "in": "header", "schema": {"type": "string"}}],
        "x-countersign": {
            "name": "change_contact_email",
            "class": "external",
            "card": {"consent": "Two people.", "retry": "Never."},
            "version": {"source": "hash"},
            "retry": "never",
        },
    }
    report = run(mini(contact_patch(**op)), dry_run=True)
    action = report.action("change_contact_email")
    assert (action.consequence_class, action.class_source) == ("external", "x-countersign")
    assert action.definition["version"] == {"source": "hash"}
    assert "precondition" not in action.definition["write"]
    # The document says the upstream does not honour the key it documents.
    assert "idempotency_header" not in action.definition["write"]
    assert action.definition["card"]["consent"] == "Two people."
    assert has_warning(action, "card incomplete (scope, result)")

    declared = {"x-countersign": {"retry": {"idempotency_header": "X-Request-Key"}}}
    report = run(mini(contact_patch(**declared)), dry_run=True)
    action = report.action("update_contact_email")
    assert action.definition["write"]["idempotency_header"] == "X-Request-Key"


@pytest.mark.parametrize(
    "extension, message",
    [
        ({"clas": "external"}, "x-countersign: Additional properties are not allowed"),
        ({"class": "harmless"}, "x-countersign: 'harmless' is not one of"),
        ({"status_operation": "getNothing"}, "status_operation 'getNothing' names no GET"),
    ],
)
def test_a_bad_x_countersign_refuses_its_operation(api, extension, message):
    report = run(mini(contact_patch(**{"x-countersign": extension})))
    assert message in refused(report)["PATCH /contacts/{contact_id}"]


def test_a_202_with_location_finds_its_status_operation(api):
    paths = {
        "/exports": {
            "post": {
                "operationId": "startExport",
                "summary": "Start one export of a workspace's contacts",
                "parameters": [
                    {"name": "Idempotency-Key", "in": "header", "schema": {"type": "string"}}
                ],
                "requestBody": json_body(
                    {
                        "type": "object",
                        "properties": {"workspace": {"type": "string", "enum": ["ws-blue"]}},
                    }
                ),
                "responses": {
                    "202": {"description": "queued", "headers": {"Location": {"schema": {}}}}
                },
            }
        },
        "/exports/{export_id}": {
            "get": {
                "operationId": "getExport",
                "parameters": [{**ID_PARAM, "name": "export_id"}],
                "responses": {"200": {"description": "ok"}},
            }
        },
    }
    report = run(mini(paths), dry_run=True)
    action = report.action("start_export")
    assert action.status_operation == "getExport: GET /exports/{export_id}"
    assert not has_warning(action, "202 without a status operation")
    assert not has_warning(action, "no idempotency key")


def test_path_parameters_become_template_safe_inputs(api):
    paths = {
        "/notes/{note-id}": {
            "parameters": [
                {"name": "note-id", "in": "path", "required": True, "schema": {"type": "integer"}}
            ],
            "get": {"operationId": "getNote", "responses": {"200": {"description": "ok"}}},
            "put": {
                "operationId": "replaceNote",
                "summary": "Replace the text of one note",
                "requestBody": json_body(
                    {
                        "type": "object",
                        "required": ["text"],
                        "properties": {"text": {"type": "string", "maxLength": 2000}},
                    }
                ),
                "responses": {"200": {"description": "ok"}},
            },
        }
    }
    action = run(mini(paths), dry_run=True).action("replace_note")
    assert action.definition["target"] == "/notes/{note_id}"
    assert action.definition["read"] == {"path": "/notes/{note_id}"}
    assert action.definition["input_schema"]["properties"]["note_id"] == {"type": "integer"}
    assert action.definition["input_schema"]["required"] == ["note_id", "text"]


# --- the command ------------------------------------------------------------------------------


def call(*args: str) -> str:
    out = io.StringIO()
    call_command("import_openapi", *args, stdout=out)
    return out.getvalue()


def test_the_command_prints_one_line_per_operation(connectors):
    output = call(str(DOCS / "invoicing.yaml"), "--connector", "invoicing")
    lines = output.splitlines()

    assert lines[0].endswith(
        "invoicing.yaml -> connector invoicing: 5 actions proposed (1 reads), 2 operations "
        "refused, 0 read operations not proposed"
    )
    update = next(line for line in lines if line.lstrip().startswith("update_invoice"))
    assert update.split() == [
        "update_invoice",
        "update",
        "reversible",
        "needs",
        "review",
        "PATCH",
        "/invoices/{invoice_id}",
        "[created]",
    ]
    warnings = lines[lines.index(update) + 1 :]
    assert any(
        "! /paths/~1invoices~1{invoice_id}/patch/summary: vague verb 'manage'" in line
        for line in warnings[:8]
    )
    assert "refused:" in lines
    assert "  process_invoice_action  POST /invoices/{invoice_id}/actions" in lines
    assert any(line.startswith("      x ") and "free-form request body" in line for line in lines)
    read = next(line for line in lines if line.lstrip().startswith("get_invoice"))
    assert read.split()[:3] == ["get_invoice", "read", "observation"]
    assert lines[lines.index(read) + 1] == (
        "      returns: id (string), customer_id (string), status (string: draft, open, paid, "
        "void), version (integer), currency (string: EUR, USD, GBP), memo (string)"
    )
    assert "      checked with: get_invoice" in warnings
    assert lines[-1].startswith("5 actions stored disabled")
    assert Action.objects.count() == 5


def test_the_command_dry_run_and_create_connector(db):
    output = call(str(DOCS / "crm.yaml"), "--connector", "crm", "--dry-run", "--create-connector")
    assert "connector crm (created)" in output
    assert "[dry run: nothing stored]" in output
    assert "create_contact" in output
    assert "class LOWERED by the document from external, confirm it" in output
    assert Action.objects.count() == 0
    assert Connector.objects.count() == 0


def test_the_command_refuses_whole_documents_without_a_traceback(api, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(mini(contact_patch({"$ref": "https://example.com/x.json"})))
    with pytest.raises(CommandError) as info:
        call(str(bad), "--connector", "api")
    message = str(info.value)
    assert message.startswith(f"{bad}: the document was not imported:\n  /paths/")
    assert "leaves this document" in message
    assert "Traceback" not in message

    with pytest.raises(CommandError, match="cannot read .*missing.yaml"):
        call(str(tmp_path / "missing.yaml"), "--connector", "api")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(CommandError, match="not UTF-8"):
        call(str(binary), "--connector", "api")
    with pytest.raises(CommandError, match="unknown connector 'nope'"):
        call(str(DOCS / "crm.yaml"), "--connector", "nope")
    assert Action.objects.count() == 0


# --- documents as they are: 3.1 nullability, optional URLs, '@' paths, HTML -----------------


def test_chat_api(api):
    report = run("chat", dry_run=True)

    assert {p.name: (p.kind, p.consequence_class) for p in report.proposed} == {
        "create_message": ("invoke", "external"),
        "get_message": ("read", "observation"),
        "update_message": ("update", "reversible"),
        "delete_message": ("delete", "irreversible"),
        "create_scheduled_event": ("invoke", "external"),
        "update_my_user": ("update", "reversible"),
    }
    # A required URL still refuses its operation.
    assert refused(report) == {
        "POST /webhooks/{webhook_id}": "'target_url' names a URL: a URL an agent chooses "
        "makes the action a generic passthrough"
    }

    create = report.action("create_message")
    properties = create.definition["input_schema"]["properties"]
    # Null, three ways, comes out one way: a null type beside the real one.
    assert properties["tts"] == {"type": ["boolean", "null"]}
    assert properties["message_reference"] == {
        "type": ["object", "null"],
        "properties": {
            "message_id": {"type": "string", "pattern": "^(0|[1-9][0-9]{0,19})$", "maxLength": 200}
        },
        "required": ["message_id"],
        "additionalProperties": False,
    }
    # The optional URL inside each embed is dropped; the embed itself is offered.
    embed = properties["embeds"]["items"]
    assert set(embed["properties"]) == {"title", "color"}
    assert properties["embeds"]["type"] == ["array", "null"]
    assert has_warning(create, "optional field 'url' is a URL (by its name): not offered")
    # HTML descriptions become plain text, on the card and in the description.
    assert create.definition["description"] == ("Posts a message. The content is shown as written.")

    update = report.action("update_message")
    assert update.definition["input_schema"]["properties"]["content"] == {
        "type": ["string", "null"],
        "maxLength": 2000,
    }
    # A bound past 2**53 - 1 is tightened (never loosened) and said.
    assert update.definition["input_schema"]["properties"]["flags"] == {
        "type": ["integer", "null"],
        "minimum": 0,
        "maximum": 2**53 - 1,
    }
    assert has_warning(update, "'flags': maximum 18446744073709551615 is beyond")

    event = report.action("create_scheduled_event")
    assert set(event.definition["input_schema"]["properties"]) == {"guild_id", "name", "starts_at"}
    assert has_warning(event, "optional field 'conference_url' is a URL (by its name): not offered")

    me = report.action("update_my_user")
    assert me.definition["target"] == "/users/%40me"
    assert me.definition["read"] == {"path": "/users/%40me"}
    assert has_warning(me, "the path is sent percent-encoded (/users/%40me)")
    # 3.0's nullable in a 3.1 document means what it says there too.
    assert me.definition["input_schema"]["properties"]["global_name"] == {
        "type": ["string", "null"],
        "maxLength": 32,
    }
    assert_loadable(report)


@pytest.mark.parametrize(
    "nullable",
    [
        {"type": "string", "maxLength": 40, "nullable": True},
        {"type": ["string", "null"], "maxLength": 40},
        {"anyOf": [{"type": "string", "maxLength": 40}, {"type": "null"}]},
        {"oneOf": [{"type": "null"}, {"type": "string", "maxLength": 40}]},
    ],
)
@pytest.mark.parametrize("version", ["3.0.3", "3.1.0"])
def test_null_is_read_alike_however_it_is_written(api, nullable, version):
    if version.startswith("3.0") and isinstance(nullable.get("type"), list):
        nullable = {"type": "string", "maxLength": 40, "nullable": True}
    body = {"type": "object", "properties": {"nickname": nullable}}
    report = run(mini(contact_patch(body), version=version), dry_run=True)
    schema = report.action("update_contact_email").definition["input_schema"]
    assert schema["properties"]["nickname"] == {"type": ["string", "null"], "maxLength": 40}


def test_an_optional_url_is_dropped_and_a_required_one_refuses(api):
    optional = {
        "type": "object",
        "properties": {
            "email": {"type": "string", "maxLength": 254},
            "homepage": {"type": "string", "format": "uri", "maxLength": 300},
        },
    }
    action = run(mini(contact_patch(optional)), dry_run=True).action("update_contact_email")
    assert set(action.definition["input_schema"]["properties"]) == {"contact_id", "email"}
    assert has_warning(action, "optional field 'homepage' is a URL (format uri): not offered")

    # A required URL inside an optional object drops the object, not the operation...
    nested = {
        "type": "object",
        "properties": {
            "email": {"type": "string", "maxLength": 254},
            "link": {
                "type": "object",
                "required": ["href"],
                "properties": {"href": {"type": "string"}, "label": {"type": "string"}},
            },
        },
    }
    action = run(mini(contact_patch(nested)), dry_run=True).action("update_contact_email")
    assert "link" not in action.definition["input_schema"]["properties"]
    assert has_warning(
        action, "optional field 'link' is an object whose required field 'href' is a URL"
    )

    # ...and inside a required one, the operation.
    nested["required"] = ["link"]
    report = run(mini(contact_patch(nested)), dry_run=True)
    assert "'href' names a URL" in refused(report)["PATCH /contacts/{contact_id}"]


def test_a_body_whose_fields_are_all_dropped_is_refused(api):
    body = {"type": "object", "properties": {"homepage": {"type": "string", "format": "uri"}}}
    report = run(mini(contact_patch(body)), dry_run=True)
    assert refused(report)["PATCH /contacts/{contact_id}"] == (
        "none of the request body's fields can be offered"
    )


def test_patterns_that_are_not_linear_time_drop_or_refuse_their_field(api):
    # RE2 takes the classic catastrophic pattern (it matches it in linear time)...
    catastrophic = {"type": "string", "pattern": "^(a+)+$", "maxLength": 100}
    # ...but not a backreference: no linear-time engine can.
    backreference = {"type": "string", "pattern": "^(a+)\\1$", "maxLength": 100}
    body = {"type": "object", "properties": {"code": catastrophic, "echo": backreference}}
    action = run(mini(contact_patch(body)), dry_run=True).action("update_contact_email")
    assert action.definition["input_schema"]["properties"]["code"]["pattern"] == "^(a+)+$"
    assert "echo" not in action.definition["input_schema"]["properties"]
    assert has_warning(action, "optional field 'echo' is a string whose pattern cannot be checked")

    body["required"] = ["echo"]
    report = run(mini(contact_patch(body)), dry_run=True)
    assert (
        "'echo': its pattern '^(a+)\\\\1$' cannot be checked in linear time"
        in (refused(report)["PATCH /contacts/{contact_id}"])
    )


def test_an_imported_catastrophic_pattern_validates_input_in_milliseconds(api):
    from actions.spec import ActionSpec

    body = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^(a+)+$", "maxLength": 100}},
    }
    action = run(mini(contact_patch(body)), dry_run=True).action("update_contact_email")
    spec = ActionSpec.from_definition("update_contact_email", action.definition)
    validator = spec.input_validator()
    started = time.monotonic()
    errors = list(validator.iter_errors({"contact_id": "c-1", "code": "a" * 26 + "!"}))
    assert time.monotonic() - started < 0.05
    assert [e.message for e in errors] == [f"'{'a' * 26}!' does not match '^(a+)+$'"]


# --- declarations and names ------------------------------------------------------------------


def test_a_write_declared_an_observation_is_refused(api):
    paths = contact_patch()
    paths["/contacts/{contact_id}"]["delete"] = {
        "operationId": "deleteContact",
        "summary": "Delete one contact",
        "x-countersign": {"class": "observation"},
        "responses": {"204": {"description": "ok"}},
    }
    report = run(mini(paths), dry_run=True)
    assert (
        "x-countersign declares a DELETE an observation: a write is never an observation"
        in (refused(report)["DELETE /contacts/{contact_id}"])
    )


def test_a_lowered_class_is_flagged_for_the_admin(api):
    paths = contact_patch()
    paths["/contacts/{contact_id}"]["delete"] = {
        "operationId": "deleteContact",
        "summary": "Archive one contact (it can be restored)",
        "x-countersign": {"class": "reversible"},
        "responses": {"204": {"description": "ok"}},
    }
    report = run(mini(paths))
    delete = report.action("delete_contact")
    assert (delete.consequence_class, delete.class_lowered_from) == ("reversible", "irreversible")
    assert has_warning(delete, "the document lowers the class from irreversible")
    # Raising a class is the document's to say; only lowering is called out.
    assert report.action("update_contact_email").class_lowered_from == ""
    stored = Action.objects.get(name="delete_contact")
    assert (stored.class_confirmed, stored.enabled) == (False, False)
    assert any("lowers the class" in item["message"] for item in stored.lint)


def test_a_name_of_another_connector_is_never_re_pointed(api):
    Connector.objects.create(name="chat", base_url="https://chat.example.com")
    run("chat", connector="chat")
    before = Action.objects.get(name="delete_message")

    # A second API with an operation of the same name, for another connector.
    other = text_of("chat").replace("operationId: createMessage", "operationId: postMessage")
    report = run(other, connector="api")

    assert "delete_message" not in [p.name for p in report.proposed]
    assert (
        "an action named 'delete_message' already exists for connector 'chat': names are "
        "unique in the catalog; import with a prefix (--prefix api_)"
    ) in refused(report)["DELETE /channels/{channel_id}/messages/{message_id}"]
    after = Action.objects.get(name="delete_message")
    assert (after.connector.name, after.version, after.digest) == (
        "chat",
        before.version,
        before.digest,
    )

    prefixed = run(other, connector="api", prefix="api_")
    assert {p.name for p in prefixed.proposed} == {
        "api_get_message",
        "api_post_message",
        "api_update_message",
        "api_delete_message",
        "api_create_scheduled_event",
        "api_update_my_user",
    }
    assert Action.objects.get(name="api_delete_message").connector.name == "api"
    # The prefixed change is checked with the prefixed read, of its own connector.
    assert prefixed.action("api_delete_message").check_with == "api_get_message"
    assert Action.objects.get(name="delete_message").connector.name == "chat"


def test_a_bad_prefix_refuses_the_import(api):
    with pytest.raises(OpenAPIImportError, match="prefix 'Bad-'"):
        run("chat", prefix="Bad-")


def test_operations_are_selected_by_id_or_tag(api):
    text = text_of("chat").replace(
        "      operationId: deleteMessage\n",
        "      operationId: deleteMessage\n      tags: [moderation]\n",
    )
    only = run(text, only=["createMessage", "updateMyUser"], dry_run=True)
    assert [p.name for p in only.proposed] == ["create_message", "update_my_user"]
    assert only.refused == []

    tagged = run(text, tags=["moderation"], dry_run=True)
    assert [p.name for p in tagged.proposed] == ["delete_message"]

    with pytest.raises(
        OpenAPIImportError, match="--only names no operation of this document: nope"
    ):
        run(text, only=["nope"])
    with pytest.raises(OpenAPIImportError, match="--tag names no tag of this document: billing"):
        run(text, tags=["billing"])


def test_the_command_selects_and_prefixes(api):
    output = call(
        str(DOCS / "chat.yaml"), "--connector", "api", "--only", "deleteMessage", "--prefix", "c_"
    )
    assert "c_delete_message" in output
    assert "1 actions proposed (0 reads), 0 operations refused" in output
    # The read of the same GET was not selected: nothing names it.
    assert "checked with" not in output
    assert list(Action.objects.values_list("name", flat=True)) == ["c_delete_message"]


# --- form bodies and fixed headers -----------------------------------------------------------


def test_billing_api_form_bodies(api):
    report = run("billing", dry_run=True)

    assert {p.name: (p.kind, p.consequence_class) for p in report.proposed} == {
        "post_customers": ("invoke", "external"),
        "delete_customers_customer": ("delete", "irreversible"),
        "create_message": ("invoke", "external"),
    }
    customers = report.action("post_customers")
    write = customers.definition["write"]
    # Fields the document encodes as deepObject nest with brackets on the wire.
    assert write["content_type"] == "application/x-www-form-urlencoded"
    assert write["form_style"] == "deep_object"
    assert write["idempotency_header"] == "Idempotency-Key"
    assert write["body"] == {
        "email": {"$input": "email"},
        "name": {"$input": "name"},
        "balance": {"$input": "balance"},
        "address": {"$input": "address"},
        "expand": {"$input": "expand"},
    }
    properties = customers.definition["input_schema"]["properties"]
    assert properties["address"]["additionalProperties"] is False
    # The same strictness as JSON: the open map is not offered.
    assert "metadata" not in properties
    # A card from an HTML description is plain text.
    assert customers.definition["card"]["effect"] == "Creates a new customer object."

    message = report.action("create_message")
    assert message.definition["write"]["content_type"] == "application/x-www-form-urlencoded"
    assert "form_style" not in message.definition["write"]  # "form": arrays repeat the field
    assert set(message.definition["input_schema"]["properties"]) == {
        "AccountSid",
        "To",
        "Body",
        "Tags",
    }
    assert message.definition["input_schema"]["required"] == ["AccountSid", "To", "Body"]
    assert has_warning(message, "optional field 'StatusCallback' is a URL (format uri)")
    assert has_warning(message, "optional form field 'Options' holds an object")

    # The upstream requires a From header; without a value the operation cannot work.
    assert (
        "required header 'From' has no value Countersign could send"
        in (refused(report)["POST /incidents"])
    )
    assert_loadable(report)


def test_a_required_header_is_fixed_by_the_import(api):
    report = run("billing", headers={"From": "ops@example.com"}, dry_run=True)
    incident = report.action("create_incident")
    assert incident.definition["write"]["headers"] == {"From": "ops@example.com"}
    assert has_warning(incident, "header 'From' is always sent as 'ops@example.com'")
    assert validate_action_definition(incident.name, incident.definition) == []


def test_a_credential_is_never_a_fixed_header(api):
    paths = contact_patch(
        parameters=[{"name": "X-Api-Key", "in": "header", "required": True, "schema": {}}]
    )
    report = run(mini(paths), headers={"X-Api-Key": "sk_live_123"}, dry_run=True)
    assert "X-Api-Key looks like a credential" in refused(report)["PATCH /contacts/{contact_id}"]


def test_the_command_takes_fixed_headers(api):
    output = call(
        str(DOCS / "billing.yaml"),
        "--connector",
        "api",
        "--dry-run",
        "--only",
        "createIncident",
        "--header",
        "From=ops@example.com",
    )
    assert "create_incident" in output and "always sent as 'ops@example.com'" in output
    with pytest.raises(CommandError, match="write NAME=VALUE"):
        call(str(DOCS / "billing.yaml"), "--connector", "api", "--header", "From")


# --- Swagger 2.0 -----------------------------------------------------------------------------


def test_swagger_2_documents_are_converted(api):
    report = run("shop-v2", dry_run=True)

    assert has_warning(report.warnings, "converted from Swagger 2.0 to OpenAPI 3.0")
    assert has_warning(report.warnings, "securityDefinitions are not imported")
    assert {p.name: (p.kind, p.consequence_class) for p in report.proposed} == {
        "get_product": ("read", "observation"),
        "update_product": ("update", "reversible"),
        "delete_product": ("delete", "irreversible"),
        "add_review": ("invoke", "external"),
    }
    # A file upload is a multipart body, refused as in any document.
    assert "multipart/form-data" in refused(report)["PUT /products/{product_id}/image"]

    update = report.action("update_product")
    # The shared body parameter became the request body; x-nullable is nullable.
    assert update.definition["input_schema"]["properties"] == {
        "product_id": {"type": "string", "pattern": "^p-[0-9]{1,9}$", "maxLength": 200},
        "name": {"type": "string", "maxLength": 80},
        "price_cents": {"type": ["integer", "null"], "minimum": 0},
    }
    # The ETag of the read and the If-Match of the write survive the conversion.
    assert update.definition["version"] == {"source": "etag"}
    assert update.definition["write"]["precondition"] == "if_match"

    review = report.action("add_review")
    assert review.definition["write"]["content_type"] == "application/x-www-form-urlencoded"
    assert review.definition["input_schema"]["required"] == ["product_id", "stars"]
    assert review.definition["input_schema"]["properties"]["tags"]["maxItems"] == 3
    assert_loadable(report)


def test_the_created_connector_of_a_swagger_document_uses_host_and_base_path(db):
    run("shop-v2", connector="shop", create_connector=True)
    assert Connector.objects.get(name="shop").base_url == "https://shop.example.com/api"
