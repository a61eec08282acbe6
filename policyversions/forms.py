"""The policy edit form: the engine configuration as JSON (the fields that differ from the
engine's defaults), one weight per team, each priority class's settings, and why.

The form only shapes input; ``policy_apply`` validates it and its ``field: reason`` errors are
put back on the matching form field (``add_service_errors``)."""

from __future__ import annotations

import json
from typing import Any, cast

from django import forms
from django.forms import BoundField

from core.bounds import form_number
from core.jsonlimits import JsonRefused, loads_bounded
from tenants.models import PriorityClass

from .models import PolicyVersion
from .services import MAX_WEIGHT
from .whatif import MAX_WINDOW_DAYS, WINDOW_DAYS_RANGE

MAX_CONFIG_CHARS = 20_000


def _weight_name(slug: str) -> str:
    return f"weight__{slug}"


def _class_name(name: str, key: str) -> str:
    return f"class__{name}__{key}"


class PolicyTablesMixin:
    """One weight field per team and the three fields of each priority class, filled with
    what the loop reads now; for a form that edits a whole policy."""

    fields: dict[str, forms.Field]
    cleaned_data: dict[str, Any]

    def add_table_fields(
        self,
        weights: dict[str, float],
        classes: dict[str, dict[str, Any]],
        *,
        required: bool = True,
    ) -> None:
        """``required=False``: a weight or a class value left out stays as it is now."""
        self.weights_now = dict(weights)
        self.classes_now = {name: dict(spec) for name, spec in classes.items()}
        self.team_slugs = sorted(weights)
        self.class_names = sorted(classes, key=lambda n: -classes[n]["value"])
        for slug in self.team_slugs:
            self.fields[_weight_name(slug)] = forms.FloatField(
                label=f"Weight of {slug}",
                initial=weights[slug],
                min_value=0,
                max_value=MAX_WEIGHT,
                required=required,
            )
        for name in self.class_names:
            spec = classes[name]
            # Bounded as the class's own value: thirty digits went through to the service.
            self.fields[_class_name(name, "value")] = form_number(
                PriorityClass,
                "value",
                label=f"Value of {name}",
                initial=spec["value"],
                required=required,
            )
            self.fields[_class_name(name, "preemptible_by_default")] = forms.BooleanField(
                label=f"{name}: preemptible by default",
                initial=spec["preemptible_by_default"],
                required=False,
            )
            self.fields[_class_name(name, "restricted")] = forms.BooleanField(
                label=f"{name}: restricted", initial=spec["restricted"], required=False
            )

    def weight_fields(self) -> list[BoundField]:
        return [self[_weight_name(slug)] for slug in self.team_slugs]  # type: ignore[index]

    def class_rows(self) -> list[tuple[str, BoundField, BoundField, BoundField]]:
        return [
            (
                name,
                self[_class_name(name, "value")],  # type: ignore[index]
                self[_class_name(name, "preemptible_by_default")],  # type: ignore[index]
                self[_class_name(name, "restricted")],  # type: ignore[index]
            )
            for name in self.class_names
        ]

    def table_values(self) -> tuple[dict[str, float | None], dict[str, dict[str, Any]]]:
        """Every team's weight and every class's settings as submitted (a weight or class
        value left out is None when the fields are not required)."""
        data = self.cleaned_data
        return (
            {slug: data[_weight_name(slug)] for slug in self.team_slugs},
            {
                name: {
                    "value": data[_class_name(name, "value")],
                    "preemptible_by_default": data[_class_name(name, "preemptible_by_default")],
                    "restricted": data[_class_name(name, "restricted")],
                }
                for name in self.class_names
            },
        )

    def table_error_target(self, parts: list[str]) -> str | None:
        """The form field a ``team_weights.<slug>`` / ``priority_classes.<name>.<key>`` error
        is about, or None."""
        target = None
        if parts[0] == "team_weights" and len(parts) > 1:
            target = _weight_name(parts[1])
        elif parts[0] == "priority_classes" and len(parts) > 2:
            target = _class_name(parts[1], parts[2])
        return target if target in self.fields else None


def config_read(text: str, *, field: str, root: tuple[str, ...]) -> object:
    """The engine configuration typed in ``field``, or its refusal worded by its reason, as the
    API words it for the same configuration at ``root`` of its body: a number that is not finite
    or a string the platform cannot store names its path (valid JSON: "not JSON" would send the
    admin looking for a typo); only text that does not parse is called not valid JSON."""
    try:
        return loads_bounded(text, max_bytes=MAX_CONFIG_CHARS * 4, root=root)
    except JsonRefused as exc:
        if exc.reason in ("number", "text"):
            raise forms.ValidationError(str(exc)) from None
        raise forms.ValidationError(f"{field}: {exc}") from None


