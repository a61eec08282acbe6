"""The engine configuration: one definition of its fields (``scheduler.policy.fields``) from
which the codec validates and encodes and docs/policy.md's table is written; the ``las``
section, where ``null`` turns a rule off; today's flat ``las_*`` keys still read for one release,
each with a DeprecationWarning naming its replacement, into the same configuration."""

import copy
import json
import warnings
from dataclasses import fields
from pathlib import Path

import pytest

from scheduler.policy import (
    QUEUE_ORDERS,
    Config,
    Las,
    SnapshotError,
    config_deprecations,
    config_from_dict,
    config_to_dict,
    snapshot_from_dict,
    snapshot_to_dict,
)
from scheduler.policy.fields import FIELDS, LEGACY, MAX_LAS_THRESHOLDS, docs_table

from .test_codec import CONTRACT_EXAMPLE

ROOT = Path(__file__).resolve().parents[3]

# The configuration before the las section, at its defaults, in today's flat keys.
TODAYS_DEFAULTS = {
    "las_thresholds_gpu_s": [3600, 36000, 360000, 5000000],
    "las_fifo_one_node": True,
    "las_fifo_after_s": 600,
    "las_defragment": True,
    "las_reserve_after_s": 86400,
    "las_lowest_queue_first": True,
    "las_bottom_fifo": True,
    "las_fifo_from_gpu_s": 360000,
    "las_long_run_s": 0,
}


def test_every_dataclass_field_has_one_definition_and_the_docs_table_is_written_from_it():
    want = {f.name for f in fields(Config)} | {f"las.{f.name}" for f in fields(Las)}
    assert sorted(f.key for f in FIELDS) == sorted(want)
    docs = (ROOT / "docs" / "policy.md").read_text()
    assert docs_table() in docs, "docs/policy.md's config table differs from fields.docs_table()"
    for f in FIELDS:
        assert f.meaning, f.key


def _changed(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, str):
        return next(q for q in QUEUE_ORDERS if q != value)
    if isinstance(value, tuple):
        return [7200.0]
    if value is None:
        return 7
    if isinstance(value, int):
        return value + 1
    return 0.75 if value <= 1 else value * 2 + 1


def _get(config: Config, key: str):
    section, _, name = key.rpartition(".")
    return getattr(config.las if section else config, name)


@pytest.mark.parametrize("f", [f for f in FIELDS if f.kind != "section"], ids=lambda f: f.key)
def test_every_field_is_decoded_and_encoded_so_no_setting_is_silently_dropped(f):
    # SCHEDULER_POLICY, policy versions, --engine-config and snapshots all go through the codec:
    # a field without a decoder would be accepted and ignored. Every field must change, and
    # come back from its JSON.
    value = _changed(_get(Config(), f.key))
    data = {"las": {f.name: value}} if f.section else {f.key: value}
    config = config_from_dict(data)
    assert _get(config, f.key) == (tuple(value) if isinstance(value, list) else value)
    assert config_from_dict(json.loads(json.dumps(config_to_dict(config)))) == config
    if f.nullable:
        off = {"las": {f.name: None}} if f.section else {f.key: None}
        assert _get(config_from_dict(off), f.key) is None


def test_las_section_round_trips_in_a_snapshot_and_null_turns_it_off():
    data = copy.deepcopy(CONTRACT_EXAMPLE)
    data["config"]["las"] = {
        "thresholds_gpu_s": [3600, 36000.5],
        "fifo_one_node_after_s": None,
        "defragment": False,
        "reserve_after_s": None,
        "bottom_fifo_queues": 1,
        "long_run_s": 172800,
    }
    data["config"]["victims_lowest_rank_first"] = False
    s = snapshot_from_dict(data)
    assert s.config.las == Las((3600.0, 36000.5), None, False, None, 1, 172800.0)
    assert s.config.victims_lowest_rank_first is False
    assert snapshot_from_dict(json.loads(json.dumps(snapshot_to_dict(s)))) == s
    data["config"]["las"] = None
    s = snapshot_from_dict(data)
    assert s.config.las is None
    assert snapshot_to_dict(s)["config"]["las"] is None
    assert snapshot_from_dict(json.loads(json.dumps(snapshot_to_dict(s)))) == s


@pytest.mark.parametrize(
    ("las", "message"),
    [
        (3, "config.las: must be an object"),
        ({"thresholds_gpu_s": []}, "config.las.thresholds_gpu_s: must not be empty"),
        ({"thresholds_gpu_s": [10, 5]}, "config.las.thresholds_gpu_s[1]: must be greater than"),
        ({"fifo_one_node_after_s": "x"}, "config.las.fifo_one_node_after_s: must be a number"),
        ({"fifo_one_node_after_s": -1}, "config.las.fifo_one_node_after_s: must be >= 0"),
        ({"reserve_after_s": 0}, "config.las.reserve_after_s: must be > 0"),
        ({"bottom_fifo_queues": 0}, "config.las.bottom_fifo_queues: must be >= 1"),
        ({"bottom_fifo_queues": 1.5}, "config.las.bottom_fifo_queues: must be an integer"),
        ({"long_run_s": -1}, "config.las.long_run_s: must be >= 0"),
        ({"long_run_s": 0}, "config.las.long_run_s: must be > 0"),
        ({"defragment": None}, "config.las.defragment: must be true or false"),
    ],
)
def test_las_fields_are_validated_by_name(las, message):
    with pytest.raises(SnapshotError) as err:
        config_from_dict({"las": las})
    assert str(err.value).startswith(message)
    data = copy.deepcopy(CONTRACT_EXAMPLE)
    data["config"]["las"] = las
    with pytest.raises(SnapshotError) as err:
        snapshot_from_dict(data)
    assert str(err.value).startswith(message)


