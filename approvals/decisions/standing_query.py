"""The one query behind ``approvals_read`` (approvals/decisions/standing.py): a plan's
approvals of its fingerprint, their makers, and what approvals_standing judges of each
maker as they are now (active, superuser, holding the review permission directly or
through a group, and which of the requirement's groups they are in).

The same query built with the ORM (two ``Exists`` and a ``FilteredRelation``) cost more
to compile on every decision and every claim than to run, so its SQL is written here
once per connection (a text for each number of group names, and for the claim's
filter) from the models' own tables and columns, and only its parameters change. The
text is plain SQL that PostgreSQL and SQLite both run. Nothing about the people is
kept between calls: every call reads them as they are then."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connections, router

from ..models import Approval

# The permission that lets a person review (approvals.permissions.can_review), as
# has_perm finds it: on the user, or on a group of theirs.
REVIEW_APP_LABEL = "approvals"
REVIEW_CODENAME = "review_plan"


@dataclass
class _Texts:
    """What one connection runs: the columns read into each model, the converters the
    backend applies to them (as the ORM would), and the SQL texts built so far."""

    approval_fields: list
    user_fields: list
    converters: list[tuple[int, list, Any]]
    sql: dict[tuple[int, bool], str] = field(default_factory=dict)


# Keyed by the connection object (each thread has its own), and forgotten with it: the
# texts are the backend's (its quoting) and the converters are its methods.
_BUILT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def approvals_with_makers(
    plan, names: set[str], usable_at: datetime | None, inserting: tuple[str, list] | None = None
) -> list[tuple]:
    """(approval with its ``reviewer``, facts) for each approval of ``plan`` that
    approves its fingerprint, oldest first; with ``usable_at``, only those not yet used
    and not expired at that moment. ``facts``: active, superuser, reviews directly,
    reviews through a group, and the set of ``names`` the maker is in now.

    ``inserting`` (PostgreSQL only): the INSERT of one of the plan's approvals, with its
    parameters, made in this statement first and read with the others (a statement does
    not see its own writes in the table, so the row it returns is added to those read):
    one round trip for a decision's approval and the read that counts it."""
    alias = router.db_for_read(Approval)
    connection = connections[alias]
    texts = _texts(connection)
    names = sorted(names)
    key = (len(names), usable_at is not None, inserting is not None)
    sql = texts.sql.get(key) or texts.sql.setdefault(key, _sql(connection, *key))
    params = _params(connection, plan, names, usable_at)
    if inserting is not None:
        sql = f"WITH {_NEW} AS ({inserting[0]} RETURNING *) {sql}"
        params = [*inserting[1], *params]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return _objects(alias, connection, texts, rows)


def _objects(alias: str, connection, texts: _Texts, rows) -> list[tuple]:
    """The rows (one per approval and group of ``names`` its maker is in, or one with
    none) as approvals, each once, with their makers and facts."""
    users = get_user_model()
    n_approval, n_user = len(texts.approval_fields), len(texts.user_fields)
    approval_names = [f.attname for f in texts.approval_fields]
    user_names = [f.attname for f in texts.user_fields]
    read: dict[Any, tuple] = {}
    for raw in rows:
        row = list(raw)
        for pos, convs, expression in texts.converters:
            for converter in convs:
                row[pos] = converter(row[pos], expression, connection)
        approval = Approval.from_db(alias, approval_names, row[:n_approval])
        entry = read.get(approval.pk)
        if entry is None:
            reviewer = users.from_db(alias, user_names, row[n_approval : n_approval + n_user])
            approval.reviewer = reviewer
            direct, via_group = row[n_approval + n_user : n_approval + n_user + 2]
            facts = (reviewer.is_active, reviewer.is_superuser, bool(direct), bool(via_group))
            entry = read[approval.pk] = (approval, facts, set())
        if row[-1] is not None:
            entry[2].add(row[-1])
    return [(approval, (*facts, groups)) for approval, facts, groups in read.values()]


def _params(connection, plan, names: list[str], usable_at: datetime | None) -> list:
    """The query's parameters, prepared for the backend as the ORM prepares a lookup's."""
    meta = Approval._meta
    review = [REVIEW_CODENAME, REVIEW_APP_LABEL]
    params = [*review, *review, *names]
    params += [
        meta.get_field("plan").get_db_prep_value(plan.pk, connection),
        Approval.Decision.APPROVE.value,
        plan.fingerprint,
    ]
    if usable_at is not None:
        params.append(meta.get_field("expires_at").get_db_prep_value(usable_at, connection))
    return params


