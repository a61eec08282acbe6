"""Batch validation is all-or-nothing and names each bad field by its path."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemetry.ingest import BatchInvalid, parse_batch

NOW = 1_764_680_000.0


def sample(**over):
    s = {
        "gpu": 0,
        "time": NOW - 1,
        "utilization": 50.0,
        "memory_used_mib": 100,
        "memory_total_mib": 81559,
        "temperature_c": 60,
        "power_w": 300.0,
    }
    s.update(over)
    return s


def parse(body, **over):
    kw = dict(gpu_count=8, now=NOW, max_samples=100, max_future_s=300, max_age_s=3600)
    kw.update(over)
    return parse_batch(body, **kw)


def errors_of(body, **over) -> dict:
    with pytest.raises(BatchInvalid) as info:
        parse(body, **over)
    return info.value.errors


def test_a_valid_batch_becomes_rows_errors_and_newest_utilization():
    batch = parse(
        {
            "agent": {"version": "1.0", "dropped": 3},
            "samples": [
                sample(gpu=0, time=NOW - 2, utilization=10),
                sample(gpu=0, time=NOW - 1, utilization=20, ecc_sbe=2, xid=[79, 79]),
                sample(gpu=1, time="2025-12-02T12:53:19Z", power_w=None, throttle_thermal=True),
            ],
        },
        max_age_s=10**9,
    )
    assert len(batch.samples) == 3
    assert batch.samples[0] == (0, NOW - 2, 10.0, 100, 81559, 60, 300.0, False)
    assert batch.samples[2][6] is None and batch.samples[2][7] is True
    assert batch.errors == [(0, NOW - 1, "ecc_sbe", None, 2), (0, NOW - 1, "xid", 79, 2)]
    assert batch.latest[0] == (NOW - 1, 20.0)
    assert (batch.agent_version, batch.agent_dropped) == ("1.0", 3)


def test_an_xid_storm_is_one_row_per_code_with_its_count():
    """One row per XID occurrence made a storm (100 codes a sample, every second, per GPU) 100
    rows a sample, kept 30 days and read by every health check."""
    storm = [13] * 60 + [79] + [13] * 39
    batch = parse({"samples": [sample(gpu=2, time=NOW - 1, xid=storm)]})
    assert batch.errors == [(2, NOW - 1, "xid", 13, 99), (2, NOW - 1, "xid", 79, 1)]


def test_the_bad_field_is_named_by_its_path_and_nothing_is_returned():
    samples = [sample(gpu=i) for i in range(3)] + [sample(gpu=3, utilization=140)]
    assert errors_of({"samples": samples}) == {
        "samples[3].utilization": ["must be between 0 and 100"]
    }


@pytest.mark.parametrize(
    ("over", "field", "message"),
    [
        ({"gpu": 8}, "gpu", "must be an integer between 0 and 7"),
        ({"gpu": True}, "gpu", "must be an integer between 0 and 7"),
        ({"time": "yesterday"}, "time", "must be epoch seconds or an ISO 8601 time with a zone"),
        (
            {"time": "2025-12-02T12:00:00"},
            "time",
            "must be epoch seconds or an ISO 8601 time with a zone",
        ),
        (
            {"time": NOW + 3600},
            "time",
            "is too far in the past or the future (check the node's clock)",
        ),
        (
            {"time": NOW - 7200},
            "time",
            "is too far in the past or the future (check the node's clock)",
        ),
        ({"utilization": "50"}, "utilization", "must be between 0 and 100"),
        ({"utilization": -0.1}, "utilization", "must be between 0 and 100"),
        ({"memory_used_mib": 90000}, "memory_used_mib", "must not exceed memory_total_mib"),
        ({"memory_total_mib": 0}, "memory_total_mib", "must be an integer between 1 and 10000000"),
        ({"temperature_c": 400}, "temperature_c", "must be between -40 and 150"),
        ({"power_w": -5}, "power_w", "must be null or between 0 and 5000"),
        ({"ecc_dbe": -1}, "ecc_dbe", "must be an integer >= 0"),
        ({"xid": [0]}, "xid", "each XID code must be a positive integer"),
        ({"xid": 79}, "xid", "must be a list of at most 100 XID codes"),
        ({"throttle_thermal": "yes"}, "throttle_thermal", "must be true or false"),
    ],
)
def test_each_field_is_checked(over, field, message):
    errors = errors_of({"samples": [sample(), sample(**over)]})
    assert errors == {f"samples[1].{field}": [message]}


def test_missing_fields_are_errors():
    s = sample()
    del s["temperature_c"]
    assert "samples[0].temperature_c" in errors_of({"samples": [s]})


def test_batch_shape_errors():
    assert errors_of([]) == {"non_field_errors": ["expected a JSON object"]}
    assert errors_of({"samples": []}) == {"samples": ["must be a non-empty list"]}
    assert errors_of({"samples": [sample()] * 5}, max_samples=4) == {
        "samples": ["at most 4 samples per batch"]
    }
    assert errors_of({"samples": [sample(), 7]}) == {"samples[1]": ["must be an object"]}
    for dropped in (-1, 2**63):  # 2**63 overflowed the 63-bit column (a 500)
        assert errors_of({"agent": {"dropped": dropped}, "samples": [sample()]}) == {
            "agent.dropped": ["must be an integer from 0 to 1,000,000,000,000,000"]
        }
    # a time beyond the float range (float() raised OverflowError)
    assert list(errors_of({"samples": [sample(time=10**309)]})) == ["samples[0].time"]


def test_the_error_report_is_bounded():
    errors = errors_of({"samples": [sample(utilization=-1)] * 100})
    assert len(errors) == 20


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=6,
)
sample_like = st.fixed_dictionaries(
    {},
    optional={
        k: json_values
        for k in ("gpu", "time", "utilization", "memory_used_mib", "memory_total_mib", "xid")
    },
)


@settings(max_examples=60, deadline=None)
@given(json_values | st.fixed_dictionaries({"samples": st.lists(sample_like | json_values)}))
def test_property_any_json_is_either_parsed_or_refused_with_field_errors(body):
    try:
        parse(body)
    except BatchInvalid as exc:
        assert exc.errors and all(isinstance(m, list) and m for m in exc.errors.values())
