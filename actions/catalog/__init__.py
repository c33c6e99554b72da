"""Catalog files: validate everything first, then write all of it or nothing.

One concern a module: parsing (strict YAML and the lines of pointers), validation (the
document as a whole, against the schema, the decision rules and the policies),
definitions (one action's definition on its own terms), loading (writing a validated
document in one transaction) and problems (what is wrong, and where).

Callers import from ``actions.catalog``: the commands, the admin, the importer, the
export and the drafts all read or write through these names, whichever module holds
them. The modules import each other, never this one.
"""

from __future__ import annotations

from .definitions import result_promise_problem
from .loading import (
    LoadReport,
    action_confirm_class,
    action_define,
    catalog_apply,
    catalog_document,
    decision_rules_replace,
    load_catalog,
    policies_replace,
)
from .parsing import MAX_CATALOG_BYTES, line_of, parse_catalog_text
from .problems import CatalogError, CatalogProblem
from .validation import SCHEMA_PATH, catalog_schema, validate_action_definition, validate_catalog

__all__ = [
    "MAX_CATALOG_BYTES",
    "SCHEMA_PATH",
    "CatalogError",
    "CatalogProblem",
    "LoadReport",
    "action_confirm_class",
    "action_define",
    "catalog_apply",
    "catalog_document",
    "catalog_schema",
    "decision_rules_replace",
    "line_of",
    "load_catalog",
    "parse_catalog_text",
    "policies_replace",
    "result_promise_problem",
    "validate_action_definition",
    "validate_catalog",
]
