"""The backend as sites run it: as an unprivileged service account, not as root.

docs/backends/slurm.md tells a site to run the platform's Slurm commands as a dedicated account
(here ``gpuplatform-ci``, a system user with no home, on the host and in each root with the same
uid), whose jobs then run as that account, and to give it Slurm's Admin level for drains. Its
login shell must run: jobs get ``--export=NONE``, so slurmd loads the account's login environment
(``su -``) before the batch script, and Slurm 26.05 cancels a job whose environment cannot be
loaded (22.05 and 24.11 ran it without one). Every other Slurm test runs as root, which Slurm lets do anything;
this one drives the accounting clusters (they have a slurmdbd, where admin levels live) through
a prefix that drops to that account, as ``ssh gpuplatform@login-node`` would.
"""

from __future__ import annotations

import grp
import pwd

import pytest

from scheduler.backends.base import BackendJobState, BackendRejected, LiveRun
from scheduler.backends.slurm import SlurmBackend
from tests.integration.slurm.conftest import LocalSlurm, ensure_system_user, run_ref, spec, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions("24.11", "26.05", "22.05")]

ACCOUNT = "gpuplatform-ci"


@pytest.fixture(scope="session")
def service_account(accounting_slurm: LocalSlurm) -> tuple[int, int]:
    ensure_system_user([], ACCOUNT)
    uid, gid = pwd.getpwnam(ACCOUNT).pw_uid, grp.getgrnam(ACCOUNT).gr_gid
    if accounting_slurm.root:
        ensure_system_user(accounting_slurm.prefix, ACCOUNT, uid, gid)
    # In slurmdbd (an account to belong to), with no admin level until a test grants one.
    cluster_name = "gpuplatform-local"
    # (sacctmgr exits 1 with "Nothing new added" when an earlier run added them.)
    add = ("sacctmgr", "-i", "add")
    accounting_slurm.run(*add, "account", ACCOUNT, f"cluster={cluster_name}", check=False)
    accounting_slurm.run(*add, "user", ACCOUNT, f"account={ACCOUNT}", check=False)
    users = accounting_slurm.run("sacctmgr", "-n", "-P", "show", "user", ACCOUNT).stdout
    assert users.startswith(ACCOUNT + "|"), users
    set_admin_level(accounting_slurm, "None")
    return uid, gid


def set_admin_level(cluster: LocalSlurm, level: str) -> None:
    cluster.run("sacctmgr", "-i", "modify", "user", ACCOUNT, "set", f"adminlevel={level}")


def service_account_config(cluster: LocalSlurm, uid: int, gid: int) -> dict:
    """The cluster's backend configuration with every Slurm command run as the account."""
    if cluster.root:
        prefix = ["chroot", f"--userspec={uid}:{gid}", "--groups=", cluster.root]
    else:
        prefix = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]
    return cluster.backend_config(command_prefix=prefix)


def as_service_account(cluster: LocalSlurm, uid: int, gid: int) -> SlurmBackend:
    return SlurmBackend(service_account_config(cluster, uid, gid))


def drained(cluster: LocalSlurm, node: str) -> bool:
    return "DRAIN" in cluster.run("scontrol", "show", "node", node).stdout


def test_jobs_run_as_the_service_account_and_drains_need_admin(
    accounting_slurm: LocalSlurm, service_account, job_id
):
    cluster = accounting_slurm
    backend = as_service_account(cluster, *service_account)
    whoami = cluster.file(f"{job_id}.whoami")
    backend.submit(
        spec(
            job_id, f"id -un > {whoami}; echo trained as $(id -un); exec sleep 300", {"node1": (0,)}
        )
    )

    def status():
        return backend.poll_jobs([run_ref(job_id)])[0]

    # The shell creates the file before `id` writes into it: wait for its line, not the file.
    wait_for(lambda: whoami.exists() and whoami.read_text().endswith("\n"), 30, "the job to start")
    assert whoami.read_text().strip() == ACCOUNT
    assert status().state is BackendJobState.RUNNING
    assert backend.live_runs(job_id) == [LiveRun(job_id, 1)]
    wait_for(lambda: "trained as" in backend.read_log(run_ref(job_id)).text, 10, "its output")
    backend.checkpoint(run_ref(job_id))  # a signal to its own job: allowed
    backend.cancel(run_ref(job_id))
    wait_for(lambda: status().state is BackendJobState.CANCELLED, 30, "the cancel")

    # Below Slurm's Admin level the drain is refused: a refusal that says what to change (the
    # quarantine stays platform-side), not "Slurm unavailable", which the loop would retry.
    # Operator is not enough (it is for the database and reservations).
    set_admin_level(cluster, "Operator")
    wait_for(lambda: admin_level_seen(cluster) == "Operator", 30, "slurmctld to see Operator")
    with pytest.raises(BackendRejected, match="adminlevel=Admin"):
        backend.drain_node("node2", "gpuplatform quarantine: test")
    assert not drained(cluster, "node2")
    # Releasing a node Slurm does not hold drained needs no privilege: nothing to lift. (It
    # was refused, so a node quarantined on the platform's side alone was never released.)
    backend.undrain_node("node2")
    set_admin_level(cluster, "Admin")
    try:
        wait_for(lambda: admin_level_seen(cluster) == "Administrator", 30, "slurmctld: Admin")
        backend.drain_node("node2", "gpuplatform quarantine: test")
        assert drained(cluster, "node2")
        assert {n.name: n.state for n in backend.list_nodes()}["node2"] == "drained"
        backend.undrain_node("node2")
        assert not drained(cluster, "node2")
        assert {n.name: n.state for n in backend.list_nodes()}["node2"] == "ready"
    finally:
        set_admin_level(cluster, "None")
        cluster.run("scontrol", "update", "nodename=node2", "state=undrain", check=False)


