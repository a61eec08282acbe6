"""The job spec validator and duration parser (pure: no server, no database)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuctl.spec import SpecError, load_spec_text, parse_duration, validate_spec

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "job.yaml"


def doc(**spec):
    base = {"workers": 1, "gpusPerWorker": 1}
    base.update(spec)
    return {
        "apiVersion": "gpuplatform/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "j"},
        "spec": {k: v for k, v in base.items() if v is not ...},
    }


def errors_of(document) -> dict[str, list[str]]:
    with pytest.raises(SpecError) as caught:
        validate_spec(document)
    return caught.value.errors


@pytest.mark.parametrize(
    "text,seconds",
    [
        (7200, 7200),
        ("7200", 7200),
        ("2h", 7200),
        ("90m", 5400),
        ("1h30m", 5400),
        ("1d", 86400),
        ("45s", 45),
        ("1h 30m", 5400),
        ("02:00:00", 7200),
        ("1-00:00:00", 86400),
        ("1:30", 90),  # Slurm's M:S
        ("2-12", 2 * 86400 + 12 * 3600),
        ("1-02:30", 86400 + 2 * 3600 + 1800),
    ],
)
def test_durations_people_write_are_understood(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "2 hours", "30m1h", "1h1h", "-5", 0, True, 1.5, "0s"])
def test_anything_else_is_refused(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@given(st.integers(0, 30), st.integers(0, 23), st.integers(0, 59), st.integers(0, 59))
def test_unit_and_slurm_forms_agree(d, h, m, s):
    total = d * 86400 + h * 3600 + m * 60 + s
    if total == 0:
        return
    units = "".join(f"{n}{u}" for n, u in ((d, "d"), (h, "h"), (m, "m"), (s, "s")) if n)
    assert parse_duration(units) == total
    assert parse_duration(f"{d}-{h:02}:{m:02}:{s:02}") == total
    assert parse_duration(str(total)) == total


def test_the_example_file_is_valid_and_maps_to_contract_names():
    body = validate_spec(load_spec_text(EXAMPLE.read_text()))
    assert body["team"] == "vision" and body["workers"] == 2 and body["gpus_per_worker"] == 8
    assert body["runtime_limit_s"] == 12 * 3600 and body["checkpoint_interval_s"] == 1800
    assert body["elastic"] == {"min_workers": 1, "max_workers": 4}
    assert body["command"] == "torchrun --nproc-per-node=8 train.py --epochs 90"


def test_unset_optional_fields_are_left_to_the_server():
    assert validate_spec(doc()) == {"name": "j", "workers": 1, "gpus_per_worker": 1}


def test_every_problem_is_reported_with_its_path():
    errors = errors_of(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "", "namespace": "x"},
            "spec": {
                "workers": "two",
                "gpusPerWorker": 65,
                "preemptible": "yes",
                "elastic": {"minWorkers": 0},
                "env": {"1BAD": "x", "OK": True},
                "nodes": 3,
            },
        }
    )
    assert set(errors) == {
        "apiVersion",
        "kind",
        "metadata.name",
        "metadata.namespace",
        "spec.workers",
        "spec.gpusPerWorker",
        "spec.preemptible",
        "spec.elastic.minWorkers",
        "spec.elastic.maxWorkers",
        "spec.env.1BAD",
        "spec.env.OK",
        "spec.nodes",
    }
    assert errors["spec.workers"] == ["must be an integer >= 1"]
    assert errors["spec.gpusPerWorker"] == ["must be at most 64"]


def test_a_typo_gets_a_suggestion():
    errors = errors_of(doc(gpuModell="h100-80gb"))
    assert errors == {"spec.gpuModell": ["unknown field (did you mean gpuModel?)"]}


def test_required_fields():
    errors = errors_of(doc(workers=..., gpusPerWorker=...))
    assert set(errors) == {"spec.workers", "spec.gpusPerWorker"}


def test_workers_outside_the_elastic_range():
    errors = errors_of(doc(workers=5, elastic={"minWorkers": 1, "maxWorkers": 4}))
    assert errors == {"spec.workers": ["must lie in the elastic range 1..4"]}
    errors = errors_of(doc(elastic={"minWorkers": 3, "maxWorkers": 2}))
    assert errors == {"spec.elastic.maxWorkers": ["must be >= spec.elastic.minWorkers"]}


def test_command_as_list_keeps_each_item_one_argument():
    body = validate_spec(doc(command=["python", "-c", "print('hi there')", 3]))
    assert body["command"] == "python -c 'print('\"'\"'hi there'\"'\"')' 3"
    assert errors_of(doc(command={"run": "x"})) == {
        "spec.command": ["must be a string or a list of strings"]
    }


def test_an_env_name_with_a_trailing_newline_is_refused():
    # the server refuses it too (core.envvars); a "$" anchor would have let it through
    assert set(errors_of(doc(env={"A\n": "x"}))) == {"spec.env.A\n"}


def test_env_as_kubernetes_list():
    body = validate_spec(doc(env=[{"name": "A", "value": "1"}, {"name": "B"}]))
    assert body["env"] == {"A": "1", "B": ""}
    assert set(errors_of(doc(env=[{"value": "x"}]))) == {"spec.env[0]"}


def test_yaml_errors_name_the_file_and_line():
    with pytest.raises(SpecError) as caught:
        load_spec_text("spec:\n  workers: [1\n", source="job.yaml")
    (message,) = caught.value.errors["job.yaml"]
    assert message.startswith("not valid YAML (line")
    with pytest.raises(SpecError):
        load_spec_text("a: 1\n---\nb: 2\n", source="job.yaml")
    with pytest.raises(SpecError):
        load_spec_text("", source="job.yaml")