def test_config_from_dict_changes_a_base_and_refuses_unknown_fields():
    base = Config(reservations_per_model=2, las=Las(defragment=False))
    c = config_from_dict({"las": {"long_run_s": 5}, "backfill": False}, base=base)
    assert (c.backfill, c.reservations_per_model) == (False, 2)
    assert c.las == Las(defragment=False, long_run_s=5.0)  # the section changes field by field
    assert config_from_dict({"las": None}, base=base).las is None
    assert config_from_dict({"las": {"long_run_s": 5}}, base=Config(las=None)).las == Las(
        long_run_s=5.0
    )
    assert config_from_dict({}) == Config()
    with pytest.raises(SnapshotError, match=r"^candidate.las_treshold: unknown config field$"):
        config_from_dict({"las_treshold": 1}, path="candidate")
    with pytest.raises(SnapshotError, match=r"^candidate.las.treshold: unknown config field$"):
        config_from_dict({"las": {"treshold": 1}}, path="candidate")
    with pytest.raises(SnapshotError, match=r"^config.min_health: must be <= 1$"):
        config_from_dict({"min_health": 2})
    with pytest.raises(SnapshotError, match=r"^config: must be an object$"):
        config_from_dict([1])


def test_todays_defaults_in_flat_keys_are_the_default_configuration():
    # All but the one-node FIFO rule: on at 600 s in the flat keys' release, off by default now.
    with pytest.warns(DeprecationWarning):
        assert config_from_dict(TODAYS_DEFAULTS) == Config(las=Las(fifo_one_node_after_s=600.0))
    # The flat switch alone turns the rule on as it did then; false turns it off.
    with pytest.warns(DeprecationWarning):
        assert config_from_dict({"las_fifo_one_node": True}).las == Las(fifo_one_node_after_s=600)
    with pytest.warns(DeprecationWarning):
        assert config_from_dict({"las_fifo_one_node": False}) == Config()


@pytest.mark.parametrize(
    ("flat", "expected"),
    [
        ({"las_thresholds_gpu_s": []}, Config(las=None)),
        ({"las_thresholds_gpu_s": [], "las_long_run_s": 5}, Config(las=None)),
        ({"las_thresholds_gpu_s": [7200]}, Config(las=Las((7200.0,), bottom_fifo_queues=1))),
        ({"las_fifo_one_node": False}, Config(las=Las(fifo_one_node_after_s=None))),
        ({"las_fifo_after_s": 30}, Config(las=Las(fifo_one_node_after_s=30.0))),
        (
            {"las_fifo_one_node": False, "las_fifo_after_s": 30},
            Config(las=Las(fifo_one_node_after_s=None)),
        ),
        ({"las_defragment": False}, Config(las=Las(defragment=False))),
        ({"las_reserve_after_s": 0}, Config(las=Las(reserve_after_s=None))),
        ({"las_reserve_after_s": 100}, Config(las=Las(reserve_after_s=100.0))),
        ({"las_lowest_queue_first": False}, Config(victims_lowest_rank_first=False)),
        ({"las_bottom_fifo": False}, Config(las=Las(bottom_fifo_queues=None))),
        # the queues a job enters at this many GPU-s or more (of five), and the last in any case
        ({"las_fifo_from_gpu_s": 36000}, Config(las=Las(bottom_fifo_queues=3))),
        ({"las_fifo_from_gpu_s": 0}, Config(las=Las(bottom_fifo_queues=5))),
        ({"las_fifo_from_gpu_s": 1e12}, Config(las=Las(bottom_fifo_queues=1))),
        (
            {"las_thresholds_gpu_s": [3600, 36000, 360000], "las_long_run_s": 172800},
            Config(las=Las((3600.0, 36000.0, 360000.0), bottom_fifo_queues=1, long_run_s=172800.0)),
        ),
        ({"las_long_run_s": 0}, Config()),
        ({"las_long_run_s": 172800}, Config(las=Las(long_run_s=172800.0))),
    ],
)
def test_todays_flat_keys_translate_with_a_warning_naming_the_replacement(flat, expected):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert config_from_dict(flat, path="SCHEDULER_POLICY") == expected
    messages = sorted(str(w.message) for w in caught if w.category is DeprecationWarning)
    assert messages == config_deprecations(flat, "SCHEDULER_POLICY")
    assert messages == [
        f"SCHEDULER_POLICY.{key} is deprecated: use {LEGACY[key]}" for key in sorted(flat)
    ]


