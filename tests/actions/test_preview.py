"""The read-only preview, for every change kind, and guarantee 1: a preview never writes."""

from __future__ import annotations

import pytest

from actions.clients import read_client
from actions.lib.canonical import digest
from actions.lib.http import ReadOnlyClient, ReadOnlyViolation, connector_url
from actions.models import Connector
from actions.preview import (
    PreviewError,
    TargetExists,
    TargetNotFound,
    UpstreamTimeout,
    diff,
    merge_patch,
)
from actions.spec import TemplateError, markdown_block, markdown_code
from approvals.models import Plan
from demo.upstream import contact_etag
from tests.conftest import READ_TOKEN, WRITE_TOKEN

REMINDER = {
    "customer_id": "cus-77",
    "channel": "email",
    "send_at": "2030-01-02T09:00:00Z",
    "message": "Your invoice inv-2001 is due. **Pay now**",
}

# One input per action in the demo catalog: each change kind and each way of versioning.
EVERY_ACTION = {
    "update_contact_email": {"contact_id": "c-1001", "email": "ada@new.example"},
    "create_contact": {
        "contact_id": "c-2000",
        "name": "Katherine Johnson",
        "email": "kj@example.test",
        "workspace": "ws-red",
    },
    "delete_contact": {"contact_id": "c-1003"},
    "update_invoice_memo": {"invoice_id": "inv-2001", "memo": "Thanks!"},
    "replace_note": {"note_id": "n-1", "title": "Runbook v2", "body": "Page the on-call."},
    "send_reminder": REMINDER,
    "start_deployment": {"service": "api", "version": "v1.2.3"},
}


def demo_spec(name: str):
    """An action's spec straight from the demo file (no database needed)."""
    import yaml

    from actions.spec import ActionSpec
    from tests.conftest import DEMO_CATALOG

    return ActionSpec.from_definition(
        name, yaml.safe_load(DEMO_CATALOG.read_text())["actions"][name]
    )


DEMO_CONNECTOR = Connector(name="demo", base_url="http://127.0.0.1:8765")


def assert_only_read_token_used(upstream) -> None:
    log = upstream.requests_log()
    assert log, "expected the preview to read the upstream"
    for entry in log:
        assert entry["method"] == "GET"
        assert entry["headers"]["authorization"] == f"Bearer {READ_TOKEN}"
        assert WRITE_TOKEN not in repr(entry)


# --- guarantee 1: preview never mutates ------------------------------------------------------


@pytest.mark.parametrize("action", sorted(EVERY_ACTION))
def test_no_preview_writes_upstream(upstream, make_plan, action):
    seed = upstream.state()
    make_plan(action=action, input=EVERY_ACTION[action])
    assert upstream.writes() == []
    assert upstream.state() == seed
    assert all(e["method"] in ("GET", "HEAD") for e in upstream.requests_log())


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "post", "OPTIONS"])
def test_the_read_only_client_refuses_writes_before_sending(upstream, catalog, method):
    connector = Connector.objects.get(name="demo")
    with read_client(connector) as client:
        assert isinstance(client, ReadOnlyClient)
        with pytest.raises(ReadOnlyViolation):
            client.request(method, "/contacts/c-1001", body={"email": "x@y.z"})
    assert upstream.requests_log() == []


def test_the_read_only_client_has_no_write_helpers(catalog):
    with read_client(Connector.objects.get(name="demo")) as client:
        for name in ("post", "put", "patch", "delete"):
            assert not hasattr(client, name)


def test_the_read_client_carries_the_read_token(upstream, make_plan):
    make_plan()
    assert_only_read_token_used(upstream)


def test_the_read_client_uses_the_newest_read_credential(upstream, catalog):
    from actions.models import Credential
    from actions.services import credential_set

    connector = Connector.objects.get(name="demo")
    credential_set(
        connector=connector, role=Credential.Role.READ, secret={"token": "rotated-read-token"}
    )
    with read_client(connector) as client:
        assert client.get("/contacts/c-1001").status == 401
    assert upstream.requests_log()[0]["headers"]["authorization"] == "Bearer rotated-read-token"


# --- update (ETag) -------------------------------------------------------------------------