def _texts(connection) -> _Texts:
    """What ``connection`` runs, made on its first call."""
    texts = _BUILT.get(connection)
    if texts is None:
        approval_fields = list(Approval._meta.concrete_fields)
        user_fields = list(get_user_model()._meta.concrete_fields)
        texts = _BUILT[connection] = _Texts(
            approval_fields,
            user_fields,
            _converters(connection, approval_fields + user_fields),
        )
    return texts


def _converters(connection, fields) -> list[tuple[int, list, Any]]:
    """For each column that needs it, what the ORM would apply to its value as read
    (SQLite's datetimes, UUIDs and booleans; every backend's JSON)."""
    out = []
    for pos, model_field in enumerate(fields):
        expression = model_field.get_col(model_field.model._meta.db_table)
        convs = connection.ops.get_db_converters(expression) + expression.get_db_converters(
            connection
        )
        if convs:
            out.append((pos, convs, expression))
    return out


# The name the row being inserted goes by in the statement (approvals_with_makers).
_NEW = "new_approval"


def _sql(connection, n_names: int, usable: bool, inserting: bool = False) -> str:
    """The text for a requirement naming ``n_names`` groups (none: no group is read),
    with the claim's filter when ``usable``, and the approvals in the table and the one
    being inserted when ``inserting`` (the INSERT itself is put in front of it by the
    caller). Every table and column is the models'."""
    q = connection.ops.quote_name
    users = get_user_model()

    def col(model, name: str) -> str:
        return q(model._meta.get_field(name).column)

    def pk(model) -> str:
        return q(model._meta.pk.column)

    def table(model) -> str:
        return q(model._meta.db_table)

    direct_m2m = users._meta.get_field("user_permissions")
    member_m2m = users._meta.get_field("groups")
    granted_m2m = Group._meta.get_field("permissions")
    reviewer = f"a.{col(Approval, 'reviewer')}"
    is_review = (
        f"JOIN {table(Permission)} p ON p.{pk(Permission)} = {{perm}} "
        f"JOIN {table(ContentType)} c ON c.{pk(ContentType)} = p.{col(Permission, 'content_type')} "
        f"WHERE p.{col(Permission, 'codename')} = %s AND c.{col(ContentType, 'app_label')} = %s"
    )
    direct = (
        f"EXISTS (SELECT 1 FROM {q(direct_m2m.m2m_db_table())} d "
        + is_review.format(perm=f"d.{q(direct_m2m.m2m_reverse_name())}")
        + f" AND d.{q(direct_m2m.m2m_column_name())} = {reviewer})"
    )
    via_group = (
        f"EXISTS (SELECT 1 FROM {q(member_m2m.m2m_db_table())} m "
        f"JOIN {table(Group)} g ON g.{pk(Group)} = m.{q(member_m2m.m2m_reverse_name())} "
        f"JOIN {q(granted_m2m.m2m_db_table())} gp "
        f"ON gp.{q(granted_m2m.m2m_column_name())} = g.{pk(Group)} "
        + is_review.format(perm=f"gp.{q(granted_m2m.m2m_reverse_name())}")
        + f" AND m.{q(member_m2m.m2m_column_name())} = {reviewer})"
    )
    columns = [f"a.{q(f.column)}" for f in Approval._meta.concrete_fields]
    columns += [f"u.{q(f.column)}" for f in users._meta.concrete_fields]
    columns += [direct, via_group, "n.name" if n_names else "NULL"]
    named = ""
    if n_names:
        placeholders = ", ".join(["%s"] * n_names)
        named = (
            f" LEFT JOIN (SELECT m.{q(member_m2m.m2m_column_name())} AS member, "
            f"g.{col(Group, 'name')} AS name FROM {q(member_m2m.m2m_db_table())} m "
            f"JOIN {table(Group)} g ON g.{pk(Group)} = m.{q(member_m2m.m2m_reverse_name())} "
            f"WHERE g.{col(Group, 'name')} IN ({placeholders})) n ON n.member = {reviewer}"
        )
    where = (
        f"a.{col(Approval, 'plan')} = %s AND a.{col(Approval, 'decision')} = %s "
        f"AND a.{col(Approval, 'fingerprint')} = %s"
    )
    if usable:
        where += (
            f" AND a.{col(Approval, 'used_at')} IS NULL AND a.{col(Approval, 'expires_at')} > %s"
        )
    approvals = table(Approval)
    if inserting:
        # RETURNING * gives the table's columns in the table's order, as SELECT * does.
        approvals = f"(SELECT * FROM {approvals} UNION ALL SELECT * FROM {_NEW})"
    return (
        f"SELECT {', '.join(columns)} FROM {approvals} a "
        f"JOIN {table(users)} u ON u.{pk(users)} = {reviewer}{named} "
        f"WHERE {where} ORDER BY a.{col(Approval, 'created_at')}, a.{pk(Approval)}"
    )
