"""Cluster specs: uniform clusters, spec strings, spot selection, the openb node list."""

from __future__ import annotations

from collections import Counter

import pytest

from scheduler.simulation.cluster import (
    load_openb_nodes,
    parse_cluster,
    sample_nodes,
    uniform_cluster,
)


def test_uniform_cluster_topology():
    c = uniform_cluster(40, 8, nodes_per_rack=16)
    assert c.total_gpus == 320 and c.max_gpus_per_node == 8
    assert Counter(n.rack for n in c.nodes) == {"r0": 16, "r1": 16, "r2": 8}
    assert len({n.nvlink_domain for n in c.nodes}) == 40


def test_parse_cluster_specs():
    assert parse_cluster("80x8").total_gpus == 640
    assert {n.gpu_model for n in parse_cluster("2x4:a100").nodes} == {"a100"}
    with pytest.raises(ValueError):
        parse_cluster("eighty")


def test_spot_fraction_is_seeded():
    c = uniform_cluster(100, 8)
    a = c.with_spot_fraction(0.25, seed=1)
    assert sum(n.spot for n in a.nodes) == 25
    assert a == c.with_spot_fraction(0.25, seed=1)
    assert a != c.with_spot_fraction(0.25, seed=2)


def test_openb_node_list_small(tmp_path):
    path = tmp_path / "nodes.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\nx,1,1,2,T4\ny,1,1,0,\nz,1,1,8,G2\n")
    c = load_openb_nodes(path)
    assert [(n.name, n.gpus, n.gpu_model) for n in c.nodes] == [("x", 2, "T4"), ("z", 8, "G2")]


def test_real_openb_node_list(traces_dir):
    c = parse_cluster("openb")
    assert len(c.nodes) == 1213 and c.total_gpus == 6212
    assert Counter((n.gpu_model, n.gpus) for n in c.nodes)[("G2", 8)] == 549


def test_sample_nodes_keeps_every_nth():
    c = uniform_cluster(10, 8)
    assert [n.name for n in sample_nodes(c, 4).nodes] == ["n0", "n4", "n8"]
    assert sample_nodes(c, 1) is c
