"""The one rule for the names of environment variables a job sets: portable POSIX names, and none
of the variables through which a container runtime chooses the devices a container gets. The API,
the portal and both cluster backends check it alike (gpuctl, which imports nothing of the
platform, keeps its own copy of the pattern; the server's 400 covers the rest)."""

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


def env_name_errors(env: object) -> list[str]:
    """What is wrong with the names of ``env`` (a mapping of names to values), one line each."""
    if not isinstance(env, dict):
        return []
    return [message for message in map(env_name_error, env) if message]
