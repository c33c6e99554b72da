"""Reads and results from OpenAPI documents: GETs proposed as disabled read actions with a
bounded result, writes' results from their answers, and links turned into check_with.
Nothing is guessed, and everything proposed passes the loader's checks."""

from __future__ import annotations

import io
import json
import time

import pytest
from django.core.management import call_command

from actions.admin import definition_problems
from actions.catalog import action_define, load_catalog
from actions.export import export_catalog
from actions.models import Action, Connector
from actions.openapi import import_openapi
from actions.openapi.results import MAX_RESULT_FIELDS
from tests.actions.test_openapi_import import (
    DOCS,
    ID_PARAM,
    assert_loadable,
    has_warning,
    json_body,
    listed,
    mini,
    refused,
    run,
)
from tests.conftest import DEMO_CATALOG

CARD = {key: f"The {key}, in plain words." for key in ("effect", "scope", "consent", "retry")}


@pytest.fixture
def api(db):
    return Connector.objects.create(name="api", base_url="https://api.example.com")


def answer(schema: dict, code: str = "200", **response) -> dict:
    return {
        code: {
            "description": "ok",
            "content": {"application/json": {"schema": schema}},
            **response,
        }
    }


def thing_get(schema: dict, **op) -> dict:
    """GET /things/{thing_id} answering ``schema``."""
    return {
        "/things/{thing_id}": {
            "parameters": [{**ID_PARAM, "name": "thing_id"}],
            "get": {
                "operationId": "getThing",
                "summary": "Read one thing",
                "responses": answer(schema),
                **op,
            },
        }
    }


def read_of(schema: dict, **op):
    report = run(mini(thing_get(schema, **op)), dry_run=True)
    return report, report.action("get_thing")


# --- the result a read declares ----------------------------------------------------------


def test_a_read_returns_the_top_level_scalars_and_never_what_is_nested(api):
    report, read = read_of(
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 80},
                "count": {"type": "integer"},
                "ratio": {"type": "number"},
                "active": {"type": ["boolean", "null"]},
                "owner": {"type": "object", "properties": {"id": {"type": "string"}}},
                "tags": {"type": "array", "items": {"type": "string"}},
                "either": {"oneOf": [{"type": "string"}, {"type": "object"}]},
                "secret_pin": {"type": "string", "writeOnly": True},
            },
        }
    )

    assert (read.kind, read.consequence_class) == ("read", "observation")
    definition = read.definition
    assert definition["enabled"] is False
    assert "write" not in definition and "read" not in definition
    assert definition["target"] == "/things/{thing_id}"
    assert definition["input_schema"] == {
        "type": "object",
        "additionalProperties": False,
        "required": ["thing_id"],
        "properties": {
            "thing_id": {"type": "string", "pattern": "^c-[0-9]{1,10}$", "maxLength": 200}
        },
    }
    assert definition["result"] == {
        "name": {"pointer": "/name", "type": "string", "max_length": 80},
        "count": {"pointer": "/count", "type": "integer"},
        "ratio": {"pointer": "/ratio", "type": "number"},
        "active": {"pointer": "/active", "type": "boolean"},
    }
    # What was left out is said, with how to add it by hand; writeOnly never comes back.
    assert has_warning(read, "nested objects and arrays are never proposed (owner, tags, either)")
    assert has_warning(read, "add the fields the agent needs by hand")
    assert not has_warning(read, "secret_pin")
    # The card names the fields; the rest of it is a person's to write.
    assert definition["card"]["result"] == (
        "Only these fields of the upstream's answer: name, count, ratio, active."
    )
    assert definition["card"]["effect"] == "Read one thing"
    assert has_warning(read, "card incomplete (scope, consent, retry)")
    assert_loadable(report)


