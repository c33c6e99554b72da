"""The rolling-deploy rule `make lint` enforces (config/release/schema.py): migrations newer than
the previous release must leave that release able to run. Each test adds migrations to
this project's real ones, in memory, and runs them on a scratch SQLite database."""

from __future__ import annotations

import subprocess

import pytest
from django.core.management import call_command
from django.db import migrations, models

from config.release.changelog import ROOT, previous_release, releases
from config.release.schema import check, scratch_loader


def _migration(app_label: str, name: str, operations: list) -> migrations.Migration:
    return type("Migration", (migrations.Migration,), {"operations": operations})(name, app_label)


def run_check(*steps: tuple[str, list], released_steps: int = 0) -> list[str]:
    """Add ``steps`` ((app label, operations) each, in order) after this project's
    migrations; the project as it is and the first ``released_steps`` of them are the
    previous release. Returns the problems as text."""
    loader, connection = scratch_loader()
    graph = loader.graph
    released = set(graph.nodes)
    for index, (app_label, operations) in enumerate(steps):
        parent = max(node for node in graph.leaf_nodes() if node[0] == app_label)
        node = (app_label, f"{9000 + index}_step")
        migration = _migration(*node, operations)
        graph.add_node(node, migration)
        graph.add_dependency(migration, node, parent)
        if index < released_steps:
            released.add(node)
    return [str(problem) for problem in check(loader, connection, released)]


@pytest.fixture(autouse=True)
def _scratch_database(django_db_blocker):
    """The check opens its own in-memory SQLite database, never the test database."""
    with django_db_blocker.unblock():
        yield


def test_it_refuses_a_not_null_column_without_a_database_default():
    problems = run_check(
        (
            "actions",
            [
                # Python's default only: AddField fills the rows there are, then drops it.
                migrations.AddField("agent", "quota", models.IntegerField(default=0)),
                # A good column after the bad one in the same migration changes nothing
                # (django-migration-linter's SQL check passed exactly this on PostgreSQL).
                migrations.AddField("agent", "weight", models.IntegerField(db_default=1)),
            ],
        )
    )
    assert problems == [
        "actions.9000_step: actions_agent.quota: NOT NULL without a database default, and "
        "the previous release's INSERTs leave it out: give the field db_default (or null=True)"
    ]


def test_it_passes_new_columns_with_a_database_default_or_null_and_new_tables():
    assert (
        run_check(
            (
                "actions",
                [
                    migrations.AddField("agent", "quota", models.IntegerField(db_default=0)),
                    migrations.AddField(
                        "agent", "quota_note", models.CharField(max_length=50, db_default="")
                    ),
                    migrations.AddField("agent", "paused_at", models.DateTimeField(null=True)),
                    # Wider keeps every value the previous release writes.
                    migrations.AlterField("agent", "token_prefix", models.CharField(max_length=32)),
                    migrations.CreateModel(
                        "Quota",
                        [
                            ("id", models.BigAutoField(primary_key=True)),
                            ("limit", models.IntegerField()),
                        ],
                    ),
                ],
            )
        )
        == []
    )


def test_it_refuses_removing_renaming_retyping_or_tightening_what_the_previous_release_uses():
    problems = run_check(
        (
            "actions",
            [
                migrations.RemoveField("agent", "last_used_at"),
                migrations.RenameField("agent", "token_prefix", "prefix"),
                migrations.AlterField("agent", "expires_at", models.DateTimeField()),
                migrations.AlterField("connector", "read_timeout", models.IntegerField()),
                migrations.DeleteModel("AgentScope"),
            ],
        )
    )
    where = {problem.split(": ")[1]: problem.split(": ", 2)[2] for problem in problems}
    assert where["actions_agent.last_used_at"].startswith("dropped or renamed")
    assert where["actions_agent.token_prefix"].startswith("dropped or renamed")
    # The renamed column is also one the previous release does not write.
    assert where["actions_agent.prefix"].startswith("NOT NULL without a database default")
    assert where["actions_agent.expires_at"].startswith("made NOT NULL")
    assert where["actions_connector.read_timeout"].startswith("changed type")
    assert where["actions_agentscope"].startswith("dropped or renamed")
    assert len(problems) == 6, problems


def test_a_field_leaves_the_models_one_release_before_its_column_leaves_the_table():
    expand = (
        "actions",
        [
            # The column may be left out by the code that no longer knows the field...
            migrations.AlterField(
                "agent", "token_prefix", models.CharField(max_length=16, db_default="")
            ),
            # ...which no longer has it; the column stays.
            migrations.SeparateDatabaseAndState(
                state_operations=[migrations.RemoveField("agent", "token_prefix")]
            ),
        ],
    )
    contract = (
        "actions",
        [migrations.RunSQL('ALTER TABLE "actions_agent" DROP COLUMN "token_prefix"')],
    )
    assert run_check(expand) == []
    # The contract in the same release as the expand breaks the release before both...
    assert run_check(expand, contract) == [
        "actions.9001_step: actions_agent.token_prefix: dropped or renamed, but the previous "
        "release reads it; take the field out of the models one release before the column "
        "(expand, then contract)"
    ]
    # ...and is fine in the next one.
    assert run_check(expand, contract, released_steps=1) == []


def test_a_field_taken_out_of_the_models_needs_a_column_that_can_be_left_out():
    problems = run_check(
        (
            "actions",
            [
                migrations.SeparateDatabaseAndState(
                    state_operations=[migrations.RemoveField("agent", "token_prefix")]
                )
            ],
        )
    )
    assert problems == [
        "the new models: actions_agent.token_prefix: not in the models any more but NOT NULL "
        "without a database default: give it db_default (or null=True) before taking the "
        "field out"
    ]


def test_the_changelog_names_the_previous_release_and_its_commit_is_in_the_history():
    release = previous_release()
    found = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "-t", release.commit], capture_output=True, text=True
    )
    assert found.stdout.strip() == "commit", f"{release.commit}: {found.stderr}"
    # The newest entry is the one being worked on, and pyproject.toml has its version.
    newest = releases((ROOT / "CHANGELOG.md").read_text())[0]
    assert f'version = "{newest.version}"' in (ROOT / "pyproject.toml").read_text()
    number = tuple(int(part) for part in newest.version.split("."))
    assert number > tuple(int(part) for part in release.version.split("."))


def test_an_unreleased_entry_is_not_the_previous_release():
    text = (
        "## 1.2.0 — unreleased\n\nCommit: when cut\n\n"
        "## 1.1.0 — 2027-01-01\n\nCommit: " + "a" * 40 + "\n\n## 1.0.0\n\nCommit: " + "b" * 40
    )
    assert previous_release(text).version == "1.1.0"
    assert previous_release(text).commit == "a" * 40
    with pytest.raises(LookupError):
        previous_release("## 1.0.0 — unreleased\n")


def test_the_models_and_the_migrations_agree(db):
    """makemigrations has nothing to write (a model change without its migration would
    escape the check above)."""
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)
