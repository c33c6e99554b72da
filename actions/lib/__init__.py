"""The pieces every app uses and that know no app: the audit trail, canonical JSON,
domain errors and problem documents, the upstream HTTP clients and the filtering of
what upstreams send, and the names of the tasks workers run.

Nothing here imports ``actions`` (outside this package), ``approvals`` or
``executors``; ``make lint`` keeps it so (import-linter, pyproject.toml). It is a
Django app of its own (label ``lib``) because the audit trail is a table.
"""
