"""The pure health rules: each rule's penalty and quarantine trigger, configurable overrides, and
the score's guarantees (within 0..1, never raised by more trouble) as properties."""

from hypothesis import given
from hypothesis import strategies as st

from telemetry.health import DEFAULT_RULES, NodeEvidence, evaluate, merge_rules

RULES = merge_rules(None)


def test_a_clean_node_scores_one_and_stays_in_service():
    verdict = evaluate(NodeEvidence(samples=900), RULES)
    assert verdict.score == 1.0
    assert verdict.reasons == ()
    assert verdict.quarantine is None


def test_one_ecc_double_bit_error_quarantines_and_zeroes_the_score():
    verdict = evaluate(NodeEvidence(ecc_dbe=1), RULES)
    assert verdict.score == 0.0
    assert verdict.quarantine == "1 ECC double-bit error(s)"


def test_single_bit_errors_lower_the_score_up_to_a_cap_without_quarantine():
    assert evaluate(NodeEvidence(ecc_sbe=100), RULES).score == 0.9
    many = evaluate(NodeEvidence(ecc_sbe=100_000), RULES)
    assert many.score == 0.7
    assert many.quarantine is None


def test_repeated_xids_quarantine_at_the_third_and_application_xids_are_ignored():
    two = evaluate(NodeEvidence(xid_codes=(74, 74)), RULES)
    assert two.score == 0.6 and two.quarantine is None
    three = evaluate(NodeEvidence(xid_codes=(74, 74, 62)), RULES)
    assert three.quarantine == "3 XID errors (62, 74)"
    apps = evaluate(NodeEvidence(xid_codes=(13, 31, 43, 45, 13)), RULES)
    assert apps.score == 1.0 and apps.quarantine is None


def test_a_critical_xid_quarantines_at_once():
    verdict = evaluate(NodeEvidence(xid_codes=(79,)), RULES)
    assert verdict.quarantine == "critical XID 79"
    assert verdict.score == 0.8


def test_thermal_throttling_penalty_is_proportional_and_quarantines_at_half():
    some = evaluate(NodeEvidence(samples=1000, throttled=200), RULES)
    assert some.score == 0.9 and some.quarantine is None
    assert some.reasons == ("thermal throttling in 20% of samples",)
    half = evaluate(NodeEvidence(samples=1000, throttled=500), RULES)
    assert half.quarantine == "thermal throttling in 50% of samples"
    # Too few samples to judge: no verdict on a node that just came up.
    assert evaluate(NodeEvidence(samples=10, throttled=10), RULES).score == 1.0


def test_job_failures_count_distinct_submitters_and_never_quarantine_by_default():
    verdict = evaluate(NodeEvidence(failed_job_submitters=2), RULES)
    assert verdict.score == 0.8 and verdict.quarantine is None
    assert evaluate(NodeEvidence(failed_job_submitters=10), RULES).score == 0.7


def test_penalties_add_up_and_a_low_score_quarantines_on_its_own():
    verdict = evaluate(
        NodeEvidence(xid_codes=(74, 74), samples=1000, throttled=400, failed_job_submitters=2),
        RULES,
    )
    assert verdict.score == 0.2
    assert verdict.quarantine == "health 0.20 below 0.25"


def test_rules_are_configurable_by_partial_overrides():
    rules = merge_rules({"xid": {"quarantine_at": 2}, "quarantine_below": 0.5})
    assert rules["xid"]["penalty_per_event"] == DEFAULT_RULES["xid"]["penalty_per_event"]
    assert evaluate(NodeEvidence(xid_codes=(74, 74)), rules).quarantine == "2 XID errors (74)"
    lenient = merge_rules({"ecc_dbe": {"quarantine_at": None, "penalty": 0.3}})
    verdict = evaluate(NodeEvidence(ecc_dbe=1), lenient)
    assert verdict.score == 0.7 and verdict.quarantine is None
    assert DEFAULT_RULES["ecc_dbe"]["quarantine_at"] == 1  # the defaults are not mutated


evidence = st.builds(
    NodeEvidence,
    ecc_sbe=st.integers(0, 10_000),
    ecc_dbe=st.integers(0, 5),
    xid_codes=st.lists(st.sampled_from([13, 48, 62, 74, 79, 92]), max_size=8).map(tuple),
    samples=st.integers(0, 2000),
    throttled=st.integers(0, 2000),
    failed_job_submitters=st.integers(0, 6),
)


@given(evidence)
def test_property_score_is_within_zero_and_one(e):
    score = evaluate(e, RULES).score
    assert 0.0 <= score <= 1.0


@given(evidence, st.integers(0, 3), st.integers(0, 3), st.integers(0, 200), st.integers(0, 2))
def test_property_more_trouble_never_raises_the_score(e, dbe, xids, hot, failures):
    worse = NodeEvidence(
        ecc_sbe=e.ecc_sbe + 5,
        ecc_dbe=e.ecc_dbe + dbe,
        xid_codes=e.xid_codes + (74,) * xids,
        samples=e.samples,
        throttled=min(e.samples, e.throttled + hot) if e.samples else e.throttled,
        failed_job_submitters=e.failed_job_submitters + failures,
    )
    if e.samples and e.throttled > e.samples:
        return  # not a coherent observation (more throttled samples than samples)
    assert evaluate(worse, RULES).score <= evaluate(e, RULES).score
    if evaluate(e, RULES).quarantine:
        assert evaluate(worse, RULES).quarantine
