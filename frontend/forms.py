"""Portal forms. They parse types (text to int, empty to None) and shape a request; every domain
rule (team membership, GPU counts, known models, elastic range) is checked by the service, whose
``FieldErrors`` are put back on the same form so they show inline next to their field.

Fields that name other objects (team, GPU model, priority class) are plain text fields rendered as
selects: the choice is validated by ``job_submit``, not by the form, so there is one rule and one
message whatever the client.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, fields
from typing import Any, cast

from django import forms

from catalogue.models import GpuModel
from core.bounds import form_number
from core.envvars import is_env_name
from core.errors import DomainError
from scheduler.arrays import MAX_ARRAY_SIZE, ArrayRequest
from scheduler.models import Cluster, Job, JobArray
from scheduler.services import JobRequest
from tenants.models import PriorityClass, Team

# Service error keys that do not match a form field name.
_ERROR_FIELDS = {
    "elastic.min_workers": "elastic_min_workers",
    "elastic.max_workers": "elastic_max_workers",
    "elastic": "elastic_min_workers",
    "non_field_errors": None,
}

# Array parameters that set a job field per index (typed as the form types them); any other
# name becomes an environment variable of that index.
ARRAY_FIELD_PARAMS: dict[str, type] = {
    "workers": int,
    "gpus_per_worker": int,
    "checkpoint_interval_s": int,
    "runtime_limit_s": int,
    "simulated_duration_s": float,
    "gpu_model": str,
    "priority_class": str,
    "dataset": str,
    "image": str,
}
# Job fields that do not vary by index here: taken for environment variables, they left every
# job with the form's value while the user meant to vary it.
_FIXED_JOB_FIELDS = frozenset(f.name for f in fields(JobRequest)) - set(ARRAY_FIELD_PARAMS)
_ITEM_ERROR = re.compile(r"^items\[(\d+)\]\.(.+)$")

PREEMPTIBLE_CHOICES = [("", "Priority class default"), ("yes", "Yes"), ("no", "No")]
SPOT_CHOICES = [("", "If preemptible (default)"), ("yes", "Yes"), ("no", "No")]
COMM_HEAVY_CHOICES = [("", "Automatic (more than one worker)"), ("yes", "Yes"), ("no", "No")]
# The routing object's keys (docs/routing.md) -> the form field showing their errors.
_ROUTING_ERROR_FIELDS = {
    "clusters": "routing_clusters",
    "regions": "routing_regions",
    "prefer_clusters": "routing_prefer_clusters",
    "prefer_regions": "routing_prefer_regions",
    "max_price_per_gpu_h": "routing_max_price",
    "spot": "routing_spot",
    "comm_heavy": "routing_comm_heavy",
}
_ROUTING_ERROR = re.compile(r"^routing\.([a-z_]+)(?:\[\d+\])?$")


class NamesField(forms.Field):
    """Several names picked in a multi-select, as a list; which names exist is the service's to
    say (``routing_errors``), as for the other fields that name objects."""

    widget = forms.SelectMultiple

    def to_python(self, value: Any) -> list[str]:  # as Field.to_python: whatever was posted
        if not value:
            return []
        if isinstance(value, str):
            value = [value]
        return [str(v).strip() for v in value if str(v).strip()]


def _number(**attrs: str) -> forms.NumberInput:
    return forms.NumberInput(attrs={"inputmode": "numeric", **attrs})


class JobSubmitForm(forms.Form):
    name = forms.CharField(max_length=200, help_text="A short name your team will recognise.")
    team = forms.CharField(widget=forms.Select)
    image = forms.CharField(
        max_length=300, required=False, help_text="Container image, e.g. registry/train:1.4"
    )
    command = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    workers = form_number(Job, "workers", initial=1, widget=_number())
    gpus_per_worker = form_number(
        Job, "gpus_per_worker", label="GPUs per worker", initial=1, widget=_number()
    )
    gpu_model = forms.CharField(label="GPU model", required=False, widget=forms.Select)
    priority_class = forms.CharField(required=False, widget=forms.Select)
    preemptible = forms.ChoiceField(choices=PREEMPTIBLE_CHOICES, required=False)
    checkpoint_interval_s = form_number(
        Job,
        "checkpoint_interval_s",
        label="Checkpoint interval (s)",
        required=False,
        widget=_number(),
    )
    checkpoint_on_advice = forms.BooleanField(
        label="Checkpoint on the advised schedule",
        required=False,
        help_text="The platform asks the job to checkpoint every advised interval (the job must "
        "handle the checkpoint signal).",
    )
    runtime_limit_s = form_number(
        Job, "runtime_limit_s", label="Runtime limit (s)", required=False, widget=_number()
    )
    deadline = forms.DateTimeField(
        label="Deadline (UTC)",
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"],
        help_text="When you need it finished: it goes first in its priority class as the time "
        "runs short. Estimate finish shows whether it is likely at current load.",
    )
    dataset = forms.CharField(max_length=200, required=False)
    dataset_version = forms.CharField(max_length=100, required=False)
    code_ref = forms.CharField(
        label="Code reference",
        max_length=200,
        required=False,
        help_text="The code that runs, e.g. a git commit; kept in the reproducibility record.",
    )
    elastic_min_workers = form_number(
        Job, "elastic_min_workers", label="Elastic: min workers", required=False, widget=_number()
    )
    elastic_max_workers = form_number(
        Job, "elastic_max_workers", label="Elastic: max workers", required=False, widget=_number()
    )
    simulated_duration_s = form_number(
        Job,
        "simulated_duration_s",
        label="Simulated duration (s)",
        required=False,
        help_text="Simulated clusters only: seconds of work the demo job takes.",
        widget=forms.NumberInput(attrs={"step": "any"}),
    )
    routing_clusters = NamesField(
        label="Routing: allowed clusters",
        required=False,
        help_text="Only these clusters; none picked: any your team may use.",
    )
    routing_regions = NamesField(
        label="Routing: allowed regions",
        required=False,
        help_text="Only clusters in these regions; none picked: any region.",
    )
    routing_prefer_clusters = NamesField(
        label="Routing: preferred clusters",
        required=False,
        help_text="Tried first among the allowed, whatever they cost.",
    )
    routing_prefer_regions = NamesField(
        label="Routing: preferred regions",
        required=False,
        help_text="Clusters in these regions are tried first among the allowed, whatever they "
        "cost.",
    )
    routing_max_price = forms.DecimalField(
        label="Routing: max price per GPU-hour (USD)",
        required=False,
        max_digits=12,
        decimal_places=4,
        min_value=0,
        # a bound as every numeric field has; no GPU-hour costs this much
        max_value=100_000,
        widget=forms.NumberInput(attrs={"step": "any", "inputmode": "decimal"}),
        help_text="A cluster priced above it (or not priced) is never used.",
    )
    routing_spot = forms.ChoiceField(
        label="Routing: tolerate spot capacity",
        choices=SPOT_CHOICES,
        required=False,
        help_text="Spot is cheaper and may be reclaimed.",
    )
    routing_comm_heavy = forms.ChoiceField(
        label="Routing: communication-heavy",
        choices=COMM_HEAVY_CHOICES,
        required=False,
        help_text="A communication-heavy job spread over several nodes runs only on clusters "
        "with NVLink or InfiniBand between nodes; on an Ethernet cluster it must fit on one "
        "node.",
    )
    array_count = form_number(
        JobArray,
        "size",
        label="Array: number of jobs",
        required=False,
        help_text="Leave empty for one job. N submits a sweep of N jobs (indices 0…N-1), "
        "all or none.",
        widget=_number(),
    )
    array_params = forms.CharField(
        label="Array: per-index parameters",
        required=False,
        help_text="One line per parameter, NAME=value0,value1,… (one value per index), e.g. "
        "lr=0.1,0.01,0.001. The job fields " + ", ".join(ARRAY_FIELD_PARAMS) + " set that "
        "field (the other job fields are the same for every index); any other name becomes an "
        "environment variable.",
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
    )

    def __init__(
        self,
        *args: Any,
        teams: Iterable[Team] = (),
        gpu_models: Iterable[GpuModel] = (),
        priority_classes: Iterable[PriorityClass] = (),
        clusters: Iterable[Cluster] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        names = [c.name for c in clusters]
        self.fields["routing_clusters"].widget.choices = [(n, n) for n in names]
        self.fields["routing_prefer_clusters"].widget.choices = [(n, n) for n in names]
        regions = sorted({c.region for c in clusters if c.region})
        self.fields["routing_regions"].widget.choices = [(r, r) for r in regions]
        self.fields["routing_prefer_regions"].widget.choices = [(r, r) for r in regions]
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

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data  # what Form.clean returns (its stubs allow None)
        if "array_count" in data and "array_params" in data:
            try:
                data["array_items"] = self._parse_array(
                    data.get("array_count"), data.get("array_params") or ""
                )
            except forms.ValidationError as exc:
                self.add_error(
                    "array_params" if data.get("array_params", "").strip() else "array_count", exc
                )
        return data

    @staticmethod
    def _parse_array(count: int | None, text: str) -> list[dict[str, Any]] | None:
        """The per-index overrides (``items`` of an ArrayRequest), or None for a single job.
        Every problem is reported at once, naming the line or the index."""
        lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
        if count is None and not lines:
            return None
        errors: list[str] = []
        columns: dict[str, list[str]] = {}
        for number, line in lines:
            name, sep, values = line.partition("=")
            name = name.strip()
            if not sep or not name:
                errors.append(f"line {number}: write NAME=value0,value1,…")
                continue
            if name in _FIXED_JOB_FIELDS:
                errors.append(
                    f"line {number}: {name} is a job field that cannot vary by index here (those "
                    f"that can: {', '.join(ARRAY_FIELD_PARAMS)}); set it above for every job"
                )
                continue
            if name not in ARRAY_FIELD_PARAMS and not is_env_name(name):
                errors.append(
                    f"line {number}: {name!r} is neither a job field nor a valid environment "
                    "variable name (letters, digits and _, not starting with a digit)"
                )
                continue
            if name in columns:
                errors.append(f"line {number}: {name} is given twice")
                continue
            columns[name] = [v.strip() for v in values.split(",")]
        size = count
        for name, column in columns.items():
            if size is None:
                size = len(column)
            if len(column) != size:
                errors.append(
                    f"{name} has {len(column)} value{'s' if len(column) != 1 else ''} "
                    f"but the array has {size} indices"
                )
        if size is not None and size > MAX_ARRAY_SIZE:
            errors.append(f"at most {MAX_ARRAY_SIZE} indices per array (got {size})")
        items: list[dict[str, Any]] = [{} for _ in range(size or 0)]
        if not errors:
            for name, column in columns.items():
                kind = ARRAY_FIELD_PARAMS.get(name)
                for index, value in enumerate(column):
                    if kind is None:
                        items[index].setdefault("env", {})[name] = value
                        continue
                    try:
                        items[index][name] = kind(value)
                    except ValueError:
                        what = "an integer" if kind is int else "a number"
                        errors.append(f"index {index}: {name} must be {what}, not {value!r}")
                        continue
                    # The bound the field of the same name has for one job: past it, the
                    # column refused the text and the submission was a 500.
                    limit = getattr(JobSubmitForm.base_fields[name], "max_length", None)
                    if limit is not None and len(value) > limit:
                        errors.append(
                            f"index {index}: {name} must be at most {limit} characters "
                            f"(it has {len(value)})"
                        )
        if errors:
            raise forms.ValidationError(errors)
        return items

    def is_array(self) -> bool:
        return self.cleaned_data.get("array_items") is not None

    def to_array_request(self) -> ArrayRequest:
        """The array request for a valid form with an array section: the job fields the form
        set are the template (unset ones left to the service's defaults)."""
        single = asdict(self.to_request())
        name, team = single.pop("name"), single.pop("team")
        template = {k: v for k, v in single.items() if v is not None and v != ""}
        return ArrayRequest(
            name=name, team=team, template=template, items=self.cleaned_data["array_items"]
        )

    def to_request(self) -> JobRequest:
        """The service request for a valid form (types parsed; domain rules not yet checked)."""
        data = self.cleaned_data
        lo, hi = data.get("elastic_min_workers"), data.get("elastic_max_workers")
        elastic = None
        if lo is not None or hi is not None:
            # One half may be missing (None): the service checks the untyped object and names
            # that half (elastic.min_workers is required), as for an API body.
            elastic = cast(dict[str, int], {"min_workers": lo, "max_workers": hi})
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
            deadline=data.get("deadline"),
            dataset=(data.get("dataset") or "").strip(),
            dataset_version=(data.get("dataset_version") or "").strip(),
            code_ref=(data.get("code_ref") or "").strip(),
            checkpoint_on_advice=bool(data.get("checkpoint_on_advice")),
            elastic=elastic,
            routing=self._routing(),
            simulated_duration_s=data.get("simulated_duration_s"),
        )

    def _routing(self) -> dict[str, object] | None:
        """The routing object from the routing fields, or None when none is set (the job then
        has no constraints of its own)."""
        data = self.cleaned_data
        routing: dict[str, object] = {}
        if data.get("routing_clusters"):
            routing["clusters"] = data["routing_clusters"]
        if data.get("routing_regions"):
            routing["regions"] = data["routing_regions"]
        if data.get("routing_prefer_clusters"):
            routing["prefer_clusters"] = data["routing_prefer_clusters"]
        if data.get("routing_prefer_regions"):
            routing["prefer_regions"] = data["routing_prefer_regions"]
        if data.get("routing_max_price") is not None:
            routing["max_price_per_gpu_h"] = float(data["routing_max_price"])
        spot = {"yes": True, "no": False}.get(data.get("routing_spot") or "")
        if spot is not None:
            routing["spot"] = spot
        # Automatic is the contract's null (more than one worker): left out like any unset key.
        comm_heavy = {"yes": True, "no": False}.get(data.get("routing_comm_heavy") or "")
        if comm_heavy is not None:
            routing["comm_heavy"] = comm_heavy
        return routing or None

    def add_domain_error(self, error: DomainError) -> None:
        """Put a service error (one field or many) on the fields it names."""
        for key, messages in error.as_dict().items():
            # Array errors name the template field or the index (``items[3].gpu_model``).
            field: str | None
            if item := _ITEM_ERROR.match(key):
                field = "array_params"
                messages = [f"index {item.group(1)}: {item.group(2)}: {m}" for m in messages]
            elif key == "items":
                field = "array_count"
            elif routing := _ROUTING_ERROR.match(key.removeprefix("template.")):
                field = _ROUTING_ERROR_FIELDS.get(routing.group(1))
            else:
                key = key.removeprefix("template.")
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

    def preview(self) -> dict[str, int | tuple[int, int] | None]:
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
