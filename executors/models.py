"""The executors app has no tables of its own: the attempt (the record of what a worker
sent and what came back) is approvals.models.Attempt, beside the plan it belongs to,
so that the pages and the agent API can read it without importing the executor."""
