"""``manage.py load_policies FILE``: a file holding only ``policies:`` replaces the policy
set and leaves the rest of the catalog in force (connectors and their addresses, actions,
decision rules), checked against that catalog as a full load checks it, versioned and
audited alike."""

from __future__ import annotations

from io import StringIO

import pytest
import yaml
from django.core.management import CommandError, call_command

from actions.catalog import load_catalog
from actions.lib.models import AuditEvent
from actions.models import Action, Connector, DecisionRule
from actions.policy.versions import policy_version_current
from tests.conftest import DEMO_CATALOG

ROUTINE = (DEMO_CATALOG.parent / "policies" / "routine-email.cedar").read_text()
LARGE_INVOICES = (DEMO_CATALOG.parent / "policies" / "large-invoices.cedar").read_text()


@pytest.fixture
def in_force(catalog, upstream):
    """The demo catalog with its decision rules and policies, as a full load leaves it."""
    rules = yaml.safe_load(DEMO_CATALOG.read_text())["reviewers"]
    load_catalog(yaml.safe_dump({"version": 1, "reviewers": rules}))
    load_catalog(
        yaml.safe_dump(
            {
                "version": 1,
                "policies": {
                    "enforce": [
                        {"file": "policies/routine-email.cedar"},
                        {"file": "policies/large-invoices.cedar"},
                    ]
                },
            }
        ),
        base_dir=DEMO_CATALOG.parent,
    )
    return policy_version_current()


def write(tmp_path, body: str, cedar: dict[str, str] | None = None):
    for name, text in (cedar or {}).items():
        (tmp_path / name).write_text(text)
    path = tmp_path / "policies.yaml"
    path.write_text(body)
    return str(path)


def load(path: str) -> str:
    out = StringIO()
    call_command("load_policies", path, stdout=out)
    return out.getvalue()


def test_a_policies_file_replaces_the_set_and_leaves_the_catalog_as_it_is(
    in_force, upstream, tmp_path
):
    stored = {a.name: (a.digest, a.version) for a in Action.objects.all()}
    rules = dict(DecisionRule.objects.values_list("name", "digest"))
    path = write(
        tmp_path,
        "version: 1\npolicies:\n  enforce:\n    - file: routine-email.cedar\n",
        {"routine-email.cedar": ROUTINE},
    )
    printed = load(path)
    current = policy_version_current()
    assert current.number == in_force.number + 1
    assert printed == f"policies: version {current.number} in force (new)\n"
    assert "large-invoices" not in current.enforce and "routine-email" in current.enforce
    # Versioned and audited as a catalog load's policies are.
    event = AuditEvent.objects.filter(kind="policy.changed").latest("id")
    assert event.data["version"] == current.number
    # Nothing else moved: the connector keeps the address it was loaded with (a full
    # load of the demo file without --base-url would have put back the file's own).
    assert Connector.objects.get(name="demo").base_url == upstream.url.rstrip("/")
    assert {a.name: (a.digest, a.version) for a in Action.objects.all()} == stored
    assert dict(DecisionRule.objects.values_list("name", "digest")) == rules
    # The same file again: no new version.
    assert load(path) == f"policies: version {current.number} in force (unchanged)\n"


def test_a_policy_the_catalog_in_force_refuses_is_refused_with_its_file_and_line(
    in_force, tmp_path
):
    bad = (
        '@id("big-memo") @approve\n'
        'permit (principal, action == Action::"update_invoice_memo", resource)\n'
        "when {\n"
        "  context.input.memo_length > 3\n"
        "};\n"
    )
    path = write(
        tmp_path,
        "version: 1\npolicies:\n  enforce:\n"
        "    - file: routine-email.cedar\n    - file: bad.cedar\n",
        {"routine-email.cedar": ROUTINE, "bad.cedar": bad},
    )
    with pytest.raises(CommandError) as info:
        load(path)
    text = str(info.value)
    assert text.startswith(f"{path}: the policies were not loaded:")
    assert "bad.cedar, line 4: policy big-memo: `context.input.memo_length`" in text
    assert "is no input field of update_invoice_memo" in text
    assert policy_version_current() == in_force


def test_an_unknown_group_is_refused_as_a_catalog_load_refuses_it(in_force, tmp_path):
    require = (
        '@id("ask-billing") @require("billing-aprovers")\n'
        'permit (principal, action == Action::"send_invoice", resource);\n'
    )
    path = write(
        tmp_path,
        "version: 1\npolicies:\n  enforce:\n    - file: ask.cedar\n",
        {"ask.cedar": require},
    )
    with pytest.raises(CommandError, match="unknown group 'billing-aprovers'"):
        load(path)
    assert policy_version_current() == in_force


def test_a_file_with_more_than_policies_is_refused_naming_the_section(in_force, tmp_path):
    path = write(
        tmp_path,
        "version: 1\nconnectors:\n  demo: {base_url: 'http://example.test'}\npolicies: {}\n",
    )
    with pytest.raises(CommandError) as info:
        load(path)
    assert "line 2: /connectors: a policies file holds only version and policies" in str(info.value)
    assert policy_version_current() == in_force
    missing = write(tmp_path, "version: 1\n")
    with pytest.raises(CommandError, match="no policies: section"):
        load(missing)


def test_a_cedar_file_alone_is_refused_saying_how_to_name_it(in_force, tmp_path):
    cedar = tmp_path / "routine-email.cedar"
    cedar.write_text(ROUTINE)
    with pytest.raises(CommandError, match="name it in a policies file"):
        load(str(cedar))
    assert policy_version_current() == in_force


def test_load_catalog_takes_the_same_file(in_force, upstream, tmp_path):
    path = write(
        tmp_path,
        "version: 1\npolicies:\n  enforce:\n    - file: large-invoices.cedar\n",
        {"large-invoices.cedar": LARGE_INVOICES},
    )
    out = StringIO()
    call_command("load_catalog", path, stdout=out)
    assert f"policies: version {in_force.number + 1} in force (new)" in out.getvalue()
    assert Connector.objects.get(name="demo").base_url == upstream.url.rstrip("/")
    assert "routine-email" not in policy_version_current().enforce
