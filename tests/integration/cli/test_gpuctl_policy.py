"""``gpuctl policy`` against a live server: an admin shows the policy, applies a candidate file,
diffs, rolls back and lists the history; a bad field is exit 1 naming it, bad usage exit 2, and a
member gets the API's 404 (exit 1) with nothing changed."""

import json

import pytest

from policyversions.models import PolicyVersion
from tenants.models import Team

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_admin_applies_diffs_and_rolls_back(as_admin, tmp_path):
    shown = as_admin("policy", "show")
    assert shown.code == 0, shown.err
    assert "v1" in shown.out and "vision" in shown.out

    candidate = tmp_path / "candidate.yaml"
    candidate.write_text("engine_config:\n  queue_aging_s: 3600\nteam_weights:\n  nlp: 2.5\n")
    applied = as_admin("policy", "apply", str(candidate), "-m", "nlp needs more")
    assert applied.code == 0, applied.err
    assert "policy v2 is in force" in applied.out
    assert Team.objects.get(slug="nlp").fair_share_weight == 2.5

    diff = as_admin("policy", "diff", "1", "2", "--json")
    assert {(r["key"], r["after"]) for r in json.loads(diff.out)} == {
        ("queue_aging_s", 3600.0),
        ("nlp", 2.5),
    }
    rolled = as_admin("policy", "rollback", "1", "-m", "undo")
    assert rolled.code == 0 and "policy v3 is in force (the content of v1)" in rolled.out
    history = as_admin("policy", "history")
    assert [line.split()[0] for line in history.out.splitlines()[1:]] == ["v3", "v2", "v1"]

    candidate.write_text("engine_config:\n  queue_aging_s: -1\n")
    refused = as_admin("policy", "apply", str(candidate), "-m", "bad")
    assert refused.code == 2
    assert "engine_config.queue_aging_s" in refused.err
    candidate.write_text("engine_config:\n  max_preemption_attempts: 1.0e+30\n")
    refused = as_admin("policy", "apply", str(candidate), "-m", "absurd")
    assert refused.code == 2
    assert "engine_config.max_preemption_attempts: must be <= 100000" in refused.err
    candidate.write_text("team_weight:\n  nlp: 1\n")
    assert as_admin("policy", "apply", str(candidate), "-m", "typo").code == 2
    assert as_admin("policy", "diff", "1", "x").code == 2
    assert PolicyVersion.objects.count() == 3


def test_a_member_gets_not_found(as_alice, tmp_path):
    candidate = tmp_path / "candidate.json"
    candidate.write_text('{"team_weights": {"vision": 9}}')
    assert as_alice("policy", "show").code == 1
    assert as_alice("policy", "apply", str(candidate), "-m", "mine").code == 1
    assert Team.objects.get(slug="vision").fair_share_weight == 2.0
    assert not PolicyVersion.objects.filter(number__gt=1).exists()
