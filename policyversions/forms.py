"""The policy edit form: the engine configuration as JSON (the fields that differ from the
engine's defaults), one weight per team, each priority class's settings, and why.

The form only shapes input; ``policy_apply`` validates it and its ``field: reason`` errors are
put back on the matching form field (``add_service_errors``)."""

from __future__ import annotations

import json

from django import forms

from core.jsonlimits import JsonRefused, loads_bounded

MAX_CONFIG_CHARS = 20_000


def _weight_name(slug: str) -> str:
    return f"weight__{slug}"


def _class_name(name: str, key: str) -> str:
    return f"class__{name}__{key}"


class PolicyForm(forms.Form):
    engine_config = forms.CharField(
        label="Engine configuration (JSON: fields that differ from the defaults)",
        widget=forms.Textarea(attrs={"rows": 8, "class": "mono", "spellcheck": "false"}),
        max_length=MAX_CONFIG_CHARS,
        required=False,
    )
    reason = forms.CharField(label="Why", max_length=500)

    def __init__(self, *args, version, weights: dict, classes: dict, **kwargs):
        super().__init__(*args, **kwargs)
        self.team_slugs = sorted(weights)
        self.class_names = sorted(classes, key=lambda n: -classes[n]["value"])
        if not self.is_bound:
            self.initial["engine_config"] = json.dumps(
                version.engine_config if version else {}, indent=2, sort_keys=True
            )
        for slug in self.team_slugs:
            self.fields[_weight_name(slug)] = forms.FloatField(
                label=f"Weight of {slug}", initial=weights[slug], min_value=0, max_value=1e6
            )
        for name in self.class_names:
            spec = classes[name]
            self.fields[_class_name(name, "value")] = forms.IntegerField(
                label=f"Value of {name}", initial=spec["value"]
            )
            self.fields[_class_name(name, "preemptible_by_default")] = forms.BooleanField(
                label=f"{name}: preemptible by default",
                initial=spec["preemptible_by_default"],
                required=False,
            )
            self.fields[_class_name(name, "restricted")] = forms.BooleanField(
                label=f"{name}: restricted", initial=spec["restricted"], required=False
            )

    def weight_fields(self):
        return [self[_weight_name(slug)] for slug in self.team_slugs]

    def class_rows(self):
        return [
            (
                name,
                self[_class_name(name, "value")],
                self[_class_name(name, "preemptible_by_default")],
                self[_class_name(name, "restricted")],
            )
            for name in self.class_names
        ]

    def clean_engine_config(self):
        text = self.cleaned_data["engine_config"].strip() or "{}"
        try:
            return loads_bounded(text, max_bytes=MAX_CONFIG_CHARS * 4)
        except (JsonRefused, ValueError) as exc:
            raise forms.ValidationError(f"engine_config: not JSON ({exc})") from None

    def service_arguments(self) -> dict:
        data = self.cleaned_data
        return {
            "engine_config": data["engine_config"],
            "team_weights": {slug: data[_weight_name(slug)] for slug in self.team_slugs},
            "priority_classes": {
                name: {
                    "value": data[_class_name(name, "value")],
                    "preemptible_by_default": data[_class_name(name, "preemptible_by_default")],
                    "restricted": data[_class_name(name, "restricted")],
                }
                for name in self.class_names
            },
            "reason": data["reason"],
        }

    def add_service_errors(self, errors: dict[str, list[str]]) -> None:
        """Each ``field: reason`` from the service on the form field it is about."""
        for field, messages in errors.items():
            parts = field.split(".")
            if parts[0] == "team_weights" and len(parts) > 1:
                target = _weight_name(parts[1])
            elif parts[0] == "priority_classes" and len(parts) > 2:
                target = _class_name(parts[1], parts[2])
            elif parts[0] in ("engine_config", "reason"):
                target = parts[0]
            else:
                target = None
            if target not in self.fields:
                target = None
            for message in messages:
                self.add_error(target, f"{field}: {message}")


class WhatIfForm(forms.Form):
    """Start a what-if replay: the window, the cluster, a candidate edited as JSON and/or earlier
    versions as candidates. Validation of the window and candidates is the service's; its
    ``field: reason`` errors come back on the matching form field."""

    cluster = forms.ChoiceField(label="Cluster")
    window_days = forms.FloatField(
        label="Window (days of finished history up to now)",
        initial=30,
        help_text="at most 90 days",
    )
    candidate_name = forms.CharField(
        label="Candidate name", initial="candidate", max_length=40, required=False
    )
    candidate_config = forms.CharField(
        label="Candidate engine configuration (JSON: fields that differ from the defaults; "
        "empty: no edited candidate)",
        widget=forms.Textarea(attrs={"rows": 8, "class": "mono", "spellcheck": "false"}),
        max_length=MAX_CONFIG_CHARS,
        required=False,
    )
    versions = forms.MultipleChoiceField(
        label="Earlier versions as candidates",
        required=False,
        widget=forms.CheckboxSelectMultiple,
    )

    def __init__(self, *args, clusters: list[str], versions: list, in_force, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["cluster"].choices = [(c, c) for c in clusters]
        self.fields["versions"].choices = [
            (str(v.number), f"v{v.number}: {v.reason}"[:120])
            for v in versions
            if in_force is None or v.number != in_force.number
        ]
        if not self.is_bound:
            self.initial["candidate_config"] = json.dumps(
                in_force.engine_config if in_force else {}, indent=2, sort_keys=True
            )

    def clean_candidate_config(self):
        text = self.cleaned_data["candidate_config"].strip()
        if not text:
            return None
        try:
            return loads_bounded(text, max_bytes=MAX_CONFIG_CHARS * 4)
        except (JsonRefused, ValueError) as exc:
            raise forms.ValidationError(f"candidate_config: not JSON ({exc})") from None

    def service_arguments(self) -> dict:
        data = self.cleaned_data
        candidates = {}
        if data["candidate_config"] is not None:
            candidates[data["candidate_name"].strip() or "candidate"] = data["candidate_config"]
        return {
            "cluster": data["cluster"],
            "window_days": data["window_days"],
            "candidates": candidates,
            "candidate_versions": {f"v{n}": int(n) for n in data["versions"]},
        }

    def add_service_errors(self, errors: dict[str, list[str]]) -> None:
        edited = (
            f"candidates.{(self.cleaned_data.get('candidate_name') or '').strip() or 'candidate'}"
        )
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
                target = "candidate_config"
            for message in messages:
                self.add_error(target, f"{field}: {message}")
