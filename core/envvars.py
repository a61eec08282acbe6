"""The one rule for the environment variables a job sets: portable POSIX names, none of the
variables through which a container runtime chooses the devices a container gets, and sizes a
program can be started with. The API and the portal check all of it, both cluster backends the
names (gpuctl, which imports nothing of the platform, keeps its own copy of the name pattern;
the server's 400 covers the rest)."""

from __future__ import annotations

import re

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ENV_NAME_RULE = "letters, digits and _, not starting with a digit"

# Read by the NVIDIA and AMD container runtimes when they start a container: with the NVIDIA
# toolkit's default configuration (accept-nvidia-visible-devices-envvar-when-unprivileged) a pod
# whose env says NVIDIA_VISIBLE_DEVICES=all gets every GPU of its node, those of other teams'
# pods included. The GPUs a run gets are the cluster's allocation, never the job's own say.
DEVICE_SELECTION_ENV = frozenset(
    {
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_MIG_CONFIG_DEVICES",
        "NVIDIA_MIG_MONITOR_DEVICES",
        "NVIDIA_IMEX_CHANNELS",
        "AMD_VISIBLE_DEVICES",
    }
)


def is_env_name(name: object) -> bool:
    """Whether ``name`` is a valid variable name (the whole string: no trailing newline)."""
    return isinstance(name, str) and ENV_NAME.fullmatch(name) is not None


def env_name_error(name: object) -> str:
    """Why a job may not set the variable ``name`` ("" when it may)."""
    if not is_env_name(name):
        return f"{name!r} is not a valid environment variable name ({ENV_NAME_RULE})"
    if name in DEVICE_SELECTION_ENV:
        return (
            f"{name} may not be set by a job: the container runtime would read it to choose the "
            "node's GPUs the job gets, which the cluster's allocation decides"
        )
    return ""


# Linux refuses to start a program whose environment holds one ``NAME=value`` string longer than
# 128 KiB (MAX_ARG_STRLEN) or whose arguments and environment together pass ARG_MAX (2 MiB with
# the usual 8 MiB stack): Slurm's srun and a container's entry point would fail with "Argument
# list too long" and the job could never run. The room left is for the platform's own variables
# and, on Slurm, the script around the command.
MAX_ENTRY_BYTES = 120 * 1024
MAX_TOTAL_BYTES = 1024 * 1024


def env_name_errors(env: object) -> list[str]:
    """What is wrong with ``env`` (a mapping of names to values), one line each: its names, and
    a variable or a whole environment too large for a program to be started with."""
    if not isinstance(env, dict):
        return []
    problems = [message for message in map(env_name_error, env) if message]
    total = 0
    for name, value in env.items():
        size = len(f"{name}={value}".encode(errors="surrogatepass"))
        total += size
        if size > MAX_ENTRY_BYTES:
            problems.append(
                f"{str(name)[:40]!r} is {size} bytes as NAME=value; at most {MAX_ENTRY_BYTES} "
                "(a program cannot be started with a longer variable)"
            )
    if total > MAX_TOTAL_BYTES:
        problems.append(
            f"the variables add up to {total} bytes; at most {MAX_TOTAL_BYTES} (a program "
            "cannot be started with a larger environment)"
        )
    return problems