def test_node_changes_run_through_their_own_prefix_so_jobs_need_no_admin_level(
    accounting_slurm: LocalSlurm, service_account, job_id
):
    """With ``node_command_prefix`` (a sudo rule at a site; here the cluster's root) the
    account jobs run as keeps no Slurm admin level, so no job's command can drain nodes, and
    the platform's quarantines still reach Slurm."""
    cluster = accounting_slurm
    set_admin_level(cluster, "None")
    wait_for(lambda: admin_level_seen(cluster) == "None", 30, "slurmctld to see no admin level")
    backend = SlurmBackend(
        {
            **service_account_config(cluster, *service_account),
            "node_command_prefix": cluster.prefix,  # root: Slurm lets it change nodes
        }
    )
    try:
        backend.drain_node("node2", "gpuplatform quarantine: test")
        assert drained(cluster, "node2")
        assert {n.name: n.state for n in backend.list_nodes()}["node2"] == "drained"
        backend.undrain_node("node2")
        assert not drained(cluster, "node2")
        # Everything else still runs as the account: its job runs as it.
        whoami = cluster.file(f"{job_id}.whoami")
        backend.submit(spec(job_id, f"id -un > {whoami}; exec sleep 300", {"node1": (0,)}))
        wait_for(
            lambda: whoami.exists() and whoami.read_text().endswith("\n"), 30, "the job to start"
        )
        assert whoami.read_text().strip() == ACCOUNT
        backend.cancel(run_ref(job_id))
    finally:
        cluster.run("scontrol", "update", "nodename=node2", "state=undrain", check=False)


def admin_level_seen(cluster: LocalSlurm) -> str:
    """The service account's admin level as slurmctld holds it (slurmdbd pushes changes)."""
    shown = cluster.run("scontrol", "show", "assoc_mgr", "flags=users", f"users={ACCOUNT}").stdout
    for word in shown.split():
        if word.startswith("AdminLevel="):
            return word.partition("=")[2]
    return ""


@pytest.mark.django_db
def test_a_quarantine_slurm_refused_is_drained_once_the_account_may(
    accounting_slurm: LocalSlurm,
    service_account,
    platform_admin,
    gpu_models,
    django_capture_on_commit_callbacks,
):
    from django.utils import timezone

    from scheduler.backends import reset_backends
    from scheduler.loop.observe import sync_cluster
    from scheduler.models import Cluster, Node
    from scheduler.services import cluster_import_nodes, node_quarantine, node_release

    cluster = accounting_slurm
    reset_backends()
    uid, gid = service_account
    platform_cluster = Cluster.objects.create(
        name="slurm-as-a-service-account",
        backend_kind="slurm",
        backend_config=service_account_config(cluster, uid, gid),
    )
    cluster_import_nodes(cluster=platform_cluster)
    node2 = Node.objects.get(cluster=platform_cluster, name="node2")
    try:
        # The account may not drain: the quarantine holds on the platform's side only.
        with django_capture_on_commit_callbacks(execute=True):
            node_quarantine(user=platform_admin, node_id=node2.pk, reason="xid 79")
        assert not drained(cluster, "node2")
        sync_cluster(platform_cluster, now=timezone.now())  # asked again, refused again
        assert not drained(cluster, "node2")
        # Once the site gives it Admin, the next pass drains it on Slurm too.
        set_admin_level(cluster, "Admin")
        wait_for(lambda: admin_level_seen(cluster) == "Administrator", 30, "slurmctld: Admin")
        sync_cluster(platform_cluster, now=timezone.now())
        assert drained(cluster, "node2")
        assert "xid 79" in cluster.run("scontrol", "show", "node", "node2").stdout
        with django_capture_on_commit_callbacks(execute=True):
            node_release(user=platform_admin, node_id=node2.pk)
        assert not drained(cluster, "node2")
    finally:
        set_admin_level(cluster, "None")
        cluster.run("scontrol", "update", "nodename=node2", "state=undrain", check=False)
        reset_backends()
