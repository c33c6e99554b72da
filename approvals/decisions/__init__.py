"""Where decision rules and policies are applied: at submission (refuse, approve with no
person involved, or send to review; who may review) and at each decision (does this
approval meet a threshold). Part of the core: the services call it, and it imports no
surface (pyproject.toml, [tool.importlinter]). The rules and policies themselves are
catalog data, loaded, validated and evaluated in actions.policy. Empty until the first
rule is written; see docs/architecture.md."""
