from django.apps import AppConfig


class PolicyVersionsConfig(AppConfig):
    name = "policyversions"
    verbose_name = "Scheduling policy versions"
