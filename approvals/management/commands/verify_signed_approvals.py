"""Verify every stored passkey signature again, offline, against the registered public keys.

Reports each approval that a plan needing signed approvals holds without a valid
signature (a row written into the database, a signature over another plan or fingerprint,
a passkey of someone else), and each stored signature that no longer verifies. Exit status
1 when anything is reported, so it can run from cron or CI next to verify_audit.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from approvals.identity.passkeys import assertion_problem, plan_needs_signature
from approvals.models import Approval


class Command(BaseCommand):
    help = "Re-verify every passkey-signed approval against the registered public keys."

    def handle(self, *args, **options):
        checked = 0
        problems: list[str] = []
        approvals = (
            Approval.objects.filter(decision=Approval.Decision.APPROVE)
            .select_related("plan__action", "passkey", "reviewer")
            .order_by("created_at")
            .iterator(chunk_size=500)
        )
        for approval in approvals:
            if not (approval.assertion or plan_needs_signature(approval.plan)):
                continue
            checked += 1
            # A passkey revoked after it signed: the signature still proves what it did.
            problem = assertion_problem(approval, revoked_counts=False)
            if approval.fingerprint != approval.plan.fingerprint:
                problem = problem or "the approval names another fingerprint than its plan"
            if problem:
                problems.append(
                    f"approval {approval.id} of plan {approval.plan_id} by "
                    f"{approval.reviewer.get_username()}: {problem}"
                )
        for line in problems:
            self.stderr.write(line)
        if problems:
            raise CommandError(f"{len(problems)} of {checked} signed approvals do not verify")
        self.stdout.write(f"{checked} signed approvals verified")
