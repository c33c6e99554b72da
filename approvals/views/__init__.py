"""The reviewers' pages, one module a page: the queue, a plan, the audit log, the
dashboard and the session grants. Server-rendered; an HTMX request gets the same
template's fragment. Queries live in approvals/selectors.py, state changes in the
services; the pages translate domain errors through approvals/views/pages.py."""
