"""The catalog blocks in docs/catalog.md are real catalogs: the loader accepts them."""

from __future__ import annotations

import re

import pytest

from actions.catalog import load_catalog
from actions.models import Action
from demo.processes import ROOT

pytestmark = pytest.mark.django_db


def block(name: str) -> str:
    text = (ROOT / "docs" / "catalog.md").read_text()
    match = re.search(rf"<!-- catalog: {name} -->\n```yaml\n(.*?)\n```", text, re.DOTALL)
    assert match, f"docs/catalog.md has no catalog block {name!r}"
    return match.group(1)


def test_the_pipeline_cards_load_with_the_results_they_promise():
    report = load_catalog(block("pipeline"), source="docs/catalog.md")
    assert sorted(report.created) == [
        "create_preview_deployment",
        "get_preview_deployment",
        "promote_preview_build",
    ]
    promote = Action.objects.get(name="promote_preview_build").spec
    assert {f.name for f in promote.result} == {"release_id", "channel", "promoted_at"}
    deploy = Action.objects.get(name="create_preview_deployment").spec
    assert deploy.check_with.action == "get_preview_deployment"
    assert Action.objects.get(name="get_preview_deployment").spec.approval.mode == "none"
