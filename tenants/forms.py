"""Portal forms of the tenants app. They check types and shape; the services check the domain
rules, and ``add_domain_error`` puts a refusal next to the field it names."""

from __future__ import annotations

from django import forms
from django.db.models import QuerySet

from catalogue.models import GpuModel
from core.bounds import form_number
from core.errors import DomainError, FieldErrors

from .models import PriorityClass, Quota, QuotaRequest, Role, Team, TeamEntitlements


def add_domain_error(form: forms.Form, exc: DomainError) -> None:
    """Show a service's refusal on the form, on the named field when the form has it."""
    errors = exc.errors if isinstance(exc, FieldErrors) else exc.as_dict()
    for field, messages in errors.items():
        for message in messages:
            form.add_error(field if field in form.fields else None, message)


def errors_text(form: forms.Form) -> str:
    """The form's errors as one line (``field: message; ...``), for a message or a 400."""
    return "; ".join(
        f"{field}: {' '.join(str(m) for m in messages)}" for field, messages in form.errors.items()
    )


def _gpu_models() -> QuerySet[GpuModel]:
    return GpuModel.objects.order_by("name")


class QuotaForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.order_by("slug"), to_field_name="slug")
    gpu_model = forms.ModelChoiceField(queryset=_gpu_models(), to_field_name="name")
    guaranteed_gpus = form_number(Quota, "guaranteed_gpus", label="Guaranteed GPUs")
    borrow_limit_gpus = form_number(Quota, "borrow_limit_gpus", label="Borrow limit (GPUs)")
    confirm_overcommit = forms.BooleanField(
        required=False,
        label="Confirm overcommit",
        help_text="Needed when the guarantees of this GPU model would exceed the cluster.",
    )
    comment = forms.CharField(required=False, max_length=500)


class TeamWeightForm(forms.Form):
    fair_share_weight = form_number(Team, "fair_share_weight", label="Fair-share weight")


class TeamCreateForm(forms.Form):
    slug = forms.SlugField(max_length=64)
    name = forms.CharField(max_length=200)
    parent = forms.ModelChoiceField(
        queryset=Team.objects.order_by("slug"), to_field_name="slug", required=False
    )
    fair_share_weight = form_number(
        Team, "fair_share_weight", initial=1.0, label="Fair-share weight"
    )


class PriorityClassForm(forms.Form):
    name = forms.SlugField(max_length=64)
    value = form_number(PriorityClass, "value")
    preemptible_by_default = forms.BooleanField(required=False, initial=True)
    restricted = forms.BooleanField(
        required=False,
        help_text="Only teams granted this class in their quota settings may submit in it.",
    )
    description = forms.CharField(required=False, max_length=200)


class EntitlementsForm(forms.Form):
    """A team's entitlements and pending caps (part of its quota settings)."""

    team = forms.ModelChoiceField(queryset=Team.objects.order_by("slug"), to_field_name="slug")
    priority_classes = forms.ModelMultipleChoiceField(
        queryset=PriorityClass.objects.filter(restricted=True).order_by("-value"),
        to_field_name="name",
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Restricted priority classes granted",
        help_text="Unrestricted classes are open to every team. Grants reach sub-teams.",
    )
    may_opt_out_of_preemption = forms.BooleanField(
        required=False,
        label="May opt out of preemption",
        help_text="Submit preemptible: false in classes whose jobs are preemptible by default.",
    )
    max_pending_jobs = form_number(
        TeamEntitlements,
        "max_pending_jobs",
        required=False,
        label="Pending jobs cap (team)",
        help_text="Arrays count by size. Empty: the platform default.",
    )
    max_pending_jobs_per_user = form_number(
        TeamEntitlements,
        "max_pending_jobs_per_user",
        required=False,
        label="Pending jobs cap (per user)",
        help_text="Empty: the platform default.",
    )


class MembershipForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)


class QuotaRequestForm(forms.Form):
    gpu_model = forms.ModelChoiceField(queryset=_gpu_models(), to_field_name="name")
    guaranteed_gpus = form_number(QuotaRequest, "guaranteed_gpus", label="Guaranteed GPUs wanted")
    borrow_limit_gpus = form_number(
        QuotaRequest,
        "borrow_limit_gpus",
        required=False,
        label="Borrow limit wanted",
        help_text="Leave empty to keep the current borrow limit.",
    )
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=2000)
    until = forms.DateTimeField(
        required=False,
        help_text="When the change ends and reverts (empty: permanent). YYYY-MM-DD HH:MM, UTC.",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )


class DecisionForm(forms.Form):
    comment = forms.CharField(required=False, max_length=2000)
    confirm_overcommit = forms.BooleanField(required=False)


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100)
    expires_at = forms.DateTimeField(
        required=False,
        label="Expires",
        help_text="Empty: never. YYYY-MM-DD HH:MM, UTC.",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )


class AuditFilterForm(forms.Form):
    team = forms.SlugField(required=False)
    action = forms.CharField(required=False, max_length=64)
    actor = forms.CharField(required=False, max_length=150)
    since = forms.DateTimeField(required=False)
    until = forms.DateTimeField(required=False)


class SsoRuleForm(forms.Form):
    group = forms.CharField(
        max_length=200, help_text="A value of the identity provider's groups claim."
    )
    team = forms.ModelChoiceField(queryset=Team.objects.order_by("slug"), to_field_name="slug")
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)
