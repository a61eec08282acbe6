"""Django admin for tenancy. The portal is the main tool; changes made here are audited as well
(``AuditedAdmin``), so the audit log holds every admin and quota change whichever door it came
through. Quota requests and the audit log are read-only here."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin
from django.db import transaction
from django.db.models import Model, QuerySet
from django.forms.models import model_to_dict
from django.http import HttpRequest

from core.bounds import form_number

from .audit import audit_record
from .models import (
    ApiToken,
    AuditEntry,
    Membership,
    PriorityClass,
    Quota,
    QuotaRequest,
    Role,
    Team,
)
from .quotas import overcommit_problems
from .teams import owner_loss_problem

# ModelAdmin, TabularInline, ModelForm and BaseInlineFormSet are generic only in django-stubs:
# subscripted, they fail at run time without django-stubs-ext's monkeypatch, a run-time
# dependency the image does not carry. The classes here subclass them through these names, the
# stubs' generics to mypy and Django's classes at run time.
if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Any]
    _TabularInline = admin.TabularInline[Any, Any]
    _ModelForm = forms.ModelForm[Any]
    _InlineFormSet = forms.BaseInlineFormSet[Any, Any, Any]
else:
    _ModelAdmin = admin.ModelAdmin
    _TabularInline = admin.TabularInline
    _ModelForm = forms.ModelForm
    _InlineFormSet = forms.BaseInlineFormSet

_SKIP_FIELDS = {"key_hash", "password"}


def _state(obj: Model | None) -> dict[str, Any] | None:
    if obj is None or obj.pk is None:
        return None
    return {k: v for k, v in model_to_dict(obj).items() if k not in _SKIP_FIELDS}


def _team_of(obj: Model) -> Team | None:
    if isinstance(obj, Team):
        return obj
    return getattr(obj, "team", None)


def _audit(
    request: HttpRequest,
    obj: Model,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    verb: str,
) -> None:
    if before == after:
        return
    audit_record(
        actor=request.user,
        action=f"{obj._meta.model_name}.{verb}",
        target=obj,
        team=_team_of(obj) if verb != "delete" or not isinstance(obj, Team) else None,
        before=before,
        after=after,
        comment="via Django admin",
    )


class AuditedAdmin(_ModelAdmin):
    """Records each save and delete, including those of inline rows and the list's bulk delete,
    in the audit log."""

    def save_model(self, request: HttpRequest, obj: Model, form: Any, change: bool) -> None:
        before = _state(type(obj)._default_manager.filter(pk=obj.pk).first()) if change else None
        super().save_model(request, obj, form, change)
        _audit(request, obj, before, _state(obj), "set" if change else "create")

    def delete_model(self, request: HttpRequest, obj: Model) -> None:
        before = _state(obj)
        super().delete_model(request, obj)
        _audit(request, obj, before, None, "delete")

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        # The list's "Delete selected" action: one queryset delete, which audited nothing.
        with transaction.atomic():
            for obj in queryset:
                self.delete_model(request, obj)

    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: bool) -> None:
        befores = {
            f.instance.pk: _state(
                type(f.instance)._default_manager.filter(pk=f.instance.pk).first()
            )
            for f in formset.forms
            if f.instance.pk
        }
        instances = formset.save(commit=False)
        for obj in formset.deleted_objects:
            before = befores.get(obj.pk)
            obj.delete()
            _audit(request, obj, before, None, "delete")
        for obj in instances:
            before = befores.get(obj.pk)
            obj.save()
            _audit(request, obj, before, _state(obj), "set" if before else "create")
        formset.save_m2m()


class QuotaAdminForm(_ModelForm):
    """A quota row as ``quota_set`` takes it: a guarantee that would overcommit the GPU model
    (above the cluster's capacity, or children above their parent's guarantee) is refused on
    ``guaranteed_gpus``. Saved here as posted, such a guarantee promised GPUs the cluster does
    not have, and reclaiming them by preemption cut the other teams' jobs inside their own
    guarantees. Admin has no "confirm the overcommit" step: the portal or the API do."""

    guaranteed_gpus = form_number(Quota, "guaranteed_gpus")
    borrow_limit_gpus = form_number(Quota, "borrow_limit_gpus")

    class Meta:
        model = Quota
        fields = ("team", "gpu_model", "guaranteed_gpus", "borrow_limit_gpus")

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data  # what ModelForm.clean answers
        team, gpu_model = cleaned.get("team"), cleaned.get("gpu_model")
        guaranteed = cleaned.get("guaranteed_gpus")
        # An edit that leaves the guarantee where it is (a borrow limit) is not refused for an
        # overcommit confirmed earlier through the service.
        touched = self.instance.pk is None or {"team", "gpu_model", "guaranteed_gpus"} & set(
            self.changed_data
        )
        if touched and team is not None and gpu_model is not None and guaranteed is not None:
            problems = overcommit_problems(
                team=team, gpu_model=gpu_model, guaranteed_gpus=guaranteed
            )
            if problems:
                self.add_error("guaranteed_gpus", problems)
        return cleaned


class MembershipFormSet(_InlineFormSet):
    """A team's membership rows as ``membership_set`` and ``membership_remove`` take them: the
    team's last owner is not demoted or removed (``owner_loss_problem``), though an owner may
    hand the role to another row in the same save. Saved here as posted, the team was left with
    no owner."""

    def clean(self) -> None:
        super().clean()
        if any(self.errors):
            return  # a row the form refused says why; the whole save is refused already
        leaving: list[int] = []
        new_owners = 0
        for form in self.forms:
            if not form.has_changed() and form.instance.pk is None:
                continue
            was_owner = form.instance.pk is not None and form.initial.get("role") == Role.OWNER
            # Django's own reading of a row's delete box (deleted_forms asks it too); private, so
            # absent from the stubs.
            deleted = self._should_delete_form(form)  # type: ignore[attr-defined]
            is_owner = not deleted and form.cleaned_data.get("role") == Role.OWNER
            if was_owner and not is_owner:
                leaving.append(form.instance.pk)
            elif is_owner and not was_owner:
                new_owners += 1
        problem = owner_loss_problem(team=self.instance, leaving=leaving, new_owners=new_owners)
        if problem:
            raise forms.ValidationError(problem)


class MembershipAdminForm(_ModelForm):
    """A membership row whose user is fixed once it exists. Editable, a row's user moved the
    membership, its role included, to someone else in one save (an owner row handed the team
    to another user, its owner dropped from it): no service moves a membership, it is removed
    for one user and added for another."""

    class Meta:
        model = Membership
        fields = ("user", "role")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            # Disabled: the form keeps the row's own user whatever is posted for it.
            self.fields["user"].disabled = True


class MembershipInline(_TabularInline):
    model = Membership
    form = MembershipAdminForm
    formset = MembershipFormSet
    extra = 0
    # Who keeps the membership (portal or identity provider) is set by the code that makes it.
    readonly_fields = ["source"]


class QuotaInline(_TabularInline):
    model = Quota
    form = QuotaAdminForm
    extra = 0


@admin.register(Team)
class TeamAdmin(AuditedAdmin):
    list_display = ("slug", "name", "parent", "fair_share_weight")
    search_fields = ("slug", "name")
    inlines = [MembershipInline, QuotaInline]

    def get_readonly_fields(self, request: HttpRequest, obj: Team | None = None) -> tuple[str, ...]:
        # Settings outside the database name a team by its slug (the Slurm backend's
        # team_accounts: the Unix account its jobs run as and whose files they reach). A slug
        # freed by a rename could go to a new team, which would inherit that account.
        return ("slug",) if obj is not None else ()


@admin.register(PriorityClass)
class PriorityClassAdmin(AuditedAdmin):
    list_display = ("name", "value", "preemptible_by_default")


@admin.register(Quota)
class QuotaAdmin(AuditedAdmin):
    form = QuotaAdminForm
    list_display = ("team", "gpu_model", "guaranteed_gpus", "borrow_limit_gpus")
    list_filter = ("gpu_model",)


class ApiTokenAdminForm(_ModelForm):
    class Meta:
        model = ApiToken
        fields = ("expires_at", "revoked_at")

    def clean_revoked_at(self) -> datetime | None:
        revoked_at = self.cleaned_data.get("revoked_at")
        if self.instance.revoked_at is not None and revoked_at is None:
            # Revoked because it leaked, or its owner left: clearing it brought it back.
            raise forms.ValidationError("a revoked token stays revoked; its owner makes a new one")
        return revoked_at


@admin.register(ApiToken)
class ApiTokenAdmin(AuditedAdmin):
    """Expiry and revocation only. A token is made by its owner (portal, API, ``gpuctl login``):
    added here it had no key (a second such row was a unique-key 500), and a token moved to
    another user here made whoever held it that user, in that user's teams."""

    form = ApiTokenAdminForm
    list_display = (
        "name",
        "user",
        "key_prefix",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    )
    # Not the key's hash: nobody needs it on a page, and it is what a token is checked against.
    readonly_fields = ("user", "name", "key_prefix", "created_at", "last_used_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(QuotaRequest)
class QuotaRequestAdmin(_ModelAdmin):
    """Read-only here: approving or rejecting goes through the portal (it applies and audits).
    Not deleted either: an approved request holds the difference its expiry reverts, so a
    deleted temporary grant was kept for good, and the request is the record of who asked."""

    list_display = ("team", "gpu_model", "guaranteed_gpus", "status", "until", "requested_by")
    list_filter = ("status", "gpu_model")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


@admin.register(AuditEntry)
class AuditEntryAdmin(_ModelAdmin):
    """The audit log is append-only: nobody edits or deletes entries, not even here."""

    list_display = ("time", "actor_name", "action", "target_repr", "team")
    list_filter = ("action",)
    search_fields = ("actor_name", "target_repr", "comment")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False
