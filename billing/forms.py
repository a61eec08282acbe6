"""Portal forms of billing. Amounts are bounded as the models declare (``core.bounds``) and
months parse through ``calc.parse_month``, the one month rule of the pages and the API."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from django import forms
from django.http import QueryDict
from django.utils import timezone

from catalogue.models import GpuModel
from core.bounds import form_number
from scheduler.models import Cluster

from . import calc
from .models import Budget, Capacity, PriceRate


class MonthField(forms.Field):
    """A month as ``YYYY-MM`` within ``calc.MIN_MONTH..MAX_MONTH``; cleaned to its first day."""

    def to_python(self, value: object) -> date | None:
        if value in self.empty_values:
            return None
        try:
            return calc.parse_month(str(value).strip()[:20])
        except ValueError as exc:
            raise forms.ValidationError(str(exc), code="invalid") from None


class UtcDateTimeField(forms.DateTimeField):
    """A date and time without an offset read as UTC, as the price book labels it: read in the
    active zone, a page showing local times would start a rate hours away from what was typed."""

    def to_python(self, value: str | datetime | date | None) -> datetime | None:
        with timezone.override(UTC):
            return super().to_python(value)


class BudgetForm(forms.Form):
    month = MonthField(widget=forms.HiddenInput)
    amount = form_number(Budget, "amount", label="Amount (USD)")
    hard_stop = forms.BooleanField(required=False)

    def __init__(self, data: QueryDict | None = None, **kwargs: Any) -> None:
        # People type "12,500": a thousands separator, not a decimal mark.
        if data is not None and "amount" in data:
            data = data.copy()
            data["amount"] = str(data["amount"]).replace(",", "").strip()
        super().__init__(data, **kwargs)


class PriceForm(forms.Form):
    """A rate for the price book: platform-wide (no cluster) or one cluster's override."""

    gpu_model = forms.ModelChoiceField(
        queryset=GpuModel.objects.order_by("name"), to_field_name="name", label="GPU model"
    )
    capacity = forms.ChoiceField(choices=Capacity.choices)
    cluster = forms.ModelChoiceField(
        queryset=Cluster.objects.order_by("name"),
        to_field_name="name",
        required=False,
        empty_label="all clusters (platform-wide)",
    )
    rate_per_gpu_hour = form_number(PriceRate, "rate_per_gpu_hour", label="USD per GPU-hour")
    effective_from = UtcDateTimeField(label="Effective from (UTC)")
    note = forms.CharField(max_length=200, required=False)
