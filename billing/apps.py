from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"
    verbose_name = "Billing"

    def ready(self) -> None:
        from scheduler.admission import register_submission_check

        from .services import budget_check_submission

        # A team past a hard-stop budget submits nothing new (docs/billing.md).
        register_submission_check(budget_check_submission)
