"""An incrementally trained run-time model: scikit-learn's ``SGDRegressor`` on hashed features.

What is predicted is ``log(run seconds)``: run times span four orders of magnitude, and an error
of "twice as long" should cost the same for a ten-minute job as for a two-day one. The features
are categorical (team, user, the job's name with its numbers taken out, image, shape, GPU model)
and their pairs (user and name, team and name, user and image, ...), one-hot through
``FeatureHasher``, so a linear model in log space is an additive mix of "what this user's jobs of
this name usually take" and broader groups that carry a new name or a new user. ``partial_fit``
on each finished job keeps the training cost per job constant; nothing is refitted from scratch.

Guarantees: deterministic (fixed seed; the same jobs learned in the same order give the same
predictions), no clock, no I/O; ``predict_s`` returns None until ``min_samples`` jobs were learned,
so callers keep their own default until then.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# Predictions are clamped to this range: a log-space model extrapolates without bound, and a
# prediction under a minute or over a month is never better than the bound.
MIN_PREDICTION_S = 60.0
MAX_PREDICTION_S = 30 * 86400.0

_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True, slots=True)
class JobDescription:
    """What is known of a job when it is submitted (never how long it ran)."""

    team: str
    user: str = ""
    name: str = ""
    image: str = ""
    workers: int = 1
    gpus_per_worker: int = 1
    gpu_model: str | None = None
    priority_class: str = ""


def name_stem(name: str) -> str:
    """The name with its numbers replaced by ``#``: runs of one experiment (``bert-ft-lr3-run12``,
    ``bert-ft-lr5-run13``) share a stem, so they share what was learned."""
    return _DIGITS.sub("#", name.strip().lower())


def features(job: JobDescription) -> list[str]:
    """The hashed model's input: one string per active one-hot feature."""
    stem = name_stem(job.name)
    gpus = job.workers * job.gpus_per_worker
    shape = f"{job.workers}x{job.gpus_per_worker}"
    team, user = job.team, job.user
    out = [
        f"team={team}",
        f"gpus={gpus}",
        f"shape={shape}",
        f"model={job.gpu_model or '*'}",
        f"class={job.priority_class}",
        f"team={team}|shape={shape}",
    ]
    if user:
        out += [f"user={user}", f"user={user}|shape={shape}"]
    if stem:
        out += [f"name={stem}", f"team={team}|name={stem}", f"name={stem}|shape={shape}"]
        if user:
            out.append(f"user={user}|name={stem}")
        # Words of the name ("finetune", "eval") carry over to names never seen whole.
        out += [f"word={w}" for w in set(re.split(r"[^a-z#]+", stem)) if w and w != "#"]
    if job.image:
        out += [f"image={job.image}", f"team={team}|image={job.image}"]
        if user:
            out.append(f"user={user}|image={job.image}")
    return out


class RuntimeModel:
    """``SGDRegressor`` (squared loss, averaged weights, small L2) over ``FeatureHasher`` features,
    predicting log run seconds relative to the log-mean of the first batch learned.

    The centre keeps the intercept, which SGD learns slowly, near zero from the start; it is
    fixed after the first batch so later batches do not shift what earlier ones taught.
    """

    def __init__(self, *, min_samples: int = 20, n_features: int = 2**18, seed: int = 0) -> None:
        from sklearn.feature_extraction import FeatureHasher
        from sklearn.linear_model import SGDRegressor

        self.min_samples = min_samples
        self.samples = 0
        self._centre: float | None = None
        self._hasher = FeatureHasher(
            n_features=n_features, input_type="string", alternate_sign=False
        )
        # Averaged SGD (ASGD) with a constant step: robust to the order jobs finish in, and it
        # does not freeze as invscaling's decaying step would after months of history.
        self._model = SGDRegressor(
            loss="squared_error",
            penalty="l2",
            alpha=1e-6,
            learning_rate="constant",
            eta0=0.02,
            average=True,
            random_state=seed,
        )

    def learn(self, jobs: Sequence[JobDescription], run_s: Sequence[float]) -> None:
        """Update the model with finished jobs and their run seconds (each > 0)."""
        if len(jobs) != len(run_s):
            raise ValueError("jobs and run_s differ in length")
        if not jobs:
            return
        if any(not (r > 0 and math.isfinite(r)) for r in run_s):
            raise ValueError("run_s must be finite and > 0")
        logs = [math.log(r) for r in run_s]
        if self._centre is None:
            self._centre = sum(logs) / len(logs)
        x = self._hasher.transform(features(j) for j in jobs)
        y = [v - self._centre for v in logs]
        # Several passes over a batch: with a constant step one pass under-fits a new group.
        for _ in range(3):
            self._model.partial_fit(x, y)
        self.samples += len(jobs)

    @property
    def ready(self) -> bool:
        return self.samples >= self.min_samples and self._centre is not None

    def predict_s(self, jobs: Iterable[JobDescription]) -> list[float | None]:
        """Predicted run seconds of each job (clamped to [1 min, 30 days]); all None while fewer
        than ``min_samples`` jobs were learned."""
        batch = list(jobs)
        if not batch:
            return []
        if not self.ready or self._centre is None:
            return [None] * len(batch)
        # Jobs that differ only in their names' numbers (an array, a sweep) have the same
        # features: predict each distinct one once.
        keys = [
            (
                j.team,
                j.user,
                name_stem(j.name),
                j.image,
                j.workers,
                j.gpus_per_worker,
                j.gpu_model,
                j.priority_class,
            )
            for j in batch
        ]
        first: dict[tuple, JobDescription] = {}
        for k, j in zip(keys, batch, strict=True):
            first.setdefault(k, j)
        x = self._hasher.transform(features(j) for j in first.values())
        centre = self._centre
        by_key = {
            k: min(MAX_PREDICTION_S, max(MIN_PREDICTION_S, math.exp(float(v) + centre)))
            for k, v in zip(first, self._model.predict(x), strict=True)
        }
        return [by_key[k] for k in keys]


def accuracy(predicted_s: Sequence[float], actual_s: Sequence[float]) -> dict[str, float]:
    """Median absolute error (seconds), median ratio error (max(p/a, a/p)) and the share of
    predictions within 2x of the actual run time."""
    if len(predicted_s) != len(actual_s):
        raise ValueError("predicted_s and actual_s differ in length")
    n = len(actual_s)
    if n == 0:
        return {"jobs": 0, "median_abs_error_s": math.nan, "median_ratio": math.nan, "within_2x": 0}
    abs_err = sorted(abs(p - a) for p, a in zip(predicted_s, actual_s, strict=True))
    ratios = sorted(max(p / a, a / p) for p, a in zip(predicted_s, actual_s, strict=True))
    return {
        "jobs": n,
        "median_abs_error_s": _median(abs_err),
        "median_ratio": _median(ratios),
        "within_2x": sum(r <= 2.0 for r in ratios) / n,
    }


def _median(ordered: list[float]) -> float:
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2
