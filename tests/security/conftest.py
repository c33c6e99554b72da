"""Security tests reuse the executor fixtures (approve, approved, run)."""

from tests.executors.conftest import approve, approved, run  # noqa: F401
