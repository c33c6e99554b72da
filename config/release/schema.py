"""Does the previous release still run against the schema the new migrations leave?

In a rolling deploy the previous release's web and worker processes keep serving while
``migrate`` runs and until they are replaced, so every migration newer than that
release must only expand the schema (docs/deployment.md, *Upgrading*):

- a column the previous release does not write must accept what its INSERTs leave out:
  nullable, or with a database default (``db_default``: Django's ``default`` is applied
  by Python only, and ``AddField`` drops the default it used to fill existing rows);
- a table or column the previous release's models use stays, under the same name and
  type: no removal or rename, no ``NOT NULL`` on a column it may write ``NULL`` to, no
  dropped database default. Removing one is the contract step, in a later release whose
  predecessor no longer has the field in its models.

The check runs the migrations for real, on a scratch in-memory SQLite database: the
previous release's migrations, then each newer one in turn, and after each it compares
the tables with the previous release's models (its migration state) and with the schema
it ran against. Looking at the schema rather than at migration operations or their SQL
text, it sees what ``SeparateDatabaseAndState`` and ``RunSQL`` really do, and which
column a statement concerns. PostgreSQL-only ``RunSQL``/``RunPython`` (triggers) are
skipped there, as they are in embedded mode.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.state import ProjectState
from django.db.utils import ConnectionHandler

Node = tuple[str, str]  # (app label, migration name)

_SIZED = re.compile(r"^(?P<base>[a-z ]+)\((?P<size>\d+)\)$")


@dataclass(frozen=True)
class Problem:
    migration: Node | None  # None: the new release against its own schema
    table: str
    column: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.table}.{self.column}" if self.column else self.table
        what = ".".join(self.migration) if self.migration else "the new models"
        return f"{what}: {where}: {self.message}"


@dataclass(frozen=True)
class Column:
    type: str
    null: bool
    default: str | None  # the database default as the database reports it
    pk: bool


Schema = dict[str, dict[str, Column]]  # table -> column -> what the database says


def scratch_loader() -> tuple[MigrationLoader, object]:
    """This project's migrations, and an empty in-memory SQLite database to run them on."""
    connection = ConnectionHandler(
        {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
    )["default"]
    return MigrationLoader(None, ignore_no_migrations=True), connection


def _schema(connection) -> Schema:
    schema: Schema = {}
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            schema[table] = {
                info.name: Column(
                    type=str(info.type_code).lower(),
                    null=bool(info.null_ok),
                    default=info.default,
                    pk=bool(getattr(info, "pk", False)),
                )
                for info in connection.introspection.get_table_description(cursor, table)
            }
    return schema


Models = dict[str, dict[str, bool]]  # table -> column -> whether the model allows NULL


def _models(state: ProjectState) -> Models:
    """The tables and columns the models of ``state`` read and write (many-to-many tables
    included), each column with whether the model may write NULL to it."""
    tables: Models = {}
    for model in state.apps.get_models(include_auto_created=True):
        meta = model._meta
        if meta.proxy or not meta.managed:
            continue
        tables[meta.db_table] = {f.column: f.null for f in meta.local_concrete_fields}
    return tables


def _fills_itself(column: Column) -> bool:
    """An INSERT that leaves this column out still succeeds."""
    return column.null or column.default is not None or column.pk


def _type_changed(before: str, after: str) -> bool:
    """Widening a sized type (varchar(64) to varchar(100)) keeps every value valid."""
    if before == after:
        return False
    old, new = _SIZED.match(before), _SIZED.match(after)
    return not (old and new and old["base"] == new["base"] and int(new["size"]) > int(old["size"]))


def incompatibilities(models: Models, before: Schema, after: Schema, node: Node) -> list[Problem]:
    """What in ``after`` the previous release's ``models``, which ran against ``before``,
    cannot run against."""
    problems: list[Problem] = []

    def problem(table: str, column: str | None, message: str) -> None:
        problems.append(Problem(node, table, column, message))

    for table, fields in models.items():
        now = after.get(table)
        if now is None:
            problem(table, None, "dropped or renamed, but the previous release uses it")
            continue
        was = before.get(table, {})
        for column, nullable in fields.items():
            if column not in now:
                problem(
                    table,
                    column,
                    "dropped or renamed, but the previous release reads it; take the field "
                    "out of the models one release before the column (expand, then contract)",
                )
                continue
            if nullable and not now[column].null:
                problem(table, column, "made NOT NULL, but the previous release may write NULL")
            if column in was:
                if was[column].default is not None and not _fills_itself(now[column]):
                    problem(
                        table,
                        column,
                        "lost its database default, which the previous release's INSERTs use",
                    )
                if _type_changed(was[column].type, now[column].type):
                    problem(
                        table,
                        column,
                        f"changed type ({was[column].type} to {now[column].type}), but the "
                        "previous release reads and writes it",
                    )
        for column, info in now.items():
            if column not in fields and not _fills_itself(info):
                problem(
                    table,
                    column,
                    "NOT NULL without a database default, and the previous release's "
                    "INSERTs leave it out: give the field db_default (or null=True)",
                )
    return problems


def _unwritten(models: Models, schema: Schema) -> list[Problem]:
    """Columns the new models no longer write that still refuse to be left out."""
    return [
        Problem(
            None,
            table,
            column,
            "not in the models any more but NOT NULL without a database default: "
            "give it db_default (or null=True) before taking the field out",
        )
        for table, fields in models.items()
        for column, info in schema.get(table, {}).items()
        if column not in fields and not _fills_itself(info)
    ]


def check(loader: MigrationLoader, connection, released: Iterable[Node]) -> list[Problem]:
    """Every problem the migrations not in ``released`` cause the release whose
    migrations are ``released``; empty when they only expand the schema."""
    # Data migrations use the default database through the ORM: let that be the scratch
    # one while they run.
    original = connections[DEFAULT_DB_ALIAS]
    connections[DEFAULT_DB_ALIAS] = connection
    try:
        return _check(loader, connection, released)
    finally:
        connections[DEFAULT_DB_ALIAS] = original
        connection.close()


def _check(loader: MigrationLoader, connection, released: Iterable[Node]) -> list[Problem]:
    graph = loader.graph
    released = set(released)
    plan: list[Node] = []
    for leaf in sorted(graph.leaf_nodes()):
        for node in graph.forwards_plan(leaf):
            if node not in plan:
                plan.append(node)
    # The previous release's migrations first (they need nothing newer), then the rest.
    plan = [n for n in plan if n in released] + [n for n in plan if n not in released]

    problems: list[Problem] = []
    seen: set[tuple[str, str | None, str]] = set()
    old_models, old_schema, state = _released_state(loader, connection, plan, released)
    for node in plan:
        if node in released:
            continue
        migration = graph.nodes[node]
        with connection.schema_editor(atomic=migration.atomic) as editor:
            state = migration.apply(state, editor)
        for found in incompatibilities(old_models, old_schema, _schema(connection), node):
            key = (found.table, found.column, found.message)
            if key not in seen:
                seen.add(key)
                problems.append(found)
    if any(node not in released for node in plan):
        problems += _unwritten(_models(state), _schema(connection))
    return problems


# The database and models after a set of released migrations, by their names: the tests
# check many additions to the same release, and migrating it takes seconds.
_released_cache: dict[frozenset[Node], tuple[bytes, ProjectState, Models, Schema]] = {}


def _released_state(
    loader: MigrationLoader, connection, plan: list[Node], released: set[Node]
) -> tuple[Models, Schema, ProjectState]:
    key = frozenset(released)
    connection.ensure_connection()
    if key in _released_cache:
        data, state, models, schema = _released_cache[key]
        connection.connection.deserialize(data)
        return models, schema, state.clone()
    state = ProjectState(real_apps=loader.unmigrated_apps)
    for node in plan:
        if node in released:
            migration = loader.graph.nodes[node]
            with connection.schema_editor(atomic=migration.atomic) as editor:
                state = migration.apply(state, editor)
    models, schema = _models(state), _schema(connection)
    _released_cache[key] = (connection.connection.serialize(), state.clone(), models, schema)
    return models, schema, state


def released_migrations(loader: MigrationLoader, commit: str, root: Path) -> set[Node]:
    """The migrations the release at ``commit`` had: those of this repository whose file
    existed there, and every migration of apps from outside it (Django's own, whose
    upgrades this check does not judge)."""
    result = subprocess.run(
        ["git", "-C", str(root), "ls-tree", "-r", "--name-only", commit],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise LookupError(
            f"commit {commit} (the previous release, CHANGELOG.md) is not in this clone; "
            f"fetch the history (git fetch --unshallow): {result.stderr.strip()}"
        )
    files = set(result.stdout.splitlines())
    released: set[Node] = set()
    for app_label, name in loader.graph.nodes:
        module, _ = loader.migrations_module(app_label)
        directory = root.joinpath(*module.split("."))
        if not directory.is_dir():
            released.add((app_label, name))
        elif f"{directory.relative_to(root).as_posix()}/{name}.py" in files:
            released.add((app_label, name))
    return released
