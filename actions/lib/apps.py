from django.apps import AppConfig


class LibConfig(AppConfig):
    name = "actions.lib"
    label = "lib"
    verbose_name = "Audit trail"
