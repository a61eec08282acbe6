"""The one rule for the names of environment variables a job sets: portable POSIX names. The API,
the portal and the Slurm backend check it alike (gpuctl, which imports nothing of the platform,
keeps its own copy of the pattern)."""

from __future__ import annotations

import re

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ENV_NAME_RULE = "letters, digits and _, not starting with a digit"


def is_env_name(name: object) -> bool:
    """Whether ``name`` is a valid variable name (the whole string: no trailing newline)."""
    return isinstance(name, str) and ENV_NAME.fullmatch(name) is not None


def env_name_errors(env: object) -> list[str]:
    """What is wrong with the names of ``env`` (a mapping of names to values), one line each."""
    if not isinstance(env, dict):
        return []
    return [
        f"{name!r} is not a valid environment variable name ({ENV_NAME_RULE})"
        for name in env
        if not is_env_name(name)
    ]
