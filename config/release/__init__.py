"""Release tooling: which commit the previous release is (CHANGELOG.md) and whether the
migrations since then leave that release able to run (``python -m config.release.check_migrations``,
run by ``make lint``), and that no file of the product imports itself through others
(``python -m config.release.check_cycles``, run by ``make lint`` too). Not part of the
product: nothing in the apps imports it."""
