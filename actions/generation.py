"""The catalog generation: one value that changes whenever what the hot paths look up
changes, so each process can keep those lookups in memory and still never serve an old
answer (actions/cache.py).

Database triggers, not application code, replace the value: an edit from the admin, a
management command, ``QuerySet.update()``, a migration or a psql session is seen the
same way. The value is random rather than a counter, so a rolled-back change leaves a
value nobody ever reads again.

This module is imported by migrations; keep what it builds stable.
"""

from __future__ import annotations

STATE_TABLE = "actions_catalogstate"
PG_FUNCTION = "actions_catalog_changed"

# PostgreSQL: one statement-level trigger per table, after any write, TRUNCATE included.
PG_CREATE_FUNCTION = f"""
CREATE OR REPLACE FUNCTION {PG_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {STATE_TABLE} (id, generation) VALUES (1, gen_random_uuid()::text)
    ON CONFLICT (id) DO UPDATE SET generation = EXCLUDED.generation;
    RETURN NULL;
END
$$;
"""
PG_DROP_FUNCTION = f"DROP FUNCTION IF EXISTS {PG_FUNCTION}();"

# SQLite: row-level triggers (the only kind it has), one per write kind.
SQLITE_BUMP = (
    f"INSERT OR REPLACE INTO {STATE_TABLE} (id, generation) VALUES (1, lower(hex(randomblob(16))));"
)


def _name(table: str, suffix: str) -> str:
    return f"{table}_generation_{suffix}"


def create_sql(vendor: str, table: str, update_columns: tuple[str, ...] = ()) -> list[str]:
    """Statements that make writes to ``table`` change the generation. With
    ``update_columns``, an UPDATE changes it only when it sets one of those columns."""
    update = "UPDATE OF " + ", ".join(update_columns) if update_columns else "UPDATE"
    if vendor == "postgresql":
        name = _name(table, "pg")
        return [
            f"DROP TRIGGER IF EXISTS {name} ON {table};",
            f"CREATE TRIGGER {name} AFTER INSERT OR {update} OR DELETE OR TRUNCATE ON {table} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {PG_FUNCTION}();",
        ]
    if vendor == "sqlite":
        statements = []
        for op, event in (("ins", "INSERT"), ("upd", update), ("del", "DELETE")):
            name = _name(table, op)
            statements += [
                f"DROP TRIGGER IF EXISTS {name};",
                f"CREATE TRIGGER {name} AFTER {event} ON {table} BEGIN {SQLITE_BUMP} END;",
            ]
        return statements
    return []


def drop_sql(vendor: str, table: str) -> list[str]:
    if vendor == "postgresql":
        return [f"DROP TRIGGER IF EXISTS {_name(table, 'pg')} ON {table};"]
    if vendor == "sqlite":
        return [f"DROP TRIGGER IF EXISTS {_name(table, op)};" for op in ("ins", "upd", "del")]
    return []
