"""Where decision rules and policies live as catalog data: loaded with the catalog,
validated against its actions, exported with it, and evaluated here (approvals.decisions
applies the outcome to plans). Under the layers contract, this package imports no app.
Scope and eligibility rules stay in actions/rules.py; the ``reviewers:`` section's rules
are in reviewers.py."""
