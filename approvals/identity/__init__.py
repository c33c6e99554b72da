"""Sign-in: passwords with a throttle (login.py), single sign-on (oidc.py), and
passkeys with the signatures reviewers make over a plan's fingerprint (passkeys.py),
and the person an agent acts for, proven by their ID token (requester.py).
The pages that manage passkeys are with the other pages (approvals/views/)."""