def test_ids_come_first_then_status_and_version_and_the_cap_is_said(api):
    properties = {f"field_{i:02}": {"type": "string", "maxLength": 10} for i in range(30)}
    properties.update(
        {
            "status": {"type": "string", "enum": ["open", "closed"]},
            "ownerId": {"type": "string", "maxLength": 40},
            "id": {"type": "string", "maxLength": 40},
            "version": {"type": "integer"},
        }
    )
    report, read = read_of({"type": "object", "properties": properties})

    names = list(read.definition["result"])
    assert len(names) == MAX_RESULT_FIELDS == 20
    assert names[:4] == ["id", "owner_id", "status", "version"]
    assert names[4:] == [f"field_{i:02}" for i in range(16)]
    # camelCase becomes a result name; the pointer keeps the document's spelling.
    assert read.definition["result"]["owner_id"]["pointer"] == "/ownerId"
    assert has_warning(read, "at most 20 fields are proposed (ids, then status and version")
    assert has_warning(read, "14 more left out: field_16, field_17")
    assert_loadable(report)


def test_enums_and_lengths_are_carried_and_bounded(api):
    report, read = read_of(
        {
            "type": "object",
            "properties": {
                "state": {"enum": ["queued", "running", None]},  # no type: from the values
                "kind": {"const": "thing"},
                "level": {"type": "integer", "enum": [1, 2, 3]},
                "code": {"type": "string"},  # no maxLength: the default
                "essay": {"type": "string", "maxLength": 100_000},  # past the catalog's bound
                "many": {"type": "string", "enum": [f"v{i}" for i in range(60)]},
            },
        }
    )
    result = read.definition["result"]
    assert result["state"] == {
        "pointer": "/state",
        "type": "string",
        "max_length": 200,
        "enum": ["queued", "running"],
    }
    assert result["kind"] == {
        "pointer": "/kind",
        "type": "string",
        "max_length": 200,
        "enum": ["thing"],
    }
    assert result["level"] == {"pointer": "/level", "type": "integer", "enum": [1, 2, 3]}
    assert result["code"]["max_length"] == 200
    assert result["essay"]["max_length"] == 4096
    # More values than a result's enum may hold: the type stays, the enum is not carried.
    assert result["many"] == {"pointer": "/many", "type": "string", "max_length": 200}
    assert_loadable(report)


def test_urls_and_secret_looking_fields_are_never_proposed(api):
    _, read = read_of(
        {
            "type": "object",
            "properties": {
                "id": {"type": "string"},
                "homepage": {"type": "string", "format": "uri"},
                "avatar_url": {"type": "string"},
                "client_secret": {"type": "string"},
                "apiKey": {"type": "string"},
            },
        }
    )
    assert list(read.definition["result"]) == ["id"]
    assert has_warning(read, "'homepage' is a URL (results never carry URLs")
    assert has_warning(read, "'avatar_url' is a URL")
    assert has_warning(read, "'client_secret' looks like a secret: not returned")
    assert has_warning(read, "'apiKey' looks like a secret: not returned")


def test_a_record_in_an_envelope_is_read_inside_it(api):
    report, read = read_of(
        {
            "type": "object",
            "properties": {
                "incident": {
                    "type": "object",
                    "properties": {"id": {"type": "string"}, "title": {"type": "string"}},
                }
            },
        }
    )
    assert read.definition["result"] == {
        "id": {"pointer": "/incident/id", "type": "string", "max_length": 200},
        "title": {"pointer": "/incident/title", "type": "string", "max_length": 200},
    }
    assert_loadable(report)


def test_query_parameters_and_headers_are_not_sent_by_a_read(api):
    op = {
        "parameters": [
            {"name": "expand", "in": "query", "schema": {"type": "string"}},
            {"name": "X-Trace", "in": "header", "schema": {"type": "string"}},
        ]
    }
    report, read = read_of({"type": "object", "properties": {"id": {"type": "string"}}}, **op)
    assert set(read.definition["input_schema"]["properties"]) == {"thing_id"}
    assert has_warning(read, "query parameter 'expand' is not sent (a catalog read's target")
    assert has_warning(read, "header 'X-Trace' is not sent by a read")

    required_header = {
        "parameters": [{"name": "X-Tenant", "in": "header", "required": True, "schema": {}}]
    }
    report = run(
        mini(
            thing_get(
                {"type": "object", "properties": {"id": {"type": "string"}}}, **required_header
            )
        ),
        dry_run=True,
    )
    assert (
        "required header 'X-Tenant': a read sends no headers"
        in refused(report)["GET /things/{thing_id}"]
    )