def test_flat_keys_in_a_snapshot_translate_too_and_keep_their_old_checks():
    data = copy.deepcopy(CONTRACT_EXAMPLE)
    data["config"]["las_thresholds_gpu_s"] = [3600, 36000.5]
    with pytest.warns(DeprecationWarning, match="config.las_thresholds_gpu_s is deprecated"):
        s = snapshot_from_dict(data)
    assert s.config.las == Las(thresholds_gpu_s=(3600.0, 36000.5), bottom_fifo_queues=1)
    for key in ("las_reserve_after_s", "las_fifo_from_gpu_s", "las_long_run_s"):
        data = copy.deepcopy(CONTRACT_EXAMPLE)
        data["config"][key] = -1
        with pytest.warns(DeprecationWarning), pytest.raises(SnapshotError) as err:
            snapshot_from_dict(data)
        assert str(err.value) == f"config.{key}: must be >= 0"


def test_a_flat_key_given_with_its_replacement_is_refused():
    with pytest.warns(DeprecationWarning), pytest.raises(SnapshotError) as err:
        config_from_dict({"las_long_run_s": 5, "las": {"long_run_s": 6}})
    assert str(err.value) == "config.las_long_run_s: given with its replacement las.long_run_s"
    with pytest.warns(DeprecationWarning), pytest.raises(SnapshotError) as err:
        config_from_dict({"las_lowest_queue_first": False, "victims_lowest_rank_first": True})
    assert "given with its replacement victims_lowest_rank_first" in str(err.value)


def test_the_decide_command_names_a_flat_key_on_stderr_and_decides_as_before(tmp_path, capsys):
    from scheduler.policy.__main__ import main

    new = copy.deepcopy(CONTRACT_EXAMPLE)
    new["config"]["las"] = {"long_run_s": 7200}
    flat = copy.deepcopy(CONTRACT_EXAMPLE)
    flat["config"]["las_long_run_s"] = 7200
    outputs = []
    for name, data in (("new", new), ("flat", flat)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(data))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            assert main(["decide", str(path)]) == 0
        outputs.append(capsys.readouterr())
    assert outputs[0].out == outputs[1].out and outputs[0].err == ""
    assert outputs[1].err == (
        "warning: config.las_long_run_s is deprecated: use las.long_run_s (0 is null)\n"
    )


COUNTS = [f for f in FIELDS if f.kind == "integer"]


def test_every_count_has_an_upper_bound():
    # A count without one took 1e30 (stored, audited, replayed): every integer field of the
    # configuration, and the thresholds' number, states its largest value.
    assert COUNTS, "no integer field left to check"
    assert all(f.high is not None for f in COUNTS), [f.key for f in COUNTS if f.high is None]
    assert all(f.high is not None for f in FIELDS if f.kind == "thresholds")


@pytest.mark.parametrize("f", COUNTS, ids=lambda f: f.key)
@pytest.mark.parametrize("absurd", [1e30, 10**30, "bound + 1"])
def test_an_absurd_count_is_refused_naming_the_field_and_the_bound_is_accepted(f, absurd):
    assert f.high is not None
    bound = int(f.high)
    value = bound + 1 if absurd == "bound + 1" else absurd
    data = {"las": {f.name: value}} if f.section else {f.key: value}
    with pytest.raises(SnapshotError) as err:
        config_from_dict(data)
    assert str(err.value) == f"config.{f.key}: must be <= {bound}"
    snapshot = copy.deepcopy(CONTRACT_EXAMPLE)
    snapshot["config"].update(data)
    with pytest.raises(SnapshotError, match=f"config.{f.key}: must be <= {bound}"):
        snapshot_from_dict(snapshot)
    at_bound = {"las": {f.name: bound}} if f.section else {f.key: bound}
    assert _get(config_from_dict(at_bound), f.key) == bound


def test_too_many_las_thresholds_are_refused_also_in_todays_flat_key():
    th = [float(k + 1) for k in range(MAX_LAS_THRESHOLDS)]
    assert config_from_dict({"las": {"thresholds_gpu_s": th}}).las.thresholds_gpu_s == tuple(th)
    too_many = [*th, th[-1] + 1]
    with pytest.raises(SnapshotError) as err:
        config_from_dict({"las": {"thresholds_gpu_s": too_many}})
    assert str(err.value) == (
        f"config.las.thresholds_gpu_s: must have at most {MAX_LAS_THRESHOLDS} thresholds"
    )
    with pytest.warns(DeprecationWarning), pytest.raises(SnapshotError, match="at most"):
        config_from_dict({"las_thresholds_gpu_s": too_many})


def test_the_bounds_keep_every_default():
    # Bounds that refused a default (or a variant the benchmarks run) would change decisions.
    config = Config()
    for f in COUNTS:
        value = _get(config, f.key)
        assert value is None or value <= f.high, f.key
    assert len(Las().thresholds_gpu_s) <= MAX_LAS_THRESHOLDS
