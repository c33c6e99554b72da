"""What B1 loads beside the demo catalog's own (bench/run.py): 200 decision rules and
200 policies, each aimed at the plans B1 submits, so that each is evaluated on every
submission, not skipped.

B1 proposes ``update_contact_email`` on bench contacts (``workspace: ws-blue``,
``email: c-<n>@old.test``) with a new address ``<tag><i>@bench.test``. Both sets are
written for that action, with comparisons a submission must decide:

* **rules** (the ``reviewers:`` section, after the demo's two): 195 match the action and
  compare the contact as read or the input with values it does not have (its workspace
  equal to another one, or among others; the new address among a list of blocked
  ones), so none applies; 5 compare the workspace with ``ws-blue`` and hold, each asking
  for one support lead (one clause, asked once);
* **policies** (the ``policies:`` section, after the demo's three, as one more text):
  all 200 are scoped to the action (``action == Action::"update_contact_email"``), so
  every one is put to every plan: 50 forbids on another workspace, 50 ``@require`` on
  the new address's domain being a partner's, 50 forbids on the agent's rate (a day
  of more plans than B1 makes), 45 ``@approve`` on an address at a trusted domain in
  the blue workspace; none of these holds. 5 ``@require("support-leads")`` hold (the
  blue workspace, the email changed). No ``@approve`` holds: the plans go to people, as
  B1's plans always do, and nothing extra is executed.

The 5 that hold give B1's plans a requirement (one support lead), which a plan without
it does not have: its submission then also checks that someone can decide it and records
the group. So B1 runs a fourth variant, with one rule that holds and asks the same
(``rule_1``): the same plans, the same requirement, without the 200. Against it, the
ratio is what the 200 themselves cost; against plain B1, what they cost with the
requirement they add.

Loading a section replaces what is in force (``load_catalog``); the demo's own sections
are loaded back afterwards (``demo_sections``).
"""

from __future__ import annotations

from pathlib import Path

import yaml

ACTION = "update_contact_email"
GROUP = "support-leads"
MATCHING = 5  # of each 200: the ones that hold for B1's plans


def demo_sections(demo_catalog: Path) -> dict:
    """The demo catalog's ``reviewers:`` and ``policies:`` sections, as it ships them."""
    document = yaml.safe_load(demo_catalog.read_text())
    return {"reviewers": document["reviewers"], "policies": document["policies"]}


def rules_200(demo: dict) -> dict:
    """The ``reviewers:`` section: the demo's rules, then 200 more for B1's action."""
    section = {
        "groups": list(demo["reviewers"]["groups"]),
        "rules": dict(demo["reviewers"]["rules"]),
    }
    rules = section["rules"]
    for i in range(200 - MATCHING):
        kind = i % 3
        if kind == 0:
            match = {"before": [{"pointer": "/workspace", "equals": f"ws-{i:03d}"}]}
        elif kind == 1:
            match = {"before": [{"pointer": "/workspace", "in": [f"ws-{i:03d}", f"ws-x{i:03d}"]}]}
        else:
            match = {"input": [{"pointer": "/email", "in": [f"blocked-{i}@bench.test"]}]}
        rules[f"bench-{i:03d}"] = {
            "match": {"actions": [ACTION], **match},
            "any_of": [{"group": GROUP, "count": 1}],
        }
    for i in range(MATCHING):
        rules[f"bench-blue-{i}"] = {
            "match": {
                "actions": [ACTION],
                "before": [{"pointer": "/workspace", "equals": "ws-blue"}],
            },
            "any_of": [{"group": GROUP, "count": 1}],
        }
    return section


def rule_1(demo: dict) -> dict:
    """The ``reviewers:`` section: the demo's rules and one more that holds for B1's
    plans, asking what the 5 that hold among the 200 ask (one support lead): the same
    plans with the same requirement, without the 200."""
    section = {
        "groups": list(demo["reviewers"]["groups"]),
        "rules": dict(demo["reviewers"]["rules"]),
    }
    section["rules"]["bench-blue"] = {
        "match": {"actions": [ACTION], "before": [{"pointer": "/workspace", "equals": "ws-blue"}]},
        "any_of": [{"group": GROUP, "count": 1}],
    }
    return section


def policies_200() -> str:
    """200 policies for B1's action, as one Cedar text."""
    scope = f'permit (principal, action == Action::"{ACTION}", resource)'
    forbid = f'forbid (principal, action == Action::"{ACTION}", resource)'
    out: list[str] = []
    for i in range(50):
        out.append(
            f'@id("hold-ws-{i:03d}")\n@reason("workspace ws-{i:03d} is frozen")\n{forbid}\n'
            f'when {{ context.before.workspace == "ws-{i:03d}" }};'
        )
    for i in range(50):
        out.append(
            f'@id("partner-{i:03d}")\n@require("{GROUP}")\n{scope}\n'
            f'when {{ context.email_domains["/email"] has after &&\n'
            f'       context.email_domains["/email"].after == "partner-{i:03d}.example" }};'
        )
    for i in range(50):
        out.append(
            f'@id("flood-{i:03d}")\n@reason("too many changes in a day")\n{forbid}\n'
            f"when {{ context.rate.day > {5_000_000 + i} }};"
        )
    for i in range(45):
        out.append(
            f'@id("trusted-{i:03d}")\n@approve\n{scope}\n'
            f'when {{ context.input.email like "*@trusted-{i:03d}.example" &&\n'
            f'       context.before.workspace == "ws-blue" }};'
        )
    for i in range(MATCHING):
        out.append(
            f'@id("blue-desk-{i}")\n@require("{GROUP}")\n{scope}\n'
            'when { context.before.workspace == "ws-blue" &&\n'
            '       context.changed.contains("/email") };'
        )
    return "\n\n".join(out) + "\n"


def policies_section(demo: dict, extra: str) -> dict:
    """The ``policies:`` section: the demo's, with ``extra`` as one more text."""
    section = dict(demo["policies"])
    groups = sorted(set(section.get("groups") or []) | {GROUP})
    return {**section, "groups": groups, "enforce": [*section["enforce"], {"text": extra}]}
