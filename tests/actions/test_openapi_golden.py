"""Importing every document under tests/actions/openapi/ gives the same proposals, byte
for byte, as the files under tests/actions/openapi/golden/.

Each file holds what one import says and stores: the command's report, every proposal
(definition, warnings, class, links) and every refusal as JSON in the importer's own
order, and the catalog export of what was stored. A change to the importer that changes
any of it fails here; when the change is meant, write the files again and read the diff:

    UPDATE_GOLDEN=1 make test PYTEST_ARGS='tests/actions/test_openapi_golden.py -q'
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from actions.export import export_catalog
from actions.management.commands.import_openapi import render_report
from actions.openapi import ImportReport, import_openapi

DOCS = Path(__file__).with_name("openapi")
GOLDEN = DOCS / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"

# Every document as the command imports it by default; then the options the other tests
# use with some of them (a fixed header, a prefix, a selection by operationId).
CASES: dict[str, tuple[str, dict]] = {
    path.stem: (path.stem, {}) for path in sorted(DOCS.glob("*.yaml"))
} | {
    "billing--header": ("billing", {"headers": {"From": "ops@example.com"}}),
    "chat--prefix-only": ("chat", {"prefix": "c_", "only": ["deleteMessage", "getMessage"]}),
    "deployments--only": (
        "deployments",
        {"only": ["getDeployment", "createPreviewDeployment", "promoteDeployment"]},
    ),
}


def snapshot(report: ImportReport) -> dict:
    """The report as plain values, with what the command derives from each proposal."""
    out = dataclasses.asdict(report)
    out["proposed"] = [
        {
            **dataclasses.asdict(p),
            "result_fields": p.result_fields,
            "check_with": p.check_with,
            "status_follow": p.status_follow,
        }
        for p in report.proposed
    ]
    return out


def imported(document: str, options: dict) -> str:
    report = import_openapi(
        (DOCS / f"{document}.yaml").read_text(),
        connector=document.replace("-", "_"),
        actor="golden",
        source_name=f"{document}.yaml",
        create_connector=True,
        **options,
    )
    return (
        "# the command's report\n"
        + render_report(report)
        + "\n\n# the proposals and refusals\n"
        + json.dumps(snapshot(report), indent=1, ensure_ascii=False)
        + "\n\n# the catalog, exported after the import\n"
        + export_catalog()
    )


def test_every_document_has_a_case():
    assert {path.stem for path in DOCS.glob("*.yaml")} <= set(CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_import_matches_the_golden_file(db, case):
    document, options = CASES[case]
    actual = imported(document, options)
    golden = GOLDEN / f"{case}.txt"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        golden.write_text(actual)
    assert golden.exists(), f"no {golden.name}: write it with UPDATE_GOLDEN=1"
    assert actual == golden.read_text()