# --- GETs that are not proposed ------------------------------------------------------------

RECORD = {"type": "object", "properties": {"id": {"type": "string"}, "name": {"type": "string"}}}


def test_lists_searches_and_answers_without_a_record_are_listed_not_proposed(api):
    def get(op_id: str, responses: dict, parameters: list | None = None) -> dict:
        return {
            "get": {
                "operationId": op_id,
                "parameters": parameters or [],
                "responses": responses,
            }
        }

    param = [{**ID_PARAM, "name": "thing_id"}]
    paths = {
        # No path parameter: a list or a search.
        "/things": get("listThings", answer(RECORD)),
        # A path parameter, but the answer is a list, a page of one, or no record.
        "/things/{thing_id}/parts": get(
            "listParts", answer({"type": "array", "items": RECORD}), param
        ),
        "/things/{thing_id}/events": get(
            "listEvents",
            answer(
                {
                    "type": "object",
                    "properties": {
                        "data": {"type": "array", "items": RECORD},
                        "has_more": {"type": "boolean"},
                    },
                }
            ),
            param,
        ),
        "/things/{thing_id}/raw": get("getRaw", {"200": {"description": "bytes"}}, param),
        "/things/{thing_id}/shape": get(
            "getShape", answer({"oneOf": [RECORD, {"type": "string"}]}), param
        ),
        "/things/{thing_id}/nested": get(
            "getNested",
            answer({"type": "object", "properties": {"a": RECORD, "b": RECORD}}),
            param,
        ),
        "/things/{thing_id}/search": get(
            "searchThing",
            answer(RECORD),
            [*param, {"name": "q", "in": "query", "required": True, "schema": {}}],
        ),
        "/things/{thing_id}": {
            "parameters": param,
            "get": {"operationId": "getThing", "responses": answer(RECORD)},
            "head": {"operationId": "headThing", "responses": {"200": {"description": "ok"}}},
        },
    }
    report = run(mini(paths), dry_run=True)

    assert [p.name for p in report.proposed] == ["get_thing"]
    assert listed(report) == {
        "listThings: GET /things": "no path parameter names one resource: lists and searches "
        "are not proposed",
        "listParts: GET /things/{thing_id}/parts": "the answer is a list: not proposed",
        "listEvents: GET /things/{thing_id}/events": "the answer is one page of a list: "
        "not proposed",
        "getRaw: GET /things/{thing_id}/raw": "no JSON 200 answer: nothing to return",
        "getShape: GET /things/{thing_id}/shape": "the answer is one of several shapes: "
        "not proposed",
        "getNested: GET /things/{thing_id}/nested": "the answer has no top-level field a "
        "result can declare: not proposed",
        "searchThing: GET /things/{thing_id}/search": "required query parameter 'q': a search "
        "is not proposed (a catalog read's target has no query string)",
        "headThing: HEAD /things/{thing_id}": "a HEAD answers without a body: not proposed",
    }
    assert report.refused == []


def test_x_countersign_on_a_get_names_it_and_never_makes_it_a_write(api):
    record = {"type": "object", "properties": {"id": {"type": "string"}}}
    named = {"x-countersign": {"name": "look_up_thing", "card": {"result": "The thing's id."}}}
    report = run(mini(thing_get(record, **named)), dry_run=True)
    read = report.action("look_up_thing")
    assert read.definition["card"]["result"] == "The thing's id."

    for extension, message in (
        ({"class": "reversible"}, "x-countersign declares a GET reversible: a read is an "),
        ({"kind": "update"}, "x-countersign kind is for writes: a GET is a read"),
    ):
        report = run(mini(thing_get(record, **{"x-countersign": extension})), dry_run=True)
        assert message in refused(report)["GET /things/{thing_id}"]


