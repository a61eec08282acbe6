"""Reference data every submission reads: GPU models, priority classes, the largest node, whether
any cluster is being retired.

They change a few times a year but were read from the database on every submission (four of its
sixteen queries). Each process keeps what it read for ``TTL_S`` seconds; saving or deleting a GPU
model, a priority class or a node clears it at once in this process, and other processes see the
change within the TTL.

Only facts that let a submission through are cached. A lookup that would reject a request (an
unknown name, a worker larger than any cached node) is asked of the database again before the
error is raised, so a stale cache can delay a new GPU model's or a larger node's use by nothing,
and can at worst accept, for a few seconds, a job whose node shape was just removed: that job
then waits with the policy engine's "does not fit" reason, as it would had it come a moment
earlier.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar, cast

from django.db.models import F, Max, Sum
from django.db.models.signals import post_delete, post_save

from catalogue.models import GpuModel
from tenants.models import PriorityClass

from .models import Cluster, Node

TTL_S = 10.0

_lock = threading.Lock()
_entries: dict[tuple[object, ...], tuple[float, object]] = {}

T = TypeVar("T")


def clear(**_signal_kwargs: object) -> None:
    with _lock:
        _entries.clear()


def _remembered(key: tuple[object, ...], load: Callable[[], T]) -> T:
    now = time.monotonic()
    hit = _entries.get(key)
    if hit is not None and now - hit[0] < TTL_S:
        # Each key is stored by one loader (the key names what it loads): its type.
        return cast(T, hit[1])
    value = load()
    if value is not None:
        with _lock:
            _entries[key] = (now, value)
    return value


def gpu_model_named(name: str) -> GpuModel | None:
    return _remembered(("gpu_model", name), lambda: GpuModel.objects.filter(name=name).first())


def priority_class_named(name: str) -> PriorityClass | None:
    return _remembered(
        ("priority_class", name), lambda: PriorityClass.objects.filter(name=name).first()
    )


def default_priority_class() -> PriorityClass | None:
    """The lowest priority class: what a submission that names none gets."""
    return _remembered(
        ("priority_class_default",), lambda: PriorityClass.objects.order_by("value").first()
    )


def largest_node_gpus(gpu_model: GpuModel | None, *, fresh: bool = False) -> int:
    """GPUs of the largest node in capacity (``Node.objects.in_capacity``: of enabled clusters,
    not retired), of ``gpu_model`` when given."""

    def load() -> int:
        nodes = Node.objects.in_capacity()
        if gpu_model is not None:
            nodes = nodes.filter(gpu_model=gpu_model)
        largest: int | None = nodes.aggregate(m=Max("gpu_count"))["m"]
        return largest or 0

    key = ("largest_node", gpu_model.pk if gpu_model is not None else None)
    return load() if fresh else _remembered(key, load)


def largest_gang_workers(
    gpu_model: GpuModel | None, gpus_per_worker: int, *, fresh: bool = False
) -> int:
    """The most workers of ``gpus_per_worker`` GPUs that the nodes in capacity of one cluster and
    one GPU model (``gpu_model`` when given) hold at once: a gang starts whole, on one cluster and
    one model. Drained and down nodes count, as Slurm counts a partition's configured nodes."""

    def load() -> int:
        nodes = Node.objects.in_capacity()
        if gpu_model is not None:
            nodes = nodes.filter(gpu_model=gpu_model)
        pools = nodes.values("cluster_id", "gpu_model_id").annotate(
            workers=Sum(F("gpu_count") / gpus_per_worker)  # whole workers per node
        )
        return max((row["workers"] or 0 for row in pools), default=0)

    key = ("largest_gang", gpu_model.pk if gpu_model is not None else None, gpus_per_worker)
    return load() if fresh else _remembered(key, load)


def any_cluster_retiring() -> bool:
    """Whether some cluster is retired or being retired (``scheduler.retirement``): when none
    is, no team can be held to retired clusters only, and a submission skips that check. A
    stale True costs the check's queries, which then read the truth; a stale False lets a
    submission through for at most the TTL after a retirement in another process (its job then
    waits with the loop's reason, as one submitted a moment earlier does). Retiring and
    reinstating a cluster clear the cache in their own process."""
    retiring = Cluster.objects.filter(retiring_since__isnull=False).exists
    return bool(_remembered(("any_cluster_retiring",), retiring))


for _model in (GpuModel, PriorityClass, Node, Cluster):
    post_save.connect(clear, sender=_model, dispatch_uid=f"reference-clear-save-{_model.__name__}")
    post_delete.connect(
        clear, sender=_model, dispatch_uid=f"reference-clear-delete-{_model.__name__}"
    )
