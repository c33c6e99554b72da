"""Who may review plans: holders of ``approvals.review_plan`` (the ``reviewers`` group,
made by ``manage.py create_reviewer``)."""

from __future__ import annotations


def can_review(user) -> bool:
    return bool(user and user.is_active and user.has_perm("approvals.review_plan"))