# --- writes: results, links and status ----------------------------------------------------

JOB = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "readOnly": True, "maxLength": 40},
        "state": {"type": "string", "enum": ["queued", "done", "failed"]},
        "details": {"type": "object", "properties": {"n": {"type": "integer"}}},
    },
}


def jobs(accepted: dict | None = None, *, post: dict | None = None, get: dict | None = None):
    """POST /projects/{project_id}/jobs (202) and GET .../jobs/{job_id}."""
    project = {**ID_PARAM, "name": "project_id"}
    return {
        "/projects/{project_id}/jobs": {
            "parameters": [project],
            "post": {
                "operationId": "startJob",
                "summary": "Start one export job",
                "parameters": [
                    {"name": "Idempotency-Key", "in": "header", "schema": {"type": "string"}}
                ],
                "requestBody": json_body(
                    {"type": "object", "properties": {"format": {"enum": ["csv", "json"]}}}
                ),
                "responses": accepted if accepted is not None else answer(JOB, "202"),
                **(post or {}),
            },
        },
        "/projects/{project_id}/jobs/{job_id}": {
            "parameters": [project, {**ID_PARAM, "name": "job_id"}],
            "get": {
                "operationId": "getJob",
                "summary": "Read one job's state",
                "responses": answer(JOB),
                **(get or {}),
            },
        },
    }


LINK = {
    "operationId": "getJob",
    "parameters": {"project_id": "$request.path.project_id", "job_id": "$response.body#/id"},
}


def test_a_write_declares_the_result_of_its_answer(api):
    report = run(mini(jobs()), dry_run=True)
    start = report.action("start_job")
    assert start.definition["result"] == {
        "id": {"pointer": "/id", "type": "string", "max_length": 40},
        "state": {
            "pointer": "/state",
            "type": "string",
            "max_length": 200,
            "enum": ["queued", "done", "failed"],
        },
    }
    assert start.definition["card"]["result"] == (
        "Only these fields of the upstream's answer: id, state."
    )
    # No link: which of the answer's fields the GET takes is not guessed.
    assert "check_with" not in start.definition
    assert has_warning(start, "202 without a status operation")
    assert_loadable(report)


def test_a_link_on_the_202_names_the_read_that_checks_the_work(api):
    report = run(mini(jobs(answer(JOB, "202", links={"GetJob": LINK}))), dry_run=True)
    start = report.action("start_job")
    assert start.definition["check_with"] == {
        "action": "get_job",
        "input": {"project_id": {"$input": "project_id"}, "job_id": {"$result": "id"}},
    }
    assert start.check_with == "get_job"
    assert start.status_operation == "getJob: GET /projects/{project_id}/jobs/{job_id}"
    assert has_warning(start, "the agent checks the work with the read get_job (check_with")
    # No status rules declared: the worker does not follow it by itself.
    assert "status" not in start.definition
    assert_loadable(report)


def test_a_link_adds_the_result_field_it_needs(api):
    # The answer's id is not a top-level field (it sits in an envelope the result does not
    # read), and another link takes a header: each gets a field of its own.
    envelope = {
        "type": "object",
        "properties": {
            "job": {"type": "object", "properties": {"ref": {"type": "string"}}},
            "accepted": {"type": "boolean"},
        },
    }
    by_body = {**LINK, "parameters": {**LINK["parameters"], "job_id": "$response.body#/job/ref"}}
    report = run(mini(jobs(answer(envelope, "202", links={"GetJob": by_body}))), dry_run=True)
    start = report.action("start_job")
    assert start.definition["result"]["job_id"] == {
        "pointer": "/job/ref",
        "type": "string",
        "max_length": 200,  # the read's own input bound
    }
    assert start.definition["check_with"]["input"]["job_id"] == {"$result": "job_id"}
    assert_loadable(report)

    by_header = {**LINK, "parameters": {**LINK["parameters"], "job_id": "$response.header.X-Job"}}
    report = run(mini(jobs(answer(JOB, "202", links={"GetJob": by_header}))), dry_run=True)
    start = report.action("start_job")
    assert start.definition["result"]["job_id"] == {
        "header": "X-Job",
        "type": "string",
        "max_length": 200,
    }
    assert_loadable(report)


