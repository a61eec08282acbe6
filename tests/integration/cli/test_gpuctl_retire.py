"""``gpuctl nodes retire|reinstate`` and ``gpuctl clusters [retire|reinstate]`` against a live
server: an admin retires and reinstates; bad usage is exit 2 with nothing sent or changed; a
member gets the API's 403 (exit 1) with nothing changed."""

import json

import pytest

from scheduler.models import Cluster, Node, NodeState

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_admin_retires_and_reinstates_a_node(as_admin):
    retired = as_admin("nodes", "retire", "n1", "-m", "end of lease")
    assert retired.code == 0, retired.err
    assert "node n1 (test): retired" in retired.out
    node = Node.objects.get(name="n1")
    assert node.state == NodeState.RETIRED and node.retire_reason == "end of lease"
    listed = as_admin("nodes", "--state", "retired", "--json")
    assert [n["name"] for n in json.loads(listed.out)] == ["n1"]

    back = as_admin("nodes", "reinstate", "n1", "--json")
    assert back.code == 0, back.err
    assert json.loads(back.out)["state"] == "draining"
    again = as_admin("nodes", "reinstate", "n1")
    assert again.code == 1 and "not retired or retiring" in again.err


def test_a_node_name_two_clusters_use_needs_cluster(as_admin, gpu_models):
    other = Cluster.objects.create(name="old", backend_kind="simulated")
    Node.objects.create(cluster=other, name="n1", gpu_model=gpu_models["h100"], gpu_count=8)
    ambiguous = as_admin("nodes", "retire", "n1")
    assert ambiguous.code == 2
    assert "--cluster" in ambiguous.err and "old, test" in ambiguous.err
    assert not Node.objects.filter(retiring_since__isnull=False).exists()
    chosen = as_admin("nodes", "retire", "n1", "--cluster", "old")
    assert chosen.code == 0, chosen.err
    assert Node.objects.get(cluster=other).state == NodeState.RETIRED
    assert Node.objects.get(cluster__name="test", name="n1").state == NodeState.READY


def test_node_retire_bad_usage_is_exit_2_and_unknown_is_exit_1(as_admin):
    assert as_admin("nodes", "retire").code == 2  # no NAME
    assert as_admin("nodes", "retire", "  ").code == 2
    assert as_admin("nodes", "frob", "n1").code == 2
    too_long = as_admin("nodes", "retire", "n1", "-m", "x" * 301)
    assert too_long.code == 2 and "--reason" in too_long.err
    missing = as_admin("nodes", "retire", "n99")
    assert missing.code == 1 and "no node is named 'n99'" in missing.err
    assert not Node.objects.filter(retiring_since__isnull=False).exists()


def test_an_admin_retires_and_reinstates_a_cluster(as_admin):
    retired = as_admin("clusters", "retire", "test", "-m", "hall closes")
    assert retired.code == 0, retired.err
    assert "cluster test: retired" in retired.out
    assert set(Node.objects.values_list("state", flat=True)) == {NodeState.RETIRED}
    listed = as_admin("clusters")
    assert listed.code == 0 and "retired" in listed.out
    back = as_admin("clusters", "reinstate", "test")
    assert back.code == 0 and "cluster test: in service" in back.out
    assert set(Node.objects.values_list("state", flat=True)) == {NodeState.DRAINING}


def test_cluster_retire_bad_usage_is_exit_2_and_unknown_is_exit_1(as_admin):
    for args in (("clusters", "retire", "a/b"), ("clusters", "retire", ""), ("clusters", "x")):
        assert as_admin(*args).code == 2, args
    assert as_admin("clusters", "retire", "test", "-m", "x" * 301).code == 2
    missing = as_admin("clusters", "retire", "nope")
    assert missing.code == 1 and "no cluster is named 'nope'" in missing.err
    assert Cluster.objects.get(name="test").retiring_since is None


def test_a_member_is_refused_with_nothing_changed(as_alice):
    listed = as_alice("clusters")
    assert listed.code == 0 and "in service" in listed.out
    for args in (("clusters", "retire", "test"), ("nodes", "retire", "n1")):
        denied = as_alice(*args)
        assert denied.code == 1, args
        assert "may not do this" in denied.err, denied.err
    assert Cluster.objects.get(name="test").retiring_since is None
    assert not Node.objects.filter(retiring_since__isnull=False).exists()


@pytest.mark.parametrize("before", [True, False], ids=["cluster-before-action", "after-action"])
def test_cluster_is_honoured_before_or_after_the_action(as_admin, gpu_models, before):
    """``gpuctl nodes --cluster old retire n1`` read ``--cluster`` as the listing's filter and
    the action's own default (None) replaced it: the command said the name was ambiguous."""
    other = Cluster.objects.create(name="old", backend_kind="simulated")
    Node.objects.create(cluster=other, name="n1", gpu_model=gpu_models["h100"], gpu_count=8)

    def run(action: str):
        if before:
            return as_admin("nodes", "--cluster", "old", action, "n1")
        return as_admin("nodes", action, "n1", "--cluster", "old")

    retired = run("retire")
    assert retired.code == 0, retired.err
    assert "node n1 (old): retired" in retired.out
    assert Node.objects.get(cluster=other).state == NodeState.RETIRED
    assert Node.objects.get(cluster__name="test", name="n1").retiring_since is None
    back = run("reinstate")
    assert back.code == 0, back.err
    assert Node.objects.get(cluster=other).state == NodeState.DRAINING


def test_two_different_clusters_around_the_action_are_bad_usage(as_admin, gpu_models):
    other = Cluster.objects.create(name="old", backend_kind="simulated")
    Node.objects.create(cluster=other, name="n1", gpu_model=gpu_models["h100"], gpu_count=8)
    clash = as_admin("nodes", "--cluster", "old", "retire", "n1", "--cluster", "test")
    assert clash.code == 2
    assert "--cluster" in clash.err and "'old'" in clash.err and "'test'" in clash.err
    assert not Node.objects.filter(retiring_since__isnull=False).exists()
    same = as_admin("nodes", "--cluster", "old", "retire", "n1", "--cluster", "old")
    assert same.code == 0, same.err
    assert Node.objects.get(cluster=other).state == NodeState.RETIRED


@pytest.mark.parametrize(
    "listing_filter", [("--state", "ready"), ("--rack", "r1"), ("--gpu-model", "h100-80gb")]
)
def test_a_listing_filter_before_an_action_is_bad_usage_not_ignored(as_admin, listing_filter):
    """``gpuctl nodes --state ready retire n1`` retired n1 whatever its state: the filter was
    read and dropped without a word."""
    refused = as_admin("nodes", *listing_filter, "retire", "n1")
    assert refused.code == 2
    assert listing_filter[0] in refused.err and "nodes retire" in refused.err
    assert not Node.objects.filter(retiring_since__isnull=False).exists()
