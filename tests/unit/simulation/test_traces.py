"""Trace loaders (on small traces of our own and on the first rows of the real files) and the
synthetic generator."""

from __future__ import annotations

from collections import Counter

import pytest

from scheduler.simulation.traces import (
    assign_tenant,
    detect_format,
    generate_synthetic,
    load_itp,
    load_openb,
    load_trace,
    scale_arrivals,
)

ITP = "microsoft-itp-elasticflow/cluster04.csv"
OPENB = "alibaba-gpu-v2023-openb/openb_pod_list_default.csv"


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_itp_loader_reads_rows_sorted_with_seeded_tenants(tmp_path):
    path = write(
        tmp_path,
        "c.csv",
        "job_id,submission_time,duration,num_gpu\nb,20,700,8\na,10,600,1\nc,30,900,16\n",
    )
    jobs = load_itp(path, seed=3)
    assert [j.id for j in jobs] == ["a", "b", "c"]
    assert [(j.submit, j.duration, j.gpus) for j in jobs] == [
        (10, 600, 1),
        (20, 700, 8),
        (30, 900, 16),
    ]
    assert [j.tenant for j in jobs] == [assign_tenant(i, 3) for i in "abc"]
    assert load_itp(path, seed=3) == jobs
    assert [j.id for j in load_itp(path, max_jobs=2)] == ["a", "b"]


def test_itp_loader_rejects_bad_rows(tmp_path):
    path = write(tmp_path, "c.csv", "job_id,submission_time,duration,num_gpu\na,1,0,1\n")
    with pytest.raises(ValueError, match="duration"):
        load_itp(path)


def test_openb_loader_skips_cpu_and_unscheduled_and_parses_spec(tmp_path):
    path = write(
        tmp_path,
        "p.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
        "creation_time,deletion_time,scheduled_time\n"
        "p0,1000,1,1,500,,LS,Running,0,100,5\n"
        "p1,1000,1,0,0,,BE,Running,1,100,1\n"
        "p2,1000,1,2,1000,V100M32|V100M16,LS,Succeeded,2,50,10\n"
        "p3,1000,1,1,1000,,BE,Pending,3,100,\n",
    )
    jobs = load_openb(path)
    assert [(j.id, j.gpus, j.duration, j.models) for j in jobs] == [
        ("p0", 1, 95.0, None),
        ("p2", 2, 40.0, ("V100M16", "V100M32")),
    ]
    assert detect_format(path) == "openb"


def test_openb_loader_refuses_lists_without_times(tmp_path):
    path = write(tmp_path, "m.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,1000\n")
    with pytest.raises(ValueError, match="timestamps"):
        load_openb(path)


def test_synthetic_is_deterministic_and_seed_dependent():
    a = generate_synthetic(50, seed=1)
    assert a == generate_synthetic(50, seed=1)
    assert a != generate_synthetic(50, seed=2)
    assert len(a) == 50 and all(j.duration >= 60 and j.gpus >= 1 for j in a)
    assert list(a) == sorted(a, key=lambda j: j.submit)


def test_real_itp_first_rows(traces_dir):
    jobs = load_trace(traces_dir / ITP, max_jobs=20)
    assert len(jobs) == 20
    assert jobs[0].id == "c9c620ea-4336-c1a9-8abe-e26bd13076b8"
    assert (jobs[0].submit, jobs[0].duration, jobs[0].gpus) == (5810.0, 288476.0, 16)


def test_real_itp_benchmark_window(traces_dir):
    jobs = load_itp(traces_dir / ITP, max_submit=2246340)
    assert len(jobs) == 10098
    assert Counter(j.gpus for j in jobs) == {
        1: 7997,
        2: 102,
        4: 463,
        8: 1318,
        16: 48,
        32: 166,
        64: 4,
    }


def test_real_openb_first_rows(traces_dir):
    jobs = load_trace(traces_dir / OPENB, max_jobs=30)
    assert len(jobs) == 30
    assert jobs[0].id == "openb-pod-0000" and jobs[0].duration == 12537496.0
    assert all(1 <= j.gpus <= 8 for j in jobs)


def test_scale_arrivals_compresses_relative_to_the_first_job():
    trace = generate_synthetic(10, seed=1)
    scaled = scale_arrivals(trace, 0.5)
    assert scaled[0].submit == trace[0].submit
    for a, b in zip(trace, scaled, strict=True):
        assert b.submit - trace[0].submit == pytest.approx((a.submit - trace[0].submit) / 2)
        assert (a.id, a.duration, a.gpus) == (b.id, b.duration, b.gpus)
    with pytest.raises(ValueError):
        scale_arrivals(trace, 0)