class PolicyForm(PolicyTablesMixin, forms.Form):
    engine_config = forms.CharField(
        label="Engine configuration (JSON: fields that differ from the defaults)",
        widget=forms.Textarea(attrs={"rows": 8, "class": "mono", "spellcheck": "false"}),
        max_length=MAX_CONFIG_CHARS,
        required=False,
    )
    reason = forms.CharField(label="Why", max_length=500)

    def __init__(
        self,
        *args: Any,
        version: PolicyVersion | None,
        weights: dict[str, float],
        classes: dict[str, dict[str, Any]],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        if not self.is_bound:
            self.initial["engine_config"] = json.dumps(
                version.engine_config if version else {}, indent=2, sort_keys=True
            )
        self.add_table_fields(weights, classes)

    def clean_engine_config(self) -> Any:
        text = self.cleaned_data["engine_config"].strip() or "{}"
        return config_read(text, field="engine_config", root=("engine_config",))

    def service_arguments(self) -> dict[str, Any]:
        weights, classes = self.table_values()
        return {
            "engine_config": self.cleaned_data["engine_config"],
            "team_weights": weights,
            "priority_classes": classes,
            "reason": self.cleaned_data["reason"],
        }

    def add_service_errors(self, errors: dict[str, list[str]]) -> None:
        """Each ``field: reason`` from the service on the form field it is about."""
        for field, messages in errors.items():
            parts = field.split(".")
            target = self.table_error_target(parts)
            if target is None and parts[0] in ("engine_config", "reason"):
                target = parts[0]
            for message in messages:
                self.add_error(target, f"{field}: {message}")


class WhatIfForm(PolicyTablesMixin, forms.Form):
    """Start a what-if replay: the window, the cluster, a candidate policy edited here (its
    engine configuration as JSON, team weights, priority classes) and/or earlier versions as
    candidates. Validation of the window and candidates is the service's; its ``field: reason``
    errors come back on the matching form field."""

    cluster = forms.ChoiceField(label="Cluster")
    window_days = forms.FloatField(
        label="Window (days of finished history up to now)",
        initial=30,
        min_value=0,  # 0 itself is refused by the service, with the same message
        max_value=MAX_WINDOW_DAYS,
        error_messages={"min_value": WINDOW_DAYS_RANGE, "max_value": WINDOW_DAYS_RANGE},
        help_text=f"at most {MAX_WINDOW_DAYS} days",
    )
    candidate_name = forms.CharField(
        label="Candidate name", initial="candidate", max_length=40, required=False
    )
    candidate_config = forms.CharField(
        label="Candidate engine configuration (JSON: fields that differ from the defaults; "
        "empty: the one in force)",
        widget=forms.Textarea(attrs={"rows": 8, "class": "mono", "spellcheck": "false"}),
        max_length=MAX_CONFIG_CHARS,
        required=False,
    )
    versions = forms.MultipleChoiceField(
        label="Earlier versions as candidates",
        required=False,
        widget=forms.CheckboxSelectMultiple,
    )

    def __init__(
        self,
        *args: Any,
        clusters: list[str],
        versions: list[PolicyVersion],
        in_force: PolicyVersion | None,
        weights: dict[str, float],
        classes: dict[str, dict[str, Any]],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        # The two fields declared above as choice fields (the mixin types fields as any Field).
        cast(forms.ChoiceField, self.fields["cluster"]).choices = [(c, c) for c in clusters]
        cast(forms.MultipleChoiceField, self.fields["versions"]).choices = [
            (str(v.number), f"v{v.number}: {v.reason}"[:120])
            for v in versions
            if in_force is None or v.number != in_force.number
        ]
        self.in_force_config = in_force.engine_config if in_force else {}
        if not self.is_bound:
            self.initial["candidate_config"] = json.dumps(
                self.in_force_config, indent=2, sort_keys=True
            )
        self.add_table_fields(weights, classes, required=False)

    def clean_candidate_config(self) -> Any:
        text = self.cleaned_data["candidate_config"].strip()
        if not text:
            return None
        # Where the API takes the same candidate (the errors of the service say so too).
        root = ("candidates", self._edited_name(), "engine_config")
        return config_read(text, field="candidate_config", root=root)

    def edited_candidate(self) -> dict[str, Any] | None:
        """The candidate edited here as a policy (the weights and classes it changes from
        what the loop reads now), or None when nothing was edited: no engine configuration
        and every weight and class as it is."""
        config = self.cleaned_data["candidate_config"]
        weights, classes = self.table_values()
        changed_weights = {
            slug: w
            for slug, w in weights.items()
            if w is not None and w != self.weights_now.get(slug)
        }
        # A class whose value was not sent was not edited (its checkboxes cannot say so: an
        # unticked box is not sent either).
        changed_classes = {
            name: spec
            for name, spec in classes.items()
            if spec["value"] is not None and spec != self.classes_now.get(name)
        }
        if config is None and not changed_weights and not changed_classes:
            return None
        policy: dict[str, Any] = {
            "team_weights": changed_weights,
            "priority_classes": changed_classes,
        }
        if config is not None:
            policy["engine_config"] = config
        return policy

    def _edited_name(self) -> str:
        return (self.cleaned_data.get("candidate_name") or "").strip() or "candidate"

    def service_arguments(self) -> dict[str, Any]:
        data = self.cleaned_data
        candidates: dict[str, dict[str, Any]] = {}
        policy = self.edited_candidate()
        if policy is not None:
            candidates[self._edited_name()] = policy
        return {
            "cluster": data["cluster"],
            "window_days": data["window_days"],
            "candidates": candidates,
            "candidate_versions": {f"v{n}": int(n) for n in data["versions"]},
        }

    def add_service_errors(self, errors: dict[str, list[str]]) -> None:
        edited = f"candidates.{self._edited_name()}"
        for field, messages in errors.items():
            head = field.split(".")[0]
            target = {
                "cluster": "cluster",
                "window_days": "window_days",
                "window": "window_days",
                "candidate_versions": "versions",
            }.get(head)
            if field == edited:
                target = "candidate_name"
            elif field.startswith(edited + "."):
                parts = field[len(edited) + 1 :].split(".")
                target = self.table_error_target(parts) or "candidate_config"
            for message in messages:
                self.add_error(target, f"{field}: {message}")
