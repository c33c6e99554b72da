# What 0016 needs of the rows already there, so that an upgrade changes nothing people see:
#
# * plans awaiting a decision under decision rules get their deciding groups (one row per
#   threshold of the requirement stored on them), so "mine to decide" lists them;
# * groups that may review plans also get the permission to view every plan (read-only),
#   which is what reviewers could do before the queue showed each person their own
#   plans first. An administrator narrows it by removing "Can view plan" from a group.
#
# Written out here rather than imported: a migration keeps meaning what it meant.

from datetime import timedelta

from django.db import migrations


def backfill(apps, schema_editor):
    Plan = apps.get_model("approvals", "Plan")
    DecidingGroup = apps.get_model("approvals", "DecidingGroup")
    rows = []
    awaiting = Plan.objects.filter(status="awaiting_approval").only("id", "created_at", "policy")
    for plan in awaiting.iterator(chunk_size=500):
        requirement = (plan.policy or {}).get("requirement") or {}
        seen = set()
        for clause in requirement.get("all_of") or []:
            for threshold in clause.get("any_of") or []:
                after = int(threshold.get("after") or 0)
                key = (threshold["group"], after)
                if key in seen:
                    continue
                seen.add(key)
                rows.append(
                    DecidingGroup(
                        plan_id=plan.id,
                        group=threshold["group"],
                        eligible_from=plan.created_at + timedelta(seconds=after),
                        escalation=bool(after),
                    )
                )
    DecidingGroup.objects.bulk_create(rows, batch_size=500, ignore_conflicts=True)


def view_for_reviewers(apps, schema_editor):
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")
    view = Permission.objects.filter(
        content_type__app_label="approvals", codename="view_plan"
    ).first()
    review = Permission.objects.filter(
        content_type__app_label="approvals", codename="review_plan"
    ).first()
    if view is None or review is None:
        return  # a new database: the permissions are made after the migrations run
    for group in Group.objects.filter(permissions=review):
        group.permissions.add(view)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0016_deciding_groups_break_glass"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.RunPython(backfill, migrations.RunPython.noop),
        migrations.RunPython(view_for_reviewers, migrations.RunPython.noop),
    ]
