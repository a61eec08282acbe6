"""gpuctl reads numbers in YAML files as YAML 1.2 does: ``1e3`` and ``1e300`` are numbers (YAML
1.1 read them as text, so the server said "must be a number" rather than the bound, and a
``runtimeLimit: 1e3`` was "not a duration"), ``010`` is ten. Booleans stay YAML 1.1's. The
loader alone is pure; the last tests go to a live server through the real CLI."""

from __future__ import annotations

import math

import pytest

from gpuctl import yamltext
from gpuctl.spec import SpecError, validate_spec
from policyversions.models import PolicyVersion
from scheduler.models import Job


def _value(text: str):
    return yamltext.load_one(f"v: {text}\n")["v"]


@pytest.mark.parametrize(
    "text,value",
    [
        ("1e3", 1000.0),
        ("1e300", 1e300),
        ("1E-2", 0.01),
        ("-1.5e3", -1500.0),
        ("+12", 12),
        (".5", 0.5),
        ("010", 10),  # decimal in YAML 1.2, octal 8 in YAML 1.1
        ("0o17", 15),
        ("0x1F", 31),
        ("-.inf", -math.inf),
    ],
)
def test_numbers_are_read_as_yaml_1_2_reads_them(text, value):
    read = _value(text)
    assert read == value and type(read) is not str and not isinstance(read, bool)


@pytest.mark.parametrize("text", ["1_000", "0b101", "1:30", "1e", "e3", "0x", "1.2.3"])
def test_what_yaml_1_2_does_not_call_a_number_stays_text(text):
    assert _value(text) == text


@pytest.mark.parametrize(
    "text,value",
    [("yes", True), ("No", False), ("on", True), ("OFF", False), ("true", True), ("~", None)],
)
def test_booleans_and_null_are_as_before(text, value):
    assert _value(text) is value


def test_nan_is_a_number():
    assert math.isnan(_value(".nan"))


def _spec(**fields):
    return {
        "apiVersion": "gpuplatform/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "j", "team": "vision"},
        "spec": {"workers": 1, "gpusPerWorker": 1, **fields},
    }


def test_whole_floats_are_integers_and_seconds_in_a_job_spec():
    document = yamltext.load_one(
        "apiVersion: gpuplatform/v1\nkind: TrainingJob\nmetadata: {name: j}\n"
        "spec: {workers: 2e0, gpusPerWorker: 1, runtimeLimit: 1e3, checkpointIntervalSeconds: 6e2}\n"
    )
    body = validate_spec(document)
    assert (body["workers"], body["runtime_limit_s"], body["checkpoint_interval_s"]) == (
        2,
        1000,
        600,
    )
    with pytest.raises(SpecError) as caught:
        validate_spec(_spec(runtimeLimit=2.5))
    assert caught.value.errors == {"spec.runtimeLimit": ["must be a whole number of seconds"]}


def test_env_values_keep_the_numbers_text_as_written():
    document = yamltext.load_one(
        "apiVersion: gpuplatform/v1\nkind: TrainingJob\nmetadata: {name: j}\n"
        "spec: {workers: 1, gpusPerWorker: 1, env: {LR: 3e-4, SEED: 010, V: 1.10, N: 7}}\n"
    )
    assert validate_spec(document)["env"] == {"LR": "3e-4", "SEED": "010", "V": "1.10", "N": "7"}


def test_command_list_items_keep_the_numbers_text_as_written():
    # str() made 3e-4 "0.0003", 010 "10" and 1e400 "inf": the job ran other arguments.
    document = yamltext.load_one(
        "apiVersion: gpuplatform/v1\nkind: TrainingJob\nmetadata: {name: j}\n"
        "spec: {workers: 1, gpusPerWorker: 1,"
        " command: [python, t.py, --lr, 3e-4, --seed, 010, --x, 1e400, --y, .nan, 7]}\n"
    )
    assert validate_spec(document)["command"] == (
        "python t.py --lr 3e-4 --seed 010 --x 1e400 --y .nan 7"
    )


@pytest.mark.parametrize("text", [".inf", "-.inf", ".nan", "1e400", "-1e400"])
@pytest.mark.parametrize(
    "field",
    ["workers", "gpusPerWorker", "runtimeLimit", "checkpointIntervalSeconds", "elastic.minWorkers"],
)
def test_non_finite_numbers_in_a_job_spec_are_named_as_such(field, text):
    # "must be an integer >= 1" for 1e400 read as if it were too small.
    spec = {"workers": 1, "gpusPerWorker": 1}
    if field.startswith("elastic."):
        spec["elastic"] = {"minWorkers": _value(text), "maxWorkers": 2}
    else:
        spec[field] = _value(text)
    with pytest.raises(SpecError) as caught:
        validate_spec(_spec(**spec))
    reasons = caught.value.errors[f"spec.{field}"]
    assert any("finite" in r for r in reasons), reasons


# --- against a live server ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_policy_value_of_1e300_meets_its_bound_not_must_be_a_number(as_admin, tmp_path):
    candidate = tmp_path / "candidate.yaml"
    candidate.write_text("engine_config:\n  max_preemption_attempts: 1e300\n")
    refused = as_admin("policy", "apply", str(candidate), "-m", "absurd")
    assert refused.code == 2
    assert "engine_config.max_preemption_attempts: must be <= 100000" in refused.err
    candidate.write_text("engine_config:\n  queue_aging_s: 36e2\n")
    applied = as_admin("policy", "apply", str(candidate), "-m", "an hour")
    assert applied.code == 0, applied.err
    assert PolicyVersion.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_a_runtime_limit_of_1e3_is_a_thousand_seconds(as_admin, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "apiVersion: gpuplatform/v1\nkind: TrainingJob\nmetadata: {name: j, team: vision}\n"
        "spec: {workers: 1, gpusPerWorker: 1, runtimeLimit: 1e3, env: {LR: 3e-4}}\n"
    )
    result = as_admin("submit", "-f", str(spec))
    assert result.code == 0, result.err
    job = Job.objects.get()
    assert (job.runtime_limit_s, job.env) == (1000, {"LR": "3e-4"})