@pytest.mark.parametrize(
    "parameters, reason",
    [
        ({"project_id": "$request.path.project_id"}, "does not say where the read's 'job_id'"),
        ({"project_id": "$request.path.project_id", "job_id": "j-1"}, "a constant"),
        (
            {"project_id": "$request.path.project_id", "job_id": "$response.header.Location"},
            "a Location is a URL, not a value of the read's input",
        ),
        (
            {"project_id": "$request.query.p", "job_id": "$response.body#/id"},
            "is not an input or a field of the answer",
        ),
        (
            {"project_id": "$request.path.project_id", "job_id": "$response.body#/details"},
            "the answer's /details holds an object or a list, not a value",
        ),
        (
            {"project_id": "$request.path.project_id", "job_id": "$response.body#/details/n"},
            "the answer's /details/n is integer, and the read's 'job_id' is string",
        ),
        (
            # Not documented in the answer's schema: taken at the link's word.
            {"project_id": "$request.path.project_id", "job_id": "$response.body#/job_ref"},
            "",
        ),
    ],
)
def test_a_link_that_cannot_be_followed_exactly_is_said_and_not_used(api, parameters, reason):
    link = {"operationId": "getJob", "parameters": parameters}
    report = run(mini(jobs(answer(JOB, "202", links={"GetJob": link}))), dry_run=True)
    start = report.action("start_job")
    if reason:
        assert "check_with" not in start.definition
        assert has_warning(start, reason)
        assert has_warning(start, "check_with not wired")
    else:
        assert start.check_with == "get_job"
    assert_loadable(report)


def test_a_link_to_a_get_that_is_not_proposed_wires_nothing(api):
    # The linked GET answers a list: it is not a read, so nothing can name it.
    listing = {"responses": answer({"type": "array", "items": JOB})}
    report = run(mini(jobs(answer(JOB, "202", links={"GetJob": LINK}), get=listing)), dry_run=True)
    start = report.action("start_job")
    assert "check_with" not in start.definition
    assert has_warning(start, "getJob: GET /projects/{project_id}/jobs/{job_id} is not proposed")
    # operationRef outside the document, or to a method that is not GET: never followed.
    for ref in (
        "https://example.com/openapi.json#/paths/~1jobs/get",
        "#/paths/~1projects~1{project_id}~1jobs/post",
    ):
        link = {"operationRef": ref, "parameters": LINK["parameters"]}
        report = run(mini(jobs(answer(JOB, "202", links={"L": link}))), dry_run=True)
        assert "check_with" not in report.action("start_job").definition
        assert has_warning(report.action("start_job"), "is no GET operation of this document")


def test_a_read_refused_after_all_takes_its_check_with_along(db):
    load_catalog(DEMO_CATALOG.read_text(), base_dir=DEMO_CATALOG.parent)
    # The GET's read would be named like the catalog's own get_contact: refused, so the
    # write that links to it is proposed without check_with (and without the link's field).
    record = {"type": "object", "properties": {"state": {"type": "string"}}}
    link = {**LINK, "parameters": {**LINK["parameters"], "job_id": "$response.body#/ref"}}
    paths = jobs(
        answer(record, "202", links={"GetJob": link}),
        get={"x-countersign": {"name": "get_contact"}},
    )
    report = run(mini(paths), connector="demo", dry_run=True)

    assert (
        "already exists (from catalog file)"
        in refused(report)["GET /projects/{project_id}/jobs/{job_id}"]
    )
    start = report.action("start_job")
    assert "check_with" not in start.definition
    assert list(start.definition["result"]) == ["state"]
    assert start.definition["card"]["result"] == (
        "Only these fields of the upstream's answer: state."
    )
    assert has_warning(
        start, "check_with get_contact not wired: the read get_contact is not proposed"
    )
    assert_loadable(report)


