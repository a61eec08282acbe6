"""Pure functions that read Slurm's command output about jobs and build what we hand to Slurm
(what Slurm says about nodes is read in :mod:`scheduler.backends.slurm_nodes`).

Nothing here runs a command, reads a clock or touches a file: each function takes text (captured
from ``squeue --json``, ``sinfo --json``, ``sbatch --parsable``, ``sacct -P``, an error message,
``topology.conf``) or a job spec and returns plain values, so all of it is tested on real output
captured from Slurm 22.05 and 24.11 (``tests/unit/backends/fixtures/slurm/<version>/``, recorded
by ``scripts/capture-slurm-fixtures``).

Guarantees:
- ``parse_squeue_json`` / ``parse_sinfo_json`` read both JSON generations (22.05's openapi
  v0.0.38 and the data_parser v0.0.39+ of 23.02 and later), field by field by the shape the output
  has. They raise :class:`SlurmQueryError` when Slurm reports an error inside the JSON (Slurm
  22.05 prints ``{"errors": [...], "jobs": []}`` with exit status 0 when it cannot reach
  slurmctld; reading that as "no jobs" would make every run look lost), and
  :class:`SlurmFormatError`, naming the field, for a shape of neither generation.
- ``classify_error`` sorts an error message into unavailable (retry later), already-done (success
  for idempotent calls) or rejected (do not retry).
- ``build_job_script`` embeds the user's command and environment values only through
  :func:`shlex.quote`; environment names must be shell identifiers and none of the variables a
  container runtime reads to choose a container's GPUs (:func:`core.envvars.env_name_error`).
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from core.envvars import env_name_error
from scheduler.backends.base import (
    DEFAULT_MASTER_PORT,
    BackendJobSpec,
    BackendJobState,
    BackendJobStatus,
    identity_env,
)


class SlurmQueryError(Exception):
    """Slurm answered a query with an error instead of data."""


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """One Slurm job as a query reports it (squeue --json or accounting)."""

    job_id: str
    name: str
    state: str  # Slurm's own state word, upper case: RUNNING, COMPLETED, NODE_FAIL, ...
    reason: str = ""
    nodes: tuple[str, ...] = ()
    exit_code: int | None = None
    signal: int | None = None
    restart_count: int = 0
    required_nodes: tuple[str, ...] = ()
    # Slurm's reason code alone ("ReqNodeNotAvail", "QOSMaxGRESPerUser"; "" for "None"), where
    # ``reason`` is the text shown; and when the job started (epoch seconds; for a pending job
    # Slurm's estimate, so only read for a running one).
    reason_code: str = ""
    start_time: int | None = None
    # The uid of the job's owner; None when the output does not say. On a shared cluster
    # another user may name a job like one of our runs: only our own uid's jobs are ours.
    user_id: int | None = None

    @property
    def numeric_id(self) -> int:
        head = self.job_id.split("_", 1)[0].split("+", 1)[0].split(".", 1)[0]
        return int(head) if head.isdigit() else -1


# ---------------------------------------------------------------------------------------------
# Host lists


_BRACKET = re.compile(r"\[([^\]]*)\]")


def expand_hostlist(expr: str) -> tuple[str, ...]:
    """Expand a Slurm host list (``node[1-3,7],gpu-[01-02]-b``) into names, in order.

    Zero padding is kept (``n[08-10]`` gives ``n08 n09 n10``); several bracket groups in one name
    expand as a product. Empty text and Slurm's ``(null)`` give no names.
    """
    expr = expr.strip()
    if not expr or expr == "(null)":
        return ()
    names: list[str] = []
    for part in _split_top_level(expr):
        names.extend(_expand_one(part))
    return tuple(names)


def _split_top_level(expr: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(expr):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(expr[start:i])
            start = i + 1
    parts.append(expr[start:])
    return [p.strip() for p in parts if p.strip()]


def _expand_one(pattern: str) -> list[str]:
    match = _BRACKET.search(pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    out: list[str] = []
    for piece in match.group(1).split(","):
        piece = piece.strip()
        if "-" in piece:
            low, high = piece.split("-", 1)
            width = len(low)
            for number in range(int(low), int(high) + 1):
                out.extend(_expand_one(f"{head}{number:0{width}d}{tail}"))
        elif piece:
            out.extend(_expand_one(f"{head}{piece}{tail}"))
    return out


# ---------------------------------------------------------------------------------------------
# Submission


def parse_sbatch_parsable(stdout: str) -> str:
    """The job id from ``sbatch --parsable`` output (``"42"`` or ``"42;cluster"``)."""
    for line in stdout.splitlines():
        line = line.strip()
        if line:
            job_id = line.split(";", 1)[0]
            if job_id.isdigit():
                return job_id
    raise SlurmQueryError(f"sbatch printed no job id: {stdout!r}")


def format_time_limit(seconds: int) -> str:
    """Slurm's ``--time`` value (``minutes:seconds``) for a limit in seconds, at least 1 minute."""
    seconds = max(60, int(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


def workers_per_node(spec: BackendJobSpec) -> int:
    """How many workers each placement node runs; the same on every node.

    ``workers == len(placement)`` is one worker per node. Several workers per node (the engine
    packed them) are accepted when every node holds the same number, i.e. ``workers`` is a
    multiple of the node count and each node lists ``workers_per_node * gpus_per_worker`` GPU
    indices. Anything else raises ``ValueError``: one Slurm job has one tasks-per-node value.
    """
    nodes = len(spec.placement)
    if not nodes:
        raise ValueError("placement names no node")
    if spec.workers < nodes or spec.workers % nodes:
        raise ValueError(
            f"{spec.workers} workers on {nodes} nodes: the Slurm backend needs the same number "
            "of workers on every placement node"
        )
    per_node = spec.workers // nodes
    if per_node > 1:
        want = per_node * spec.gpus_per_worker
        uneven = [n for n, gpus in spec.placement.items() if len(gpus) != want]
        if uneven:
            raise ValueError(
                f"{per_node} workers per node need {want} GPUs on each node; "
                f"{', '.join(uneven)} differ: the same number of workers on every node is required"
            )
    return per_node


def build_sbatch_argv(
    spec: BackendJobSpec,
    *,
    log_path: str,
    workdir: str,
    partition: str = "",
    account: str = "",
    extra_args: Iterable[str] = (),
) -> list[str]:
    """The ``sbatch`` argument list for ``spec`` (the script itself goes on stdin).

    The same number of workers on every placement node (:func:`workers_per_node`), all nodes
    named explicitly (``--nodelist`` and ``--nodes``
    equal, so Slurm cannot add or swap a node), ``--no-requeue`` because the platform owns
    requeueing (after a node failure it resumes the job as a new attempt elsewhere; a Slurm-side
    requeue would restart the old attempt once the node came back, whatever a site's
    ``JobRequeue`` default), and ``B:USR1@grace`` so the batch script can checkpoint before a
    time limit.
    Raises ``ValueError`` for a spec Slurm cannot run as asked.
    """
    nodes = list(spec.placement)
    per_node = workers_per_node(spec)
    for node in nodes:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", node):
            raise ValueError(f"not a Slurm node name: {node!r}")
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name={spec.backend_name}",
        f"--nodelist={','.join(nodes)}",
        f"--nodes={len(nodes)}",
        f"--ntasks-per-node={per_node}",
        f"--chdir={workdir}",
        f"--output={log_path}",
        "--open-mode=append",
        "--no-requeue",
        f"--signal=B:USR1@{max(1, min(int(spec.checkpoint_grace_s), 65535))}",
        # The platform's own environment (secrets included) must not leak into jobs.
        "--export=NONE",
        f"--comment=gpuplatform team={spec.team}",
    ]
    if spec.gpus_per_worker > 0:
        argv.append(f"--gres=gpu:{spec.gpus_per_worker * per_node}")
    if spec.runtime_limit_s:
        argv.append(f"--time={format_time_limit(spec.runtime_limit_s)}")
    if partition:
        argv.append(f"--partition={partition}")
    if account:
        argv.append(f"--account={account}")
    argv.extend(extra_args)
    return argv


def build_job_script(
    spec: BackendJobSpec,
    *,
    checkpoint_request_path: str,
    progress_path: str = "",
    container_option: str = "",
) -> str:
    """The batch script for ``spec``: exports our identity, runs the command on every node.

    The command runs once per worker through ``srun`` (worker index = ``SLURM_PROCID``, workers
    numbered in Slurm's node order; with several workers per node each gets its own GPU slice).
    Every worker gets :func:`~scheduler.backends.base.launcher_env`'s variables: the master is
    worker 0's node, which is the node the batch script runs on, and its address is that node's
    ``NodeAddr`` (``scontrol show node``; node names need not resolve), read when the job starts;
    the port is ``29500 + job id % 10000`` so two jobs sharing a master node do not collide.
    USR1 on the batch shell (``scancel --batch --signal=USR1`` or the time-limit warning) touches
    ``$GPUPLATFORM_CHECKPOINT_REQUEST`` and is forwarded to the step, whose processes receive it;
    the script then keeps waiting for the step and exits with its status. In the workers USR1 is
    ignored unless the program handles it, so a launcher that does not know the signal (torchrun's
    agent) survives while the training processes it started checkpoint. After a checkpoint a
    worker may write the seconds of work it saved to ``$GPUPLATFORM_CHECKPOINT_PROGRESS``
    (see :func:`parse_checkpoint_progress`).
    """
    for key in spec.env:
        problem = env_name_error(key)
        if problem:
            raise ValueError(problem)
    q = shlex.quote
    # The job's own variables first; the platform's win a clash (a wrong RANK breaks the gang).
    exports = {
        **dict(spec.env),
        **identity_env(spec),
        "GPUPLATFORM_CHECKPOINT_REQUEST": checkpoint_request_path,
        "GPUPLATFORM_CHECKPOINT_PROGRESS": progress_path,
    }
    per_node = workers_per_node(spec)
    srun = [
        "srun",
        "--export=ALL",
        f"--nodes={len(spec.placement)}",
        f"--ntasks={spec.workers}",
        f"--ntasks-per-node={per_node}",
        "--kill-on-bad-exit=1",
    ]
    if container_option and spec.image:
        srun.append(f"{container_option}={spec.image}")
    # The per-worker half of launcher_env (the rest is exported by the batch script below).
    worker_command = (
        'export GPUPLATFORM_WORKER="$SLURM_PROCID" RANK="$SLURM_PROCID" NODE_RANK="$SLURM_PROCID"'
        ' PET_NODE_RANK="$SLURM_PROCID" GPUPLATFORM_LOCAL_WORKER="$SLURM_LOCALID"\n'
    )
    if spec.gpus_per_worker == 1:
        worker_command += f'export LOCAL_RANK="$SLURM_LOCALID" LOCAL_WORLD_SIZE={per_node}\n'
    # Ignored, not trapped: an ignored signal stays ignored in the programs started below unless
    # they handle it themselves (a trap would be reset to "terminate" by exec).
    worker_command += "trap '' USR1\n"
    if per_node > 1 and spec.gpus_per_worker > 0:
        # Every task of the step sees all the node's GPUs of the job; give each worker its own
        # slice, in local-rank order.
        worker_command += (
            'if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then\n'
            '    IFS=, read -r -a gp_gpus <<< "$CUDA_VISIBLE_DEVICES"\n'
            f"    gp_n={spec.gpus_per_worker}\n"
            '    gp_mine=("${gp_gpus[@]:$((SLURM_LOCALID * gp_n)):gp_n}")\n'
            '    CUDA_VISIBLE_DEVICES=$(IFS=,; echo "${gp_mine[*]}")\n'
            "    export CUDA_VISIBLE_DEVICES\n"
            "fi\n"
        )
    worker_command += spec.command
    srun += ["/bin/bash", "-c", worker_command]
    lines = [
        "#!/bin/bash",
        f"# gpuplatform run {spec.backend_name}; generated, the command below is quoted data.",
        # --export=NONE leaves PATH minimal or empty; srun and the user's tools need one.
        'export PATH="${PATH:-/usr/local/bin:/usr/bin:/bin}:/usr/local/bin:/usr/bin:/bin"',
    ]
    lines += [f"export {key}={q(value)}" for key, value in exports.items()]
    shared = {
        "WORLD_SIZE": str(spec.workers),
        "PET_NNODES": str(spec.workers),
        "GPUPLATFORM_WORKERS": str(spec.workers),
        "GPUPLATFORM_WORKERS_ON_NODE": str(per_node),
    }
    lines += [f"export {key}={q(value)}" for key, value in shared.items()]
    lines += [
        # Worker 0 runs on this node (the first of the allocation): it hosts the rendezvous.
        'gp_addr=$(scontrol show node "$SLURMD_NODENAME" 2>/dev/null'
        " | sed -n 's/.*[[:space:]]NodeAddr=\\([^[:space:]]*\\).*/\\1/p' | head -n 1)",
        'export GPUPLATFORM_MASTER_ADDR="${gp_addr:-$SLURMD_NODENAME}"',
        f"export GPUPLATFORM_MASTER_PORT=$(({DEFAULT_MASTER_PORT} + ${{SLURM_JOB_ID:-0}} % 10000))",
        'export MASTER_ADDR="$GPUPLATFORM_MASTER_ADDR" PET_MASTER_ADDR="$GPUPLATFORM_MASTER_ADDR"',
        'export MASTER_PORT="$GPUPLATFORM_MASTER_PORT" PET_MASTER_PORT="$GPUPLATFORM_MASTER_PORT"',
        "gp_step=",
        "gp_checkpoint() {",
        '    : > "$GPUPLATFORM_CHECKPOINT_REQUEST" 2>/dev/null || true',
        '    if [ -n "$gp_step" ]; then kill -USR1 "$gp_step" 2>/dev/null || true; fi',
        "}",
        "trap gp_checkpoint USR1",
        " ".join(q(arg) for arg in srun) + " &",
        "gp_step=$!",
        # wait returns early (>128) when a trapped signal arrives; keep waiting for the step.
        'wait "$gp_step"; gp_rc=$?',
        'while kill -0 "$gp_step" 2>/dev/null; do wait "$gp_step"; gp_rc=$?; done',
        'exit "$gp_rc"',
        "",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Jobs


def decode_wait_status(raw: int | None) -> tuple[int | None, int | None]:
    """``(exit_code, signal)`` from the wait(2) status squeue 22.05 reports as ``exit_code``."""
    if raw is None:
        return None, None
    signal = raw & 0x7F
    if signal:
        return None, signal
    return (raw >> 8) & 0xFF, None


# ---------------------------------------------------------------------------------------------
# JSON of both generations
#
# Slurm 20.11-23.02 print the openapi v0.0.3x shape (22.05: v0.0.38): plain strings and
# integers, one object per node. Slurm 23.02 and later print the data_parser v0.0.39+ shape
# (24.11: v0.0.42): states are lists of flags, numbers are ``{set, infinite, number}``, exit
# codes are objects, and ``sinfo`` groups nodes in entries. Each field is read by the shape the
# output actually has, so no setting names the version; a shape that is neither raises
# SlurmFormatError naming the field, never a silently empty queue or cluster.


class SlurmFormatError(SlurmQueryError):
    """Slurm printed JSON of a shape this backend does not read (a newer generation)."""


def _load_json(text: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SlurmQueryError(f"{what} printed no JSON: {text[:200]!r}") from exc
    if not isinstance(data, dict):
        raise SlurmFormatError(f"{what}: unsupported output: expected a JSON object")
    errors = data.get("errors") or []
    if errors:
        texts = []
        for err in errors if isinstance(errors, list) else [errors]:
            if isinstance(err, dict):
                texts.append(
                    " / ".join(
                        str(err[k]) for k in ("source", "description", "error") if err.get(k)
                    )
                )
            else:
                texts.append(str(err))
        raise SlurmQueryError(f"{what}: {'; '.join(texts)}")
    return data


def _generation(data: dict[str, Any]) -> str:
    """``Slurm 24.11.5, data_parser/v0.0.42`` from an answer's ``meta`` (best effort)."""
    meta = data.get("meta")
    meta = meta if isinstance(meta, dict) else {}
    plugin = meta.get("plugin")
    plugin = plugin if isinstance(plugin, dict) else {}
    parser = plugin.get("data_parser") or plugin.get("type") or "unknown format"
    slurm = meta.get("slurm") or meta.get("Slurm") or {}
    release = slurm.get("release") if isinstance(slurm, dict) else None
    return f"Slurm {release or '(unknown release)'}, {parser}"


class _Reader:
    """Reads the fields of one command's JSON answer; every complaint names the field."""

    def __init__(self, what: str, data: dict[str, Any]) -> None:
        self.what = what
        self.generation = _generation(data)

    def fail(self, where: str, expected: str, value: object) -> SlurmFormatError:
        shown = json.dumps(value)[:120] if value is not _MISSING else "nothing (missing)"
        return SlurmFormatError(
            f"{self.what}: unsupported output ({self.generation}): {where}: expected {expected}, "
            f"got {shown}"
        )

    def text(self, obj: dict[str, Any], key: str, where: str, *, required: bool = False) -> str:
        value = obj.get(key, _MISSING)
        if value is _MISSING or value is None:
            if required:
                raise self.fail(f"{where}.{key}", "a string", value)
            return ""
        if not isinstance(value, str):
            raise self.fail(f"{where}.{key}", "a string", value)
        return value

    def number(
        self, obj: dict[str, Any], key: str, where: str, *, required: bool = False
    ) -> int | None:
        """A plain integer (v0.0.38) or ``{set, infinite, number}`` (v0.0.39+); None when
        unset or infinite."""
        value = obj.get(key, _MISSING)
        if value is _MISSING or value is None:
            if required:
                raise self.fail(f"{where}.{key}", "a number", value)
            return None
        return self._number(value, f"{where}.{key}")

    def _number(self, value: object, where: str) -> int | None:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, dict) and {"set", "number"} <= set(value):
            number = value["number"]
            if not isinstance(number, int | float) or isinstance(number, bool):
                raise self.fail(f"{where}.number", "a number", number)
            if not value["set"] or value.get("infinite"):
                return None
            return int(number)
        raise self.fail(where, "a number or {set, infinite, number}", value)

    def words(self, obj: dict[str, Any], key: str, where: str) -> list[str]:
        """A state: one word (v0.0.38) or a list of flag words (v0.0.39+)."""
        value = obj.get(key, _MISSING)
        if isinstance(value, str):
            return [value.upper()] if value else []
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return [v.upper() for v in value]
        raise self.fail(f"{where}.{key}", "a string or a list of strings", value)

    def entries(self, data: dict[str, Any], key: str) -> list[dict[str, Any]]:
        value = data.get(key, _MISSING)
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self.fail(key, "a list of objects", value)
        return value


_MISSING = object()

# A job's state word as Slurm 22.05 prints it (job_state_string): a flag wins over the base
# state, in this order. Slurm 23.02+ prints the base state and the flags as a list instead.
_STATE_FLAG_PRECEDENCE = (
    "COMPLETING",
    "STAGE_OUT",
    "CONFIGURING",
    "RESIZING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "SPECIAL_EXIT",
    "STOPPED",
    "REVOKED",
    "RESV_DEL_HOLD",
    "SIGNALING",
)


def job_state_word(words: list[str]) -> str:
    """One state word from squeue's state: the word itself (22.05), or from the flag list of
    23.02+ the flag Slurm's own job_state_string would show, else the base state."""
    if len(words) == 1:
        return words[0]
    for flag in _STATE_FLAG_PRECEDENCE:
        if flag in words:
            return flag
    return words[0] if words else ""


def _exit_status(reader: _Reader, raw: dict[str, Any], where: str) -> tuple[int | None, int | None]:
    """``(exit_code, signal)``: a wait(2) status (22.05) or ``{return_code, signal}`` (23.02+)."""
    value = raw.get("exit_code", _MISSING)
    if value is _MISSING or value is None:
        return None, None
    if isinstance(value, int) and not isinstance(value, bool):
        return decode_wait_status(value)
    if isinstance(value, dict):
        signal_obj = value.get("signal") or {}
        if not isinstance(signal_obj, dict):
            raise reader.fail(f"{where}.exit_code.signal", "an object", signal_obj)
        signal = reader.number(signal_obj, "id", f"{where}.exit_code.signal") or None
        if signal:
            return None, signal
        return reader.number(value, "return_code", f"{where}.exit_code"), None
    raise reader.fail(f"{where}.exit_code", "a number or {status, return_code, signal}", value)


def parse_squeue_json(text: str) -> list[SlurmJob]:
    """Jobs from ``squeue --json --states=all``, either JSON generation (see above).

    Raises :class:`SlurmQueryError` when the JSON carries errors (e.g. slurmctld unreachable)
    and :class:`SlurmFormatError` (naming the field) for a shape of neither generation.
    """
    data = _load_json(text, "squeue --json")
    reader = _Reader("squeue --json", data)
    jobs = []
    for i, raw in enumerate(reader.entries(data, "jobs")):
        where = f"jobs[{i}]"
        job_id = reader.number(raw, "job_id", where, required=True)
        exit_code, signal = _exit_status(reader, raw, where)
        reason = reader.text(raw, "state_reason", where)
        description = reader.text(raw, "state_description", where)
        jobs.append(
            SlurmJob(
                job_id=str(job_id),
                name=reader.text(raw, "name", where, required=True),
                state=job_state_word(reader.words(raw, "job_state", where)),
                reason=description or ("" if reason == "None" else reason),
                nodes=expand_hostlist(reader.text(raw, "nodes", where)),
                exit_code=exit_code,
                signal=signal,
                restart_count=reader.number(raw, "restart_cnt", where) or 0,
                required_nodes=expand_hostlist(reader.text(raw, "required_nodes", where)),
                reason_code="" if reason == "None" else reason,
                start_time=reader.number(raw, "start_time", where),
                user_id=reader.number(raw, "user_id", where),
            )
        )
    return jobs


SQUEUE_LIVE_FORMAT = "%i|%j|%T"
# The same and the owner's uid: which account a run belongs to (team_accounts).
SQUEUE_OWNED_FORMAT = "%i|%j|%T|%U"
# Id, owner's uid and user name, state, full name (last: a job name may hold "|", a user name
# cannot): whose a run recorded without an account is (``SlurmBackend.run_accounts``).
SQUEUE_OWNER_NAME_FORMAT = "%i|%U|%u|%T|%j"


def parse_squeue_owners(text: str) -> list[tuple[SlurmJob, str]]:
    """Jobs from ``squeue --noheader --format=%i|%U|%u|%T|%j``, each with its owner's user
    name as squeue printed it (a uid in digits where the name does not resolve)."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", 4)
        if len(parts) != 5 or not parts[0].strip() or not parts[1].strip().isdigit():
            raise SlurmQueryError(f"squeue printed an unexpected line: {line[:200]!r}")
        job_id, uid, user, state = (part.strip() for part in parts[:4])
        job = SlurmJob(job_id=job_id, name=parts[4], state=state.upper(), user_id=int(uid))
        jobs.append((job, user))
    return jobs


def parse_squeue_live(text: str, *, with_user_id: bool = False) -> list[SlurmJob]:
    """Jobs from ``squeue --noheader --format=%i|%j|%T`` (id, full name, state), or with
    ``with_user_id`` from :data:`SQUEUE_OWNED_FORMAT` (and the owner's uid last).

    Without ``--states`` squeue lists only jobs that are not finished. Unlike ``--json`` in
    22.05, this form honours ``--partition``, ``--users`` and ``--name``, and it is far smaller on
    a busy cluster. A name may itself contain ``|``: the id is the first field, then the name,
    the other fields are the last ones.
    """
    jobs = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        fields, user_id = line, None
        if with_user_id:
            fields, sep0, uid = line.rpartition("|")
            if not (sep0 and uid.strip().isdigit()):
                raise SlurmQueryError(f"squeue printed an unexpected line: {line[:200]!r}")
            user_id = int(uid)
        job_id, sep, rest = fields.partition("|")
        name, sep2, state = rest.rpartition("|")
        if not (sep and sep2 and job_id and state):
            raise SlurmQueryError(f"squeue printed an unexpected line: {line[:200]!r}")
        jobs.append(
            SlurmJob(job_id=job_id, name=name, state=state.strip().upper(), user_id=user_id)
        )
    return jobs


def parse_sacct_parsable(text: str) -> list[SlurmJob]:
    """Jobs from ``sacct -P -n -o jobid,jobname,state,exitcode,nodelist[,uid]`` (also with
    ``-c``, whose jobcomp file holds every user's jobs whatever ``--user`` says).

    Job steps (``42.batch``) are skipped; when a job appears several times (the jobcomp file
    logs a NODE_FAIL and later the requeued run), the last line wins.
    """
    latest: dict[str, SlurmJob] = {}
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) < 5 or not fields[0] or fields[0] == "JobID":
            continue
        job_id, name, state, exit_field, nodelist = fields[:5]
        if "." in job_id:
            continue
        code, _, sig = exit_field.partition(":")
        signal = int(sig) if sig.isdigit() and int(sig) else None
        exit_code = None if signal else (int(code) if code.isdigit() else None)
        # "CANCELLED by 0" -> CANCELLED
        state_word = state.split()[0].upper() if state.strip() else ""
        # Last: a name holding "|" shifts the fields after it (never one of our run names).
        uid = fields[-1].strip() if len(fields) > 5 else ""
        latest[job_id] = SlurmJob(
            job_id=job_id,
            name=name,
            state=state_word,
            nodes=expand_hostlist(nodelist),
            exit_code=exit_code,
            signal=signal,
            user_id=int(uid) if uid.isdigit() else None,
        )
    return list(latest.values())


_RUNNING_STATES = {
    "RUNNING",
    "COMPLETING",  # the job's processes are ending; its final state is not known yet
    "CONFIGURING",
    "SIGNALING",
    "STAGE_OUT",
    "RESIZING",
    # Suspended (scontrol suspend) or stopped: Slurm keeps the job's GPUs allocated to it.
    "SUSPENDED",
    "STOPPED",
}
_PENDING_STATES = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}
_FAILED_STATES = {"FAILED", "TIMEOUT", "OUT_OF_MEMORY", "DEADLINE"}
# The nodes, not the job: NODE_FAIL, and BOOT_FAIL (a node that never came up to run it, which
# Slurm itself requeues like a node failure when a job allows it).
_NODE_FAILED_STATES = {"NODE_FAIL", "BOOT_FAIL"}
# Slurm's own preemption (for a site's other partitions or QOS). Our runs are not requeueable,
# so Slurm ends them; the platform requeues the job instead of losing it.
_INTERRUPTED_STATES = {"PREEMPTED"}
_CANCELLED_STATES = {"CANCELLED", "REVOKED", "SPECIAL_EXIT"}
_TERMINAL_SLURM = (
    {"COMPLETED"} | _FAILED_STATES | _NODE_FAILED_STATES | _INTERRUPTED_STATES | _CANCELLED_STATES
)
_KNOWN_STATES = _RUNNING_STATES | _PENDING_STATES | _TERMINAL_SLURM


def is_known_state(state: str) -> bool:
    """True for every state word Slurm 22.05 to 24.11 prints for a job (squeue and sacct)."""
    return state in _KNOWN_STATES


# Pending reasons about the nodes a run was pinned to (``--nodelist``), which a placement on
# other nodes may not meet: a node unavailable or reserved (a maintenance reservation that the
# run's time limit reaches into), down, or busy with the cluster's other work ("Resources"; and
# "Priority": higher-priority jobs of others wait for those nodes). Every other reason (QOS and
# association limits, holds, dependencies, partition limits) is about the job or its account.
NODE_PENDING_REASONS = frozenset(
    {"ReqNodeNotAvail", "Reservation", "NodeDown", "Resources", "Priority", "ResvDeleted"}
)


def pending_reason(job: SlurmJob) -> str:
    """The reason squeue's ``%r`` shows for a pending job: the code, and Slurm's description
    after it when it says more ("ReqNodeNotAvail, Reserved for maintenance")."""
    if not job.reason_code:
        return job.reason
    if not job.reason or job.reason.startswith(job.reason_code):
        return job.reason or job.reason_code
    return f"{job.reason_code}, {job.reason}"


def job_status(job: SlurmJob, job_id: str, attempt: int) -> BackendJobStatus:
    """Our view of one Slurm job.

    A job Slurm requeued after it had started (``restart_cnt > 0`` and pending again: what
    ``--requeue`` did when a node died, for runs submitted before the backend passed
    ``--no-requeue``) is reported NODE_FAILED: the platform decides where the next attempt runs,
    rather than waiting for Slurm to restart it on the same pinned nodes. A state word that is
    not :func:`is_known_state` comes back UNKNOWN; callers must not read that as a lost run.
    """
    state = job.state
    reason = job.reason
    if state in _RUNNING_STATES:
        ours = BackendJobState.RUNNING
    elif state in _PENDING_STATES:
        if job.restart_count > 0:
            ours = BackendJobState.NODE_FAILED
            reason = f"requeued by Slurm after an interruption (restart {job.restart_count})"
        else:
            ours = BackendJobState.PENDING
            reason = pending_reason(job)
    elif state == "COMPLETED":
        ours = BackendJobState.SUCCEEDED
    elif state in _NODE_FAILED_STATES:
        ours = BackendJobState.NODE_FAILED
        if state == "BOOT_FAIL":
            reason = "a node failed to boot for it (Slurm BOOT_FAIL)"
    elif state in _INTERRUPTED_STATES:
        ours = BackendJobState.INTERRUPTED
        reason = "preempted by Slurm"
    elif state in _FAILED_STATES:
        ours = BackendJobState.FAILED
        if state == "TIMEOUT":
            # Slurm's own reason is the code "TimeLimit"; this text is what the outcomes page
            # reads as a timeout.
            reason = "time limit reached"
    elif state in _CANCELLED_STATES:
        ours = BackendJobState.CANCELLED
    else:
        ours = BackendJobState.UNKNOWN
    if job.signal and not reason:
        reason = f"killed by signal {job.signal}"
    return BackendJobStatus(
        job_id=job_id,
        attempt=attempt,
        state=ours,
        backend_ref=job.job_id,
        nodes=job.nodes or job.required_nodes,
        exit_code=job.exit_code
        if ours in (BackendJobState.SUCCEEDED, BackendJobState.FAILED)
        else None,
        reason=reason,
        started_at=float(job.start_time)
        if ours == BackendJobState.RUNNING and job.start_time
        else None,
        pending_on_nodes=ours == BackendJobState.PENDING
        and job.reason_code.split(",")[0].strip() in NODE_PENDING_REASONS,
        # Pinned to its nodes, a pending run waits only because slurmctld will not start it.
        held_by_cluster=ours == BackendJobState.PENDING,
    )


def parse_checkpoint_progress(text: str) -> float | None:
    """Seconds of work checkpointed, from the progress file a worker writes.

    Accepts a bare number (``"3600"``) or ``{"checkpointed_progress_s": 3600}``, the same message
    the Kubernetes backend reads from a termination log. Anything else (empty, negative, not a
    number) is None: no claim is better than a wrong one.
    """
    text = text.strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, dict):
        value = value.get("checkpointed_progress_s")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if value >= 0 and math.isfinite(value) else None


def pick_run(jobs: Iterable[SlurmJob]) -> SlurmJob | None:
    """The Slurm job that stands for one of our runs when several share its name.

    A live job beats a finished one (a duplicate submission must not hide the real run); among
    equals the newest (highest id) wins.
    """
    best: SlurmJob | None = None
    for job in jobs:
        key = (job.state not in _TERMINAL_SLURM, job.numeric_id)
        if best is None or key > (best.state not in _TERMINAL_SLURM, best.numeric_id):
            best = job
    return best


def is_live(job: SlurmJob) -> bool:
    """True while Slurm may still run (or is running) the job."""
    return job.state not in _TERMINAL_SLURM


# ---------------------------------------------------------------------------------------------
# Errors


class ErrorKind(StrEnum):
    UNAVAILABLE = "unavailable"  # slurmctld unreachable or busy: retry later
    ALREADY_DONE = "already_done"  # the job is gone / the node is already in that state
    REJECTED = "rejected"  # Slurm refuses; the same call will fail again


_UNAVAILABLE_PATTERNS = (
    "unable to contact slurm controller",
    "socket timed out",
    "connection refused",
    "connect failure",
    "zero bytes were transmitted",
    "communication connection failure",
    "slurm temporarily unable to accept job",
    "resource temporarily unavailable",
    "standby mode",
    "slurmctld not responding",
    "could not establish a configuration source",
    "slurm_load_jobs",
    "slurm_load_node",
    "slurm_load_partitions",
    "unspecified error",
)
_ALREADY_DONE_PATTERNS = (
    "invalid job id specified",
    "job/step already completing or completed",
    "already completing",
    "job has already finished",
    "job is no longer pending execution",
    "invalid node state specified",
    # 26.05's words for the same refusal (`state=resume` of a node that is not drained).
    "invalid node state transition",
)


def classify_error(message: str) -> ErrorKind:
    """What a Slurm error message means for the caller (see :class:`ErrorKind`)."""
    text = message.lower()
    if any(p in text for p in _UNAVAILABLE_PATTERNS):
        return ErrorKind.UNAVAILABLE
    if any(p in text for p in _ALREADY_DONE_PATTERNS):
        return ErrorKind.ALREADY_DONE
    return ErrorKind.REJECTED
