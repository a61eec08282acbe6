"""An incrementally trained run-time model: a backed-off group median, corrected by
scikit-learn's ``SGDRegressor`` on hashed features.

What is predicted is ``log(run seconds)``: run times span four orders of magnitude, and an error
of "twice as long" should cost the same for a ten-minute job as for a two-day one.

- **Base:** the median log run time of the last ``HISTORY_RUNS`` finished jobs of the job's most
  specific group with at least ``MIN_GROUP_RUNS`` (within the job's team: the same user and name,
  name, user and image, user and shape, shape, user, the team; then the shape across teams);
  the centre (the log-mean of the first batch learned) when no group has that many.
- **Correction:** ``SGDRegressor`` (``partial_fit`` on each batch) learns ``log(run) - base``
  from one-hot features through ``FeatureHasher``: GPU count, shape, GPU model and class shared
  by all teams; within the team, the team, user, the job's name with its numbers taken out, the
  name's words, image and their pairs; and which group the base came from.

Teams learn from each other only what identifies no job (shapes, GPU models, classes): the
predictions show (in estimated starts, deadline warnings), and a name, an image or a user pooled
across teams would let one team learn that another runs such a job and for how long.

``history=False`` drops the base (the centre for every job): the model as first landed, which
had to learn each group's level weight by weight with a small step and fell far below a median on
some traces (docs/prediction.md); kept for comparison.

A job's own run time never takes part in its own prediction: each job of a batch gets its base
before its run joins its groups, as it would have at submission. Training costs the same per job
however long the history; nothing is refitted.

Guarantees: deterministic (fixed seed; the same jobs learned in the same order give the same
predictions), no clock, no I/O; memory bounded by ``MAX_GROUPS`` groups of ``HISTORY_RUNS`` runs;
``predict_s`` returns None until ``min_samples`` jobs were learned, so callers keep their own
default until then.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# Predictions are clamped to this range: a log-space model extrapolates without bound, and a
# prediction under a minute or over a month is never better than the bound.
MIN_PREDICTION_S = 60.0
MAX_PREDICTION_S = 30 * 86400.0

_DIGITS = re.compile(r"\d+")

# A group's base is the median of its last HISTORY_RUNS runs, once it has MIN_GROUP_RUNS: recent
# enough to follow an experiment that changed, long enough to ignore one odd run. Chosen before
# any measurement, not tuned.
HISTORY_RUNS = 32
MIN_GROUP_RUNS = 3
# Least recently updated groups are forgotten past this many (a long-lived loop's memory).
MAX_GROUPS = 100_000


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
    """The hashed model's input: one string per active one-hot feature. Only what identifies no
    job is shared across teams (GPU count, shape, GPU model, class); a user, a name, its words
    and an image are features only within their team (``team=<slug>|...``), so what one team's
    runs teach about a name never moves another team's prediction."""
    stem = name_stem(job.name)
    gpus = job.workers * job.gpus_per_worker
    shape = f"{job.workers}x{job.gpus_per_worker}"
    t = f"team={job.team}"
    user = job.user
    out = [
        t,
        f"gpus={gpus}",
        f"shape={shape}",
        f"model={job.gpu_model or '*'}",
        f"class={job.priority_class}",
        f"{t}|shape={shape}",
    ]
    if user:
        out += [f"{t}|user={user}", f"{t}|user={user}|shape={shape}"]
    if stem:
        out += [f"{t}|name={stem}", f"{t}|name={stem}|shape={shape}"]
        if user:
            out.append(f"{t}|user={user}|name={stem}")
        # Words of the name ("finetune", "eval") carry over to names never seen whole.
        out += [f"{t}|word={w}" for w in set(re.split(r"[^a-z#]+", stem)) if w and w != "#"]
    if job.image:
        out.append(f"{t}|image={job.image}")
        if user:
            out.append(f"{t}|user={user}|image={job.image}")
    return out