def test_x_countersign_status_follows_the_location_or_a_path_of_the_input(api):
    rules = {"done_when": {"pointer": "/state", "equals": "done"}, "max_checks": 5}
    located = answer(JOB, "202", headers={"Location": {"schema": {"type": "string"}}})
    report = run(
        mini(
            jobs(located, post={"x-countersign": {"status_operation": "getJob", "status": rules}})
        ),
        dry_run=True,
    )
    start = report.action("start_job")
    assert start.definition["status"] == {"from_location": True, **rules}
    assert start.status_follow == "Location"
    assert_loadable(report)

    # Without a Location, the status operation's path must come from the write's input.
    paths = jobs(post={"x-countersign": {"status_operation": "getJob", "status": rules}})
    report = run(mini(paths), dry_run=True)
    assert (
        "the status operation's path needs job_id, which this write's input does not have"
        in (refused(report)["POST /projects/{project_id}/jobs"])
    )
    paths["/projects/{project_id}/state"] = {
        "parameters": [{**ID_PARAM, "name": "project_id"}],
        "get": {"operationId": "getProjectState", "responses": answer(JOB)},
    }
    paths["/projects/{project_id}/jobs"]["post"]["x-countersign"]["status_operation"] = (
        "getProjectState"
    )
    report = run(mini(paths), dry_run=True)
    assert report.action("start_job").definition["status"] == {
        "path": "/projects/{project_id}/state",
        **rules,
    }
    # A rule the catalog would refuse refuses the operation, never silently.
    bad = {"done_when": {"pointer": "/state"}}
    paths["/projects/{project_id}/jobs"]["post"]["x-countersign"]["status"] = bad
    assert (
        "status/done_when"
        in refused(run(mini(paths), dry_run=True))["POST /projects/{project_id}/jobs"]
    )


def test_a_card_that_promises_an_id_the_answer_lacks_is_flagged(api):
    card = {"result": "The export's id."}
    record = {"type": "object", "properties": {"state": {"type": "string"}}}
    report = run(
        mini(jobs(answer(record, "202"), post={"x-countersign": {"card": card}})), dry_run=True
    )
    start = report.action("start_job")
    assert has_warning(start, "the card promises 'id' but no result field carries one")
    assert has_warning(start, "cannot be enabled until a result field carries it")
    # A drafted card never promises what the result lacks: a field named "identifier"
    # would read as a promise, so no sentence is drafted.
    _, read = read_of({"type": "object", "properties": {"identifier": {"type": "string"}}})
    assert read.definition["card"]["result"] == ""


# --- what is stored passes the loader; hostile documents stay bounded ----------------------


def test_imported_reads_load_from_an_export_and_can_be_enabled(api):
    Connector.objects.create(name="deployments", base_url="https://deploy.example.com")
    text = (DOCS / "deployments.yaml").read_text()
    report = import_openapi(text, connector="deployments", actor="ada")
    reads = [p.name for p in report.proposed if p.kind == "read"]
    assert reads == ["get_build_status", "get_deployment"]
    assert {p.stored for p in report.proposed} == {"created"}

    # The export of what was stored loads again, as it is (the loader's own checks).
    exported = export_catalog()
    Action.objects.all().delete()
    loaded = load_catalog(exported, source="export.yaml")
    assert set(reads) <= set(loaded.created)
    start = Action.objects.get(name="create_preview_deployment")
    assert start.definition["check_with"]["action"] == "get_deployment"
    assert start.spec.check_with.input == {
        "project_id": {"$input": "project_id"},
        "deployment_id": {"$result": "id"},
    }

    # A person completes the read's card and confirms its class: it can be enabled.
    read = Action.objects.get(name="get_deployment")
    definition = {**read.definition, "card": {**read.definition["card"], **CARD}}
    assert definition_problems("get_deployment", definition, class_confirmed=True) == []
    action, _ = action_define(
        name="get_deployment",
        definition={**definition, "enabled": True},
        actor="ada",
        source=Action.Source.ADMIN,
        class_confirmed=True,
    )
    assert (action.enabled, action.kind, action.spec.result[0].name) == (True, "read", "build_id")


