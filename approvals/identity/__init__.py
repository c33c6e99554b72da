"""Sign-in: passwords with a throttle (login.py), single sign-on (oidc.py), and
passkeys with the signatures reviewers make over a plan's fingerprint (passkeys.py),
and the ID token that proves who an agent acts for (requester.py; what being that person
means for a plan is a rule of who decides, in approvals/decisions/requester.py).
The pages that manage passkeys are with the other pages (approvals/views/)."""