def groups(job: JobDescription) -> list[tuple[str, str]]:
    """The groups whose past runs describe ``job``, most specific first, as ``(level, key)``.
    Every group but the last is the job's team's (its key starts with the team); only the shape
    (workers x GPUs and GPU model), which identifies no job, pools every team's runs."""
    stem = name_stem(job.name)
    shape = f"{job.workers}x{job.gpus_per_worker}@{job.gpu_model or '*'}"
    team, user = job.team, job.user
    out = []
    if stem:
        if user:
            out.append(("user+name", f"{team}|{user}|{stem}"))
        out.append(("team+name", f"{team}|{stem}"))
    if user and job.image:
        out.append(("user+image", f"{team}|{user}|{job.image}"))
    if user:
        out.append(("user+shape", f"{team}|{user}|{shape}"))
    out.append(("team+shape", f"{team}|{shape}"))
    if user:
        out.append(("user", f"{team}|{user}"))
    out += [("team", team), ("shape", shape)]
    return out


def _median(ordered: list[float]) -> float:
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2


class RuntimeModel:
    """``SGDRegressor`` (squared loss, averaged weights, small L2) over ``FeatureHasher``
    features, in log run seconds relative to a base: the centre (the log-mean of the first batch
    learned), or with ``history=True`` the job's group median where a group has one.

    The centre keeps the intercept, which SGD learns slowly, near zero from the start, and is
    fixed after the first batch so later batches do not shift what earlier ones taught.
    """

    def __init__(
        self,
        *,
        min_samples: int = 20,
        n_features: int = 2**18,
        seed: int = 0,
        history: bool = True,
    ) -> None:
        from sklearn.feature_extraction import FeatureHasher
        from sklearn.linear_model import SGDRegressor

        self.min_samples = min_samples
        self.samples = 0
        self.history = history
        self._centre: float | None = None
        # group key -> its last HISTORY_RUNS log run times, least recently updated first
        self._groups: OrderedDict[str, deque[float]] = OrderedDict()
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

    def _base(self, job: JobDescription, centre: float) -> tuple[str, float]:
        """The level and log median of the most specific group with ``MIN_GROUP_RUNS`` runs (the
        centre when none has): what the model starts from for this job."""
        if self.history:
            for level, key in groups(job):
                runs = self._groups.get(f"{level}={key}")
                if runs is not None and len(runs) >= MIN_GROUP_RUNS:
                    return level, _median(sorted(runs))
        return "", centre

    def _row(self, job: JobDescription, level: str) -> list[str]:
        # which group the base came from: how far to trust it is learned per level
        return [*features(job), f"base={level}"] if self.history else features(job)

    def _remember(self, job: JobDescription, log_run: float) -> None:
        table = self._groups
        for level, key in groups(job):
            k = f"{level}={key}"
            runs = table.get(k)
            if runs is None:
                runs = table[k] = deque(maxlen=HISTORY_RUNS)
            else:
                table.move_to_end(k)
            runs.append(log_run)
        while len(table) > MAX_GROUPS:
            table.popitem(last=False)

    def learn(self, jobs: Sequence[JobDescription], run_s: Sequence[float]) -> None:
        """Update the model with finished jobs (in the order they finished) and their run seconds
        (each > 0)."""
        if len(jobs) != len(run_s):
            raise ValueError("jobs and run_s differ in length")
        if not jobs:
            return
        if any(not (r > 0 and math.isfinite(r)) for r in run_s):
            raise ValueError("run_s must be finite and > 0")
        logs = [math.log(r) for r in run_s]
        if self._centre is None:
            self._centre = sum(logs) / len(logs)
        centre = self._centre
        rows, y = [], []
        for job, log_run in zip(jobs, logs, strict=True):
            # described before its own run joins its groups: what it looked like at submission
            level, base = self._base(job, centre)
            rows.append(self._row(job, level))
            y.append(log_run - base)
            if self.history:
                self._remember(job, log_run)
        x = self._hasher.transform(rows)
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
        first: dict[tuple[str, str, str, str, int, int, str | None, str], JobDescription] = {}
        for k, j in zip(keys, batch, strict=True):
            first.setdefault(k, j)
        centre = self._centre
        bases, rows = [], []
        for j in first.values():
            level, base = self._base(j, centre)
            bases.append(base)
            rows.append(self._row(j, level))
        x = self._hasher.transform(rows)
        by_key = {
            k: min(MAX_PREDICTION_S, max(MIN_PREDICTION_S, math.exp(float(v) + base)))
            for k, v, base in zip(first, self._model.predict(x), bases, strict=True)
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