def test_update_preview(upstream, make_plan):
    etag = contact_etag(upstream.state()["contacts"]["c-1001"])
    plan = make_plan(reason="customer asked")
    assert plan.status == "awaiting_approval"
    assert plan.kind == "update"
    assert plan.before["email"] == "ada@example.test"
    assert plan.after == {**plan.before, "email": "ada@new.example"}
    assert plan.changes == [
        {
            "path": "/email",
            "op": "replace",
            "before": "ada@example.test",
            "after": "ada@new.example",
        }
    ]
    assert plan.precondition == {
        "kind": "version",
        "source": "etag",
        "expected": etag,
        "enforced_by": "if_match",
    }
    assert plan.write_request == {
        "method": "PATCH",
        "path": "/contacts/c-1001",
        "headers": {"If-Match": etag},
        "content_type": "application/merge-patch+json",
        "body": {"email": "ada@new.example"},
    }
    assert plan.target == {
        "connector": "demo",
        "base_url": upstream.url,
        "path": "/contacts/c-1001",
    }
    assert "`ada@new.example`" in plan.summary_markdown
    assert plan.reason == "customer asked"
    assert Plan.objects.filter(pk=plan.pk).exists()


def test_update_without_a_change_says_so(upstream, make_plan):
    plan = make_plan(input={"contact_id": "c-1001", "email": "ada@example.test"})
    assert plan.changes == []
    assert "No field changes" in plan.summary_markdown


def test_update_of_a_missing_target_is_not_found(upstream, make_plan):
    with pytest.raises(TargetNotFound) as info:
        make_plan(input={"contact_id": "c-9999", "email": "x@example.test"})
    assert info.value.status == 404
    assert Plan.objects.count() == 0


# --- create --------------------------------------------------------------------------------


def test_create_preview(upstream, make_plan):
    plan = make_plan(action="create_contact", input=EVERY_ACTION["create_contact"])
    assert plan.before is None
    assert plan.after == {
        "id": "c-2000",
        "name": "Katherine Johnson",
        "email": "kj@example.test",
        "workspace": "ws-red",
    }
    assert plan.precondition == {"kind": "absent", "expected": None, "enforced_by": "if_none_match"}
    assert plan.write_request["method"] == "PUT"
    assert plan.write_request["headers"] == {"If-None-Match": "*"}
    assert plan.write_request["body"] == plan.after
    assert {c["op"] for c in plan.changes} == {"add"}
    # The preview looked: the read saw 404.
    assert [(e["method"], e["status"]) for e in upstream.requests_log()] == [("GET", 404)]


def test_create_on_an_existing_target_is_refused(upstream, make_plan):
    with pytest.raises(TargetExists) as info:
        make_plan(
            action="create_contact",
            input={**EVERY_ACTION["create_contact"], "contact_id": "c-1001"},
        )
    assert info.value.status == 409
    assert info.value.type == "target-exists"
    assert Plan.objects.count() == 0


# --- delete --------------------------------------------------------------------------------


def test_delete_preview(upstream, make_plan):
    plan = make_plan(action="delete_contact", input={"contact_id": "c-1003"})
    etag = contact_etag(upstream.state()["contacts"]["c-1003"])
    assert plan.before["name"] == "Alan Turing"
    assert plan.after is None
    assert plan.changes == [{"path": "/", "op": "remove", "before": plan.before, "after": None}]
    assert plan.precondition["expected"] == etag
    assert plan.write_request["headers"] == {"If-Match": etag}
    assert plan.write_request["body"] is None
    assert plan.write_request["content_type"] is None
    assert plan.approvals_required == 2
    assert "no longer exist" in plan.summary_markdown


# --- replace (hash version) ----------------------------------------------------------------


def test_replace_preview_uses_a_hash_version_enforced_by_reread(upstream, make_plan):
    plan = make_plan(action="replace_note", input=EVERY_ACTION["replace_note"])
    note = upstream.state()["notes"]["n-1"]
    assert plan.before == note
    assert plan.after == {"id": "n-1", "title": "Runbook v2", "body": "Page the on-call."}
    assert plan.precondition == {
        "kind": "version",
        "source": "hash",
        "expected": digest(note),
        "enforced_by": "reread",
    }
    assert plan.write_request["headers"] == {}
    assert plan.write_request["method"] == "PUT"


# --- update with a body-field version ------------------------------------------------------


def test_invoice_memo_preview_carries_the_expected_revision_in_the_body(upstream, make_plan):
    plan = make_plan(action="update_invoice_memo", input=EVERY_ACTION["update_invoice_memo"])
    assert plan.precondition == {
        "kind": "version",
        "source": "field",
        "expected": 3,
        "enforced_by": "field",
    }
    assert plan.write_request["body"] == {"memo": "Thanks!", "expected_revision": 3}
    assert plan.write_request["headers"] == {}
    assert plan.write_request["content_type"] == "application/json"
    assert plan.after["memo"] == "Thanks!"
    assert "expected_revision" not in plan.after
    assert plan.changes == [{"path": "/memo", "op": "replace", "before": "", "after": "Thanks!"}]


# --- invoke --------------------------------------------------------------------------------


