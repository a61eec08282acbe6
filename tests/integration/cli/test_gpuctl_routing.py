"""``gpuctl`` and routing across clusters (docs/routing.md, docs/jobspec.md): the routing flags
and ``spec.routing`` reach the job as the contract's routing object, bad values exit 2 naming
the flag or the spec field (locally or from the server's 400), ``show`` says where the job runs
and why there after a real cycle on two clusters, and a resubmission or an array keeps it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.models import Job, JobArray
from tests.integration.routing_setup import make_two_clusters, run_one_cycle


@pytest.fixture
def two_clusters(platform, gpu_models):
    return make_two_clusters(platform, gpu_models)


ROUTED_SPEC = """\
apiVersion: gpuplatform/v1
kind: TrainingJob
metadata:
  name: routed
  team: vision
spec:
  workers: 1
  gpusPerWorker: 1
  gpuModel: h100-80gb
  routing:
    clusters: [test, cloud]
    regions: [eu-west]
    preferClusters: [test]
    maxPricePerGpuHour: 2.5
    spot: false
    commHeavy: true
"""


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return str(path)


def test_routing_flags_reach_the_job(two_clusters, as_alice):
    result = as_alice(
        "submit", "-J", "flags", "-N", "1", "--gpus-per-worker", "1",
        "--cluster", "test", "--cluster", "cloud", "--region", "us-east",
        "--prefer-cluster", "cloud", "--prefer-region", "us-east",
        "--max-price", "1.5", "--spot", "--no-comm-heavy", "--json",
    )  # fmt: skip
    assert result.code == 0, result.err
    body = json.loads(result.out)
    expected = {
        "clusters": ["test", "cloud"],
        "regions": ["us-east"],
        "prefer_clusters": ["cloud"],
        "prefer_regions": ["us-east"],
        "max_price_per_gpu_h": 1.5,
        "spot": True,
        "comm_heavy": False,
    }
    assert body["routing"] == expected
    assert Job.objects.get(pk=body["id"]).routing == expected


def test_the_spec_files_routing_section_and_flags_over_it(two_clusters, as_alice, tmp_path):
    result = as_alice("submit", "-f", write(tmp_path, ROUTED_SPEC), "--json")
    assert result.code == 0, result.err
    job = Job.objects.get(pk=json.loads(result.out)["id"])
    assert job.routing == {
        "clusters": ["test", "cloud"],
        "regions": ["eu-west"],
        "prefer_clusters": ["test"],
        "prefer_regions": [],
        "max_price_per_gpu_h": 2.5,
        "spot": False,
        "comm_heavy": True,
    }
    # a flag replaces the file's value (a list flag the whole list), the rest of the file holds
    again = as_alice(
        "submit", "-f", write(tmp_path, ROUTED_SPEC), "--cluster", "cloud", "--spot", "--json"
    )
    assert again.code == 0, again.err
    routing = Job.objects.get(pk=json.loads(again.out)["id"]).routing
    assert routing["clusters"] == ["cloud"] and routing["spot"] is True
    assert routing["regions"] == ["eu-west"] and routing["max_price_per_gpu_h"] == 2.5


def test_bad_routing_values_exit_2_naming_the_flag_and_send_nothing(two_clusters, as_alice):
    base = ["submit", "-J", "bad", "-N", "1", "--gpus-per-worker", "1"]
    for flags, line in (
        (["--max-price", "cheap"], "error: --max-price: must be a number, not 'cheap'"),
        (["--max-price", "-1"], "error: --max-price: must be >= 0"),
        (["--cluster", "test", "--cluster", "test"], "error: --cluster: 'test' listed twice"),
        (["--region", ""], "error: --region: must be a non-empty string"),
    ):
        result = as_alice(*base, *flags)
        assert result.code == 2, flags
        assert line in result.err, result.err
    assert not Job.objects.exists()


def test_the_servers_400_on_a_routing_name_names_the_flag_or_the_spec_field(
    two_clusters, as_alice, tmp_path
):
    base = ["submit", "-J", "bad", "-N", "1", "--gpus-per-worker", "1"]
    result = as_alice(*base, "--cluster", "test", "--cluster", "tset")
    assert result.code == 2
    assert "error: --cluster: no cluster is named 'tset'" in result.err
    result = as_alice(*base, "--prefer-region", "mars")
    assert result.code == 2
    assert "error: --prefer-region: no cluster is in region 'mars'" in result.err

    spec = ROUTED_SPEC.replace("preferClusters: [test]", "preferClusters: [test, clodu]")
    result = as_alice("submit", "-f", write(tmp_path, spec))
    assert result.code == 2
    assert "error: spec.routing.preferClusters[1]: no cluster is named 'clodu'" in result.err
    assert not Job.objects.exists()


def test_a_misspelt_routing_field_in_the_file_is_refused_locally(gpuctl, tmp_path):
    spec = ROUTED_SPEC.replace("maxPricePerGpuHour", "max_price_per_gpu_h").replace(
        "commHeavy", "commHevy"
    )
    result = gpuctl("submit", "-f", write(tmp_path, spec), "--dry-run")
    assert result.code == 2
    assert (
        "error: spec.routing.max_price_per_gpu_h: unknown field (did you mean "
        "maxPricePerGpuHour?)" in result.err
    )
    assert "error: spec.routing.commHevy: unknown field (did you mean commHeavy?)" in result.err


def test_show_says_where_the_job_runs_and_why_there(two_clusters, as_alice):
    job_id = json.loads(
        as_alice(
            "submit", "-J", "cheap", "-N", "1", "--gpus-per-worker", "1", "--gpu-model",
            "h100-80gb", "-t", "1h", "--spot", "--json",
        ).out
    )["id"]  # fmt: skip
    assert run_one_cycle() == [job_id]
    job = Job.objects.get(pk=job_id)
    (route,) = job.events.filter(kind="routed")

    shown = as_alice("show", str(job_id))
    assert shown.code == 0, shown.err
    region = route.data["region"]
    assert "Cluster:" in shown.out and f"{job.cluster.name} ({region})" in shown.out
    assert "Routing:" in shown.out and "spot=yes" in shown.out
    assert f"Where and why: {route.message}" in shown.out
    for alternative in route.data["alternatives"]:
        assert alternative["pool"] in shown.out
    assert route.data["pool"] in shown.out

    # `get` is the same command; --json carries the routed event with its data
    as_json = json.loads(as_alice("get", str(job_id), "--json").out)
    assert as_json["cluster"] == job.cluster.name
    (routed,) = [e for e in as_json["events"] if e["kind"] == "routed"]
    assert routed["data"]["pool"] == route.data["pool"]

    why = as_alice("why", str(job_id))
    assert f"cluster: {job.cluster.name}" in why.out


def test_a_resubmission_keeps_the_routing(two_clusters, as_alice):
    job_id = json.loads(
        as_alice(
            "submit", "-J", "keep", "-N", "1", "--gpus-per-worker", "1", "--gpu-model",
            "h100-80gb", "--cluster", "cloud", "--no-spot", "--json",
        ).out
    )["id"]  # fmt: skip
    assert run_one_cycle() == [job_id]
    result = as_alice("resubmit", str(job_id), "--json")
    assert result.code == 0, result.err
    again = Job.objects.get(pk=json.loads(result.out)["id"])
    assert again.routing == Job.objects.get(pk=job_id).routing
    assert again.routing["clusters"] == ["cloud"] and again.routing["spot"] is False


def test_an_array_carries_the_routing_to_every_job(two_clusters, as_alice, tmp_path):
    spec = ROUTED_SPEC + "array:\n  count: 3\n"
    result = as_alice("submit", "-f", write(tmp_path, spec), "--cluster", "test", "--json")
    assert result.code == 0, result.err
    jobs = Job.objects.filter(array=JobArray.objects.get()).order_by("array_index")
    assert [j.routing["clusters"] for j in jobs] == [["test"]] * 3
    assert all(j.routing["max_price_per_gpu_h"] == 2.5 for j in jobs)


def test_an_arrays_bad_routing_in_one_index_refuses_the_whole_array(
    two_clusters, as_alice, tmp_path
):
    spec = ROUTED_SPEC + (
        "array:\n  items:\n    - {}\n    - {routing: {clusters: [cloud]}}\n"
        "    - {routing: {clusters: [nowhere]}}\n"
    )
    result = as_alice("submit", "-f", write(tmp_path, spec))
    assert result.code == 2
    assert "error: array.items[2].routing.clusters[0]: no cluster is named 'nowhere'" in result.err
    assert not Job.objects.exists() and not JobArray.objects.exists()
