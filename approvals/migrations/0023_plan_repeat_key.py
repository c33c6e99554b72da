"""A repeated proposal is matched on what the plan would do, not on its fingerprint, which
also holds the moment its policies judged it (approvals/decisions/policies.py:
plan_repeat_key). The plans still awaiting a decision get their key from the document
they were fingerprinted over; a decided plan is never repeated, so it keeps "".

Built in two steps so the previous release keeps running: the column has a database
default (that release stores plans without it), and its index is built CONCURRENTLY on
PostgreSQL (0022), as 0005's are."""

import json

from django.db import migrations, models

from actions.lib.canonical import digest

MOMENT_FACTS = ("at", "rate")


def repeat_key(canonical: str) -> str:
    # As plan_repeat_key does it, frozen here: a migration runs with the code of its day.
    document = json.loads(canonical)
    policy = document.get("policy") or {}
    part = policy.get("policies")
    if part:
        part = {k: v for k, v in part.items() if k not in MOMENT_FACTS}
        document = {**document, "policy": {**policy, "policies": part}}
    return digest(document)


def backfill(apps, schema_editor):
    Plan = apps.get_model("approvals", "Plan")
    awaiting = Plan.objects.filter(status="awaiting_approval", repeat_key="")
    for pk, canonical in awaiting.values_list("pk", "canonical").iterator(chunk_size=500):
        Plan.objects.filter(pk=pk).update(repeat_key=repeat_key(canonical))


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0022_refused_submission"),
    ]

    operations = [
        migrations.AddField(
            model_name="plan",
            name="repeat_key",
            field=models.CharField(blank=True, db_default="", default="", max_length=64),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True),
    ]