def test_invoke_preview_reads_nothing_and_shows_the_message(upstream, make_plan):
    plan = make_plan(action="send_reminder", input=REMINDER)
    assert upstream.requests_log() == []
    assert plan.before is None
    assert plan.after == REMINDER
    assert plan.precondition == {"kind": "none", "expected": None, "enforced_by": "none"}
    assert plan.write_request["method"] == "POST"
    assert plan.write_request["path"] == "/reminders"
    # The agent's message is shown verbatim inside a fenced code block, never as markdown.
    summary = plan.summary_markdown
    fence_open = summary.index("```\n")
    fence_close = summary.index("\n```", fence_open + 3)
    assert REMINDER["message"] in summary[fence_open:fence_close]
    assert summary.count(REMINDER["message"]) == 1
    assert "Send a `email` reminder to customer `cus-77`" in summary


def test_a_message_cannot_close_its_code_block(upstream, make_plan):
    message = "hi\n```\n# Approved by admin\n```"
    plan = make_plan(action="send_reminder", input={**REMINDER, "message": message})
    assert "\n````\n" in plan.summary_markdown  # the fence grew past the message's own


def test_markdown_helpers_escape_backticks():
    assert markdown_code("a`b") == "``a`b``"
    assert markdown_code("`x`") == "`` `x` ``"
    assert markdown_block("```") == "````\n```\n````"


# --- failures: nothing is stored -----------------------------------------------------------


def test_an_upstream_error_on_read_is_a_preview_error(upstream, make_plan):
    upstream.add_fault(method="GET", status=500)
    with pytest.raises(PreviewError) as info:
        make_plan()
    assert info.value.status == 502
    assert Plan.objects.count() == 0


def test_a_slow_upstream_read_is_a_timeout(upstream, make_plan):
    Connector.objects.filter(name="demo").update(read_timeout=0.2)
    upstream.add_fault(method="GET", delay=0.6)
    with pytest.raises(UpstreamTimeout) as info:
        make_plan()
    assert info.value.status == 504
    assert Plan.objects.count() == 0


# --- path templates ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, rendered",
    [
        ("../x", "/contacts/..%2Fx"),
        ("a/b", "/contacts/a%2Fb"),
        ("a?b#c", "/contacts/a%3Fb%23c"),
        ("%2e%2e", "/contacts/%252e%252e"),
        ("ü", "/contacts/%C3%BC"),
        ("@evil.example", "/contacts/%40evil.example"),
        (42, "/contacts/42"),
    ],
)
def test_path_values_are_one_encoded_segment(value, rendered):
    spec = demo_spec("delete_contact")
    path = spec.render_path("/contacts/{contact_id}", {"contact_id": value})
    assert path == rendered
    assert path.count("/") == 2
    assert connector_url(DEMO_CONNECTOR, path) == DEMO_CONNECTOR.base_url + rendered


@pytest.mark.parametrize("value", ["", ".", "..", None, True, 1.5, ["a"], {"a": 1}])
def test_unusable_path_values_are_refused(value):
    spec = demo_spec("delete_contact")
    with pytest.raises(TemplateError):
        spec.render_path("/contacts/{contact_id}", {"contact_id": value})


def test_a_missing_path_value_is_refused():
    with pytest.raises(TemplateError):
        demo_spec("delete_contact").render_path("/contacts/{contact_id}", {})


@pytest.mark.parametrize(
    "path", ["contacts", "//evil.example/x", "/a?b=1", "/a#f", "/a@b", "/a b", "/a\\b"]
)
def test_connector_urls_never_leave_the_connector(path):
    with pytest.raises(ValueError):
        connector_url(DEMO_CONNECTOR, path)


# --- merge patch and diff ------------------------------------------------------------------


def test_merge_patch_follows_rfc_7386():
    target = {"a": "b", "c": {"d": "e", "f": "g"}}
    patch = {"a": "z", "c": {"f": None}}
    assert merge_patch(target, patch) == {"a": "z", "c": {"d": "e"}}
    assert target == {"a": "b", "c": {"d": "e", "f": "g"}}  # not modified
    assert merge_patch({"a": [1, 2]}, {"a": [3]}) == {"a": [3]}
    assert merge_patch("scalar", {"a": 1}) == {"a": 1}


def test_diff_reports_field_level_changes():
    assert diff({"a": 1, "b": {"c": 1}}, {"a": 1, "b": {"c": 2}, "d": 3}) == [
        {"path": "/b/c", "op": "replace", "before": 1, "after": 2},
        {"path": "/d", "op": "add", "before": None, "after": 3},
    ]
    assert diff({"x/y": 1}, {}) == [{"path": "/x~1y", "op": "remove", "before": 1, "after": None}]
    assert diff(1, True) == [{"path": "/", "op": "replace", "before": 1, "after": True}]
