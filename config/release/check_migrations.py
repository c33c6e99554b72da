"""``python -m config.release.check_migrations [--since COMMIT]``: refuse migrations that would
break the previous release during a rolling deploy (config/release/schema.py). ``make lint``
runs it; the previous release is the newest CHANGELOG.md entry with a commit."""

from __future__ import annotations

import argparse
import os
import sys

from config.release.changelog import ROOT, previous_release


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m config.release.check_migrations")
    parser.add_argument("--since", metavar="COMMIT", help="the previous release's commit")
    args = parser.parse_args(argv)

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from config.release.schema import check, released_migrations, scratch_loader

    if args.since:
        label, commit = args.since, args.since
    else:
        release = previous_release()
        label, commit = f"{release.version} ({release.commit[:12]})", release.commit
    loader, connection = scratch_loader()
    try:
        released = released_migrations(loader, commit, ROOT)
    except LookupError as exc:
        print(f"check_migrations: {exc}", file=sys.stderr)
        return 2
    newer = sorted(set(loader.graph.nodes) - released)
    problems = check(loader, connection, released)
    if problems:
        print(f"Migrations that break the previous release, {label}, while it still runs:")
        for problem in problems:
            print(f"  {problem}")
        print("See docs/deployment.md, 'Upgrading': expand in one release, contract in the next.")
        return 1
    names = ", ".join(f"{app}.{name}" for app, name in newer) or "none"
    print(f"Migrations since {label} leave it able to run: {names}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
