"""The ``array`` section of a job spec (pure: no server, no database)."""

from __future__ import annotations

import math

import pytest

from gpuctl.spec import SpecError, array_path_for, validate_array_spec


def doc(array, **spec):
    base = {"workers": 1, "gpusPerWorker": 1, **spec}
    return {
        "apiVersion": "gpuplatform/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "s", "team": "vision"},
        "spec": {k: v for k, v in base.items() if v is not ...},
        "array": array,
    }


def errors_of(document) -> dict[str, list[str]]:
    with pytest.raises(SpecError) as caught:
        validate_array_spec(document)
    return caught.value.errors


def test_env_lists_and_items_merge_per_index():
    body = validate_array_spec(
        doc(
            {"env": {"LR": [0.5, "1e-4"]}, "items": [{"env": {"X": 1}}, {"gpuModel": "a100"}]},
            env={"BASE": "1"},
        )
    )
    assert body == {
        "name": "s",
        "team": "vision",
        "template": {"workers": 1, "gpus_per_worker": 1, "env": {"BASE": "1"}},
        "items": [{"env": {"X": "1", "LR": "0.5"}}, {"gpu_model": "a100", "env": {"LR": "1e-4"}}],
    }


def test_count_alone_gives_equal_indices():
    assert validate_array_spec(doc({"count": 3}))["items"] == [{}, {}, {}]


@pytest.mark.parametrize("count", [math.inf, -math.inf, math.nan])
def test_a_non_finite_count_is_named_as_such(count):
    assert errors_of(doc({"count": count})) == {
        "array.count": [f"must be a finite number, not {count}"]
    }


def test_a_whole_float_count_is_an_integer_as_elsewhere_in_a_spec():
    assert validate_array_spec(doc({"count": 2.0}))["items"] == [{}, {}]


def test_required_fields_may_come_from_every_item_only():
    body = validate_array_spec(doc({"items": [{"workers": 1}, {"workers": 2}]}, workers=...))
    assert "workers" not in body["template"] and body["items"][1] == {"workers": 2}
    errors = errors_of(doc({"items": [{"workers": 1}, {}]}, workers=...))
    assert errors == {"spec.workers": ["is required (an integer >= 1)"]}


@pytest.mark.parametrize(
    ("array", "path", "reason"),
    [
        (None, "array", "must be a mapping"),
        ({}, "array", "give count, env lists or items"),
        ({"count": 0}, "array.count", "must be an integer >= 1"),
        ({"count": True}, "array.count", "must be an integer >= 1"),
        ({"count": 10_001}, "array.count", "must be at most 10000"),
        ({"items": []}, "array.items", "must be a non-empty list"),
        ({"items": ["x"]}, "array.items[0]", "must be a mapping"),
        ({"env": {"1X": [1]}}, "array.env.1X", "the variable name must be"),
        ({"env": {"X": 3}}, "array.env.X", "must be a list with one value per index"),
        ({"env": {"X": [True]}}, "array.env.X", "values must be strings or numbers"),
        ({"count": 2, "items": [{}]}, "array.items", "has 1 entries but array.count gives 2"),
        ({"cnt": 2}, "array.cnt", "unknown field (did you mean count?)"),
    ],
)
def test_bad_array_sections_name_the_field(array, path, reason):
    errors = errors_of(doc(array))
    assert any(reason in r for r in errors.get(path, [])), errors


def test_template_and_array_errors_are_reported_together():
    errors = errors_of(doc({"items": [{"runtimeLimit": "soon"}]}, gpusPerWorker=0))
    assert set(errors) == {"spec.gpusPerWorker", "array.items[0].runtimeLimit"}


@pytest.mark.parametrize(
    ("api", "path"),
    [
        ("template.gpu_model", "spec.gpuModel"),
        ("items[3].gpus_per_worker", "array.items[3].gpusPerWorker"),
        ("items[0].elastic.max_workers", "array.items[0].elastic.maxWorkers"),
        ("items", "array"),
        ("team", "metadata.team"),
        ("name", "metadata.name"),
    ],
)
def test_server_fields_map_back_to_the_spec(api, path):
    assert array_path_for(api) == path