def test_a_hostile_answer_schema_stays_bounded(api):
    # 50,000 properties in one answer, a link that refers to itself, links that are not
    # links: refused or ignored in bounded time, never a crash.
    wide = {"type": "object", "properties": {f"f{i}": {"type": "string"} for i in range(50_000)}}
    paths = jobs(
        answer(
            JOB,
            "202",
            links={
                "Self": {"$ref": "#/components/links/Self"},
                "Odd": ["x"],
                "Q": {"operationId": 5},
            },
        ),
        get={"responses": answer(wide)},
    )
    text = json.dumps(
        {
            "openapi": "3.1.0",
            "info": {"title": "t", "version": "1"},
            "paths": paths,
            "components": {"links": {"Self": {"$ref": "#/components/links/Self"}}},
        }
    )
    started = time.monotonic()
    report = import_openapi(text, connector="api", actor="ada", dry_run=True)
    assert time.monotonic() - started < 8.0
    read = report.action("get_job")
    assert len(read.definition["result"]) == MAX_RESULT_FIELDS
    assert has_warning(read, "the answer documents 50000 fields; only the first 1000")
    assert has_warning(read, "980 more left out")
    start = report.action("start_job")
    assert "check_with" not in start.definition
    assert has_warning(start, "link 'Self': recursive schema")
    assert_loadable(report)


def test_the_command_lists_reads_results_and_checks(api, tmp_path):
    path = tmp_path / "jobs.yaml"
    path.write_text(mini(jobs(answer(JOB, "202", links={"GetJob": LINK}))))
    out = io.StringIO()
    call_command("import_openapi", str(path), "--connector", "api", "--dry-run", stdout=out)
    lines = out.getvalue().splitlines()
    assert "2 actions proposed (1 reads)" in lines[0]
    read = next(line for line in lines if line.lstrip().startswith("get_job "))
    assert read.split()[:3] == ["get_job", "read", "observation"]
    assert "      returns: id (string), state (string: queued, done, failed)" in lines
    assert "      checked with: get_job" in lines


def test_an_undocumented_path_parameter_becomes_a_required_input_of_writes_and_reads(api):
    """The template names {Item-Id} but no parameter describes it: both the write and the
    read take it as a required string input under an identifier's name, with a warning."""
    item = {
        "type": "object",
        "properties": {"id": {"type": "string"}, "note": {"type": "string", "maxLength": 80}},
    }
    paths = {
        "/items/{Item-Id}": {
            "get": {
                "operationId": "getItem",
                "summary": "Read one item",
                "responses": answer(item),
            },
            "patch": {
                "operationId": "updateItem",
                "summary": "Change one item's note",
                "requestBody": json_body(item),
                "responses": {"200": {"description": "ok"}},
            },
        }
    }
    report = run(mini(paths), dry_run=True)
    for name in ("get_item", "update_item"):
        proposal = report.action(name)
        definition = proposal.definition
        assert definition["target"] == "/items/{item_id}", name
        assert definition["input_schema"]["properties"]["item_id"]["type"] == "string", name
        assert "item_id" in definition["input_schema"]["required"], name
        assert has_warning(proposal, "path parameter 'Item-Id' is not documented"), name
    assert_loadable(report)
