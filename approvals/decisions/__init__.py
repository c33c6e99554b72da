"""Where decision rules and policies are applied: at submission (who may review), at each
decision (is this reviewer eligible, does this approval meet a threshold) and at the
worker's claim, and the floor that keeps a plan's requester from approving it
(requester.py). Part of the core: the services call it, and it imports no surface
(pyproject.toml, [tool.importlinter]). The rules themselves are catalog data, loaded,
validated and evaluated in actions.policy."""
