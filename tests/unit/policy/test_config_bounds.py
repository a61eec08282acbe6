"""Every number an engine configuration takes has a finite upper bound, declared once in
``fields.FIELDS``: a value past it (1e300, the largest float) is refused naming the field and the
bound, whichever way it comes in (a ``las`` field, a threshold, a flat ``las_*`` key of the format
before the section); the bound itself is accepted. Infinities and NaN are refused as before."""

from __future__ import annotations

import math
import sys

import pytest

from scheduler.policy import SnapshotError, config_from_dict
from scheduler.policy.fields import FIELDS, Field

NUMBERS = [f for f in FIELDS if f.kind == "number"]


def _config(f: Field, value: object) -> dict:
    return {"las": {f.name: value}} if f.section else {f.name: value}


def test_every_number_field_states_a_finite_upper_bound():
    unbounded = [f.key for f in NUMBERS if f.high is None or not math.isfinite(f.high)]
    assert unbounded == []


@pytest.mark.parametrize("f", NUMBERS, ids=[f.key for f in NUMBERS])
@pytest.mark.parametrize("huge", [1e300, sys.float_info.max, 10**400], ids=["1e300", "max", "int"])
def test_a_number_past_its_bound_is_refused_naming_the_field(f, huge):
    with pytest.raises(SnapshotError) as refused:
        config_from_dict(_config(f, huge), path="engine_config")
    assert refused.value.field == f"engine_config.{f.key}"
    assert "must be" in refused.value.reason


@pytest.mark.parametrize("f", NUMBERS, ids=[f.key for f in NUMBERS])
def test_the_bound_itself_is_accepted_and_the_next_float_refused(f):
    assert f.high is not None
    config = config_from_dict(_config(f, f.high), path="engine_config")
    read = getattr(config.las if f.section else config, f.name)
    assert read == f.high
    with pytest.raises(SnapshotError) as refused:
        config_from_dict(_config(f, math.nextafter(f.high, math.inf)), path="engine_config")
    high = int(f.high) if float(f.high).is_integer() else f.high
    assert refused.value.reason == f"must be <= {high}"


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan], ids=["inf", "-inf", "nan"])
def test_infinities_and_nan_are_refused(bad):
    for f in NUMBERS:
        with pytest.raises(SnapshotError, match="finite"):
            config_from_dict(_config(f, bad), path="engine_config")


def test_a_threshold_past_its_bound_is_refused_naming_its_index():
    (th,) = [f for f in FIELDS if f.kind == "thresholds"]
    assert th.item_high is not None
    config_from_dict({"las": {"thresholds_gpu_s": [3600, th.item_high]}})
    with pytest.raises(SnapshotError) as refused:
        config_from_dict({"las": {"thresholds_gpu_s": [3600, 1e300]}}, path="engine_config")
    assert refused.value.field == "engine_config.las.thresholds_gpu_s[1]"


LEGACY_NUMBERS = {
    "las_fifo_after_s": "las.fifo_one_node_after_s",
    "las_reserve_after_s": "las.reserve_after_s",
    "las_long_run_s": "las.long_run_s",
    "las_fifo_from_gpu_s": "las.thresholds_gpu_s",
}


@pytest.mark.parametrize("key", LEGACY_NUMBERS, ids=list(LEGACY_NUMBERS))
def test_a_flat_key_past_the_bound_of_its_replacement_is_refused(key):
    with pytest.raises(SnapshotError) as refused, pytest.warns(DeprecationWarning):
        config_from_dict({key: 1e300}, path="engine_config")
    assert refused.value.field == f"engine_config.{key}"
