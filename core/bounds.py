"""Finite numeric bounds, declared once on the model fields and read everywhere else.

A numeric model field a user can set states its range with ``MinValueValidator`` and
``MaxValueValidator``. API serializers and portal forms build their numeric fields from it
(:func:`api_number`, :func:`form_number`), and services check values with :func:`number_error`,
so the REST API, the portal, job arrays and direct service callers refuse the same values with
the same message, and no ``1e100``, ``NaN``, ``Infinity`` or ``2**63`` reaches a row, a datetime
or a backend. A test walks every serializer and form and fails on a numeric field without both
bounds.

Only the bounds declared on the field count (not the database backend's integer range, which
differs between SQLite and PostgreSQL), so a value means the same on every engine.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from functools import cache
from numbers import Real
from typing import TYPE_CHECKING, Any, TypeVar, cast

from django.core.exceptions import ImproperlyConfigured
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

if TYPE_CHECKING:  # models import this module's constants: the forms and DRF load later
    from django import forms
    from rest_framework import serializers

_F = TypeVar("_F", bound=type)

# The longest duration a job field may state (runtime limit, checkpoint interval, simulated work):
# a year and a day. Longer values only ever meant "forever" and overflowed date arithmetic.
MAX_DURATION_S = 366 * 24 * 3600
# The most workers a job (or an elastic range) may ask for.
MAX_WORKERS = 4096
# The most GPUs one worker may ask for (the largest nodes sold have 8 to 72).
MAX_GPUS_PER_WORKER = 64
# A GPU count any quota, guarantee or cap may state.
MAX_GPUS = 1_000_000
# The most jobs one array (sweep) may hold.
MAX_ARRAY_SIZE = 10_000


def _limit(validator: MinValueValidator | MaxValueValidator) -> Any:
    value = validator.limit_value
    return value() if callable(value) else value


@cache
def bounds(model: type[models.Model], name: str) -> tuple[Any, Any]:
    """``(lowest, highest)`` allowed for ``model.name``, from the validators declared on it."""
    field = model._meta.get_field(name)
    lo = hi = None
    # ``_validators`` are the ones the model declares; ``validators`` would add the database
    # backend's integer range, which is not the same on SQLite and PostgreSQL. It is Django's
    # private attribute, which the stubs do not declare. A reverse relation declares none.
    declared = field._validators if isinstance(field, models.Field) else []  # type: ignore[attr-defined]
    for validator in declared:
        if isinstance(validator, MinValueValidator):
            lo = _limit(validator) if lo is None else max(lo, _limit(validator))
        elif isinstance(validator, MaxValueValidator):
            hi = _limit(validator) if hi is None else min(hi, _limit(validator))
    if lo is None or hi is None:
        raise ImproperlyConfigured(
            f"{model._meta.label}.{name} declares no finite bounds (add Min/MaxValueValidator)"
        )
    return lo, hi


def _shown(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:,}" if isinstance(value, int) else str(value)


def range_text(model: type[models.Model], name: str) -> str:
    lo, hi = bounds(model, name)
    return f"between {_shown(lo)} and {_shown(hi)}"


def finite_number(value: object) -> bool:
    """Whether a value parsed from JSON is a finite number: an int or a float, not a bool, not
    NaN or an infinity, and within the float range (JSON's integers are unbounded, and
    ``math.isfinite`` or ``float`` raise on one beyond it, ``10**309``)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def number_error(model: type[models.Model], name: str, value: object) -> str | None:
    """Why ``value`` is not allowed in ``model.name`` (None when it is): not a finite number, a
    fraction for a whole-number field, or outside the declared bounds."""
    field = model._meta.get_field(name)
    whole = isinstance(field, models.IntegerField)
    if isinstance(value, bool) or not isinstance(value, Real | Decimal):
        return "must be a whole number" if whole else "must be a number"
    try:
        finite = value.is_finite() if isinstance(value, Decimal) else finite_number(value)
    except InvalidOperation:
        finite = False
    if not finite:
        return "must be a finite number"
    if whole and value != math.trunc(value):
        return "must be a whole number"
    lo, hi = bounds(model, name)
    if not lo <= value <= hi:
        return f"must be {range_text(model, name)}"
    return None


# A number written as text (a form field, or a JSON string): ASCII digits, an optional sign,
# fraction and exponent. Python's int() and float() also take "1_000" and full-width digits.
_NUMBER_TEXT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)


class _PlainNumber:
    """A DRF number field that takes a JSON number or its plain spelling as text, and refuses a
    boolean (which DRF reads as 0 or 1) and the spellings only Python reads."""

    # A mixin: fail() and the number parsing are those of the DRF field it is mixed into
    # (``_plain``), which this module may not import at load time (see above).
    def to_internal_value(self, data: object) -> Any:
        if isinstance(data, bool) or (
            isinstance(data, str) and not _NUMBER_TEXT.fullmatch(data.strip())
        ):
            self.fail("invalid")  # type: ignore[attr-defined]  # the DRF field's, see above
        return super().to_internal_value(data)  # type: ignore[misc]  # the DRF field's


@cache
def _plain_class(field_class: type) -> type:
    return type(field_class.__name__, (_PlainNumber, field_class), {})


def _plain(field_class: _F) -> _F:
    """``field_class`` with :class:`_PlainNumber`'s refusals first (one class per field class)."""
    # A cast: type() answers a bare `type`, here a subclass of field_class.
    return cast(_F, _plain_class(field_class))


def api_number(
    model: type[models.Model], name: str, **kwargs: Any
) -> serializers.Field[Any, Any, Any, Any]:
    """A DRF field for ``model.name`` bounded as the model declares (integer, float or decimal
    as the model field is). ``kwargs`` are passed on (required, allow_null, default, …)."""
    from rest_framework import serializers  # models import this module's constants

    field = model._meta.get_field(name)
    lo, hi = bounds(model, name)
    described = kwargs.pop("help_text", "")
    kwargs["help_text"] = (described + " " if described else "") + f"({range_text(model, name)})"
    if isinstance(field, models.DecimalField):
        return _plain(serializers.DecimalField)(
            max_digits=field.max_digits,
            decimal_places=field.decimal_places,
            min_value=lo,
            max_value=hi,
            **kwargs,
        )
    if isinstance(field, models.IntegerField):
        return _plain(serializers.IntegerField)(min_value=lo, max_value=hi, **kwargs)
    if isinstance(field, models.FloatField):
        # DRF's FloatField refuses NaN and infinities; the bounds refuse the finite giants.
        return _plain(serializers.FloatField)(min_value=lo, max_value=hi, **kwargs)
    raise ImproperlyConfigured(f"{model._meta.label}.{name} is not a numeric field")


def form_number(model: type[models.Model], name: str, **kwargs: Any) -> forms.Field:
    """A portal form field for ``model.name`` bounded as the model declares; the number input
    gets the same ``min``/``max`` so the browser says so before the server does."""
    from django import forms

    field = model._meta.get_field(name)
    lo, hi = bounds(model, name)
    if isinstance(field, models.DecimalField):
        return forms.DecimalField(
            max_digits=field.max_digits,
            decimal_places=field.decimal_places,
            min_value=lo,
            max_value=hi,
            **kwargs,
        )
    if isinstance(field, models.IntegerField):
        return forms.IntegerField(min_value=lo, max_value=hi, **kwargs)
    if isinstance(field, models.FloatField):
        return forms.FloatField(min_value=lo, max_value=hi, **kwargs)
    raise ImproperlyConfigured(f"{model._meta.label}.{name} is not a numeric field")
