"""Portal forms. They parse types (text to int, empty to None) and shape a request; every domain
rule (team membership, GPU counts, known models, elastic range) is checked by the service, whose
``FieldErrors`` are put back on the same form so they show inline next to their field.

Fields that name other objects (team, GPU model, priority class) are plain text fields rendered as
selects: the choice is validated by ``job_submit``, not by the form, so there is one rule and one
message whatever the client.
"""

from __future__ import annotations

from django import forms

from scheduler.errors import DomainError
from scheduler.services import JobRequest

# Service error keys that do not match a form field name.
_ERROR_FIELDS = {
    "elastic.min_workers": "elastic_min_workers",
    "elastic.max_workers": "elastic_max_workers",
    "elastic": "elastic_min_workers",
    "non_field_errors": None,
}

PREEMPTIBLE_CHOICES = [("", "Priority class default"), ("yes", "Yes"), ("no", "No")]


def _number(**attrs) -> forms.NumberInput:
    return forms.NumberInput(attrs={"inputmode": "numeric", **attrs})


class JobSubmitForm(forms.Form):
    name = forms.CharField(max_length=200, help_text="A short name your team will recognise.")
    team = forms.CharField(widget=forms.Select)
    image = forms.CharField(
        max_length=300, required=False, help_text="Container image, e.g. registry/train:1.4"
    )
    command = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    workers = forms.IntegerField(initial=1, widget=_number(min=1))
    gpus_per_worker = forms.IntegerField(label="GPUs per worker", initial=1, widget=_number(min=1))
    gpu_model = forms.CharField(label="GPU model", required=False, widget=forms.Select)
    priority_class = forms.CharField(required=False, widget=forms.Select)
    preemptible = forms.ChoiceField(choices=PREEMPTIBLE_CHOICES, required=False)
    checkpoint_interval_s = forms.IntegerField(
        label="Checkpoint interval (s)", required=False, widget=_number(min=1)
    )
    runtime_limit_s = forms.IntegerField(
        label="Runtime limit (s)", required=False, widget=_number(min=1)
    )
    dataset = forms.CharField(max_length=200, required=False)
    elastic_min_workers = forms.IntegerField(
        label="Elastic: min workers", required=False, widget=_number(min=1)
    )
    elastic_max_workers = forms.IntegerField(
        label="Elastic: max workers", required=False, widget=_number(min=1)
    )
    simulated_duration_s = forms.FloatField(
        label="Simulated duration (s)",
        required=False,
        help_text="Simulated clusters only: seconds of work the demo job takes.",
        widget=forms.NumberInput(attrs={"min": 1, "step": "any"}),
    )

    def __init__(self, *args, teams=(), gpu_models=(), priority_classes=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].widget.choices = [(t.slug, f"{t.name} ({t.slug})") for t in teams]
        self.fields["gpu_model"].widget.choices = [("", "Any model")] + [
            (m.name, m.name) for m in gpu_models
        ]
        self.fields["priority_class"].widget.choices = [("", "Lowest (default)")] + [
            (p.name, f"{p.name} ({p.value})") for p in priority_classes
        ]
        for name, bound in self.fields.items():
            # Each error and help text is announced with its input (see field.html).
            if bound.help_text:
                bound.widget.attrs["aria-describedby"] = f"id_{name}_help"

    def to_request(self) -> JobRequest:
        """The service request for a valid form (types parsed; domain rules not yet checked)."""
        data = self.cleaned_data
        lo, hi = data.get("elastic_min_workers"), data.get("elastic_max_workers")
        elastic = None
        if lo is not None or hi is not None:
            elastic = {"min_workers": lo, "max_workers": hi}
        preemptible = {"yes": True, "no": False}.get(data.get("preemptible") or "")
        return JobRequest(
            name=data["name"].strip(),
            team=data["team"],
            workers=data["workers"],
            gpus_per_worker=data["gpus_per_worker"],
            image=data.get("image") or "",
            command=data.get("command") or "",
            gpu_model=data.get("gpu_model") or None,
            priority_class=data.get("priority_class") or None,
            preemptible=preemptible,
            checkpoint_interval_s=data.get("checkpoint_interval_s"),
            runtime_limit_s=data.get("runtime_limit_s"),
            dataset=(data.get("dataset") or "").strip(),
            elastic=elastic,
            simulated_duration_s=data.get("simulated_duration_s"),
        )

    def add_domain_error(self, error: DomainError) -> None:
        """Put a service error (one field or many) on the fields it names."""
        for key, messages in error.as_dict().items():
            field = _ERROR_FIELDS.get(key, key)
            if field not in self.fields:
                field = None
            for message in messages:
                self.add_error(field, message)
        self._mark_invalid_inputs()

    def _mark_invalid_inputs(self) -> None:
        for name in self.errors:
            if name in self.fields:
                widget = self.fields[name].widget
                widget.attrs["aria-invalid"] = "true"
                ids = set(widget.attrs.get("aria-describedby", "").split())
                ids.add(f"id_{name}_errors")
                widget.attrs["aria-describedby"] = " ".join(sorted(i for i in ids if i))

    def full_clean(self) -> None:
        super().full_clean()
        # Kept apart from cleaned_data, which add_error() trims: the preview shows what was asked.
        self._parsed = dict(getattr(self, "cleaned_data", {}) or {})
        if self.is_bound:
            self._mark_invalid_inputs()

    def preview(self) -> dict:
        """GPUs the request asks for (and the elastic range), from whatever parsed so far."""
        data = getattr(self, "_parsed", None) if self.is_bound else None
        if data is None:
            data = {"workers": 1, "gpus_per_worker": 1}
        gpw = data.get("gpus_per_worker") or 0
        workers = data.get("workers") or 0
        lo, hi = data.get("elastic_min_workers"), data.get("elastic_max_workers")
        return {
            "gpus": workers * gpw,
            "elastic": (lo * gpw, hi * gpw) if lo and hi else None,
        }
