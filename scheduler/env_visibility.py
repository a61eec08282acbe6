"""Who sees a job's secrets: its environment values and the secrets in its command. One rule for
every surface that shows them.

A job's ``env`` often carries a token or a private location, its command a ``--token=...``.
Those who may submit to the job's team (its members, admins and owners; platform admins) see
them as submitted; everyone else who may read the job (the team's viewers) sees the env's names,
every value ``(hidden)``, and the command with its secrets redacted as the record redacts them
(:func:`redact_text`). The rule is applied where a surface shapes what it
shows (the job API, the job page, the record API and export, the array API and page); the live
updates carry neither. On top of it, the stored reproducibility record never holds a
secret-named value, for anyone (``scheduler.reproducibility.redact_env``): it is exported.
"""

from __future__ import annotations

import re
from typing import Any

from tenants.audit import REDACTED, redact
from tenants.permissions import can_submit_to

HIDDEN_VALUE = "(hidden)"

# Both run on text a user wrote (a command, an environment value of any length), so each match
# attempt is bounded: the scheme is at most 32 characters (only its tail is ever matched, and
# kept), and a flag starts where no name character precedes it and names at most 64 on either
# side of its keyword. Unbounded, they backtracked over every start position of a long value,
# holding the interpreter's lock (and so every request of the server) for as long.
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]{0,31}://[^/\s:@]+:)[^@\s/]+@")
_SECRET_ARGUMENT = re.compile(
    r"(?<![A-Za-z0-9_-])(?P<flag>--?[A-Za-z0-9_-]{0,64}?"
    r"(?:pass(?:word)?|secret|token|key|credential)[A-Za-z0-9_-]{0,64}"
    r"(?:=|\s+))(?P<value>\"[^\"]*\"|'[^']*'|\S+)",
    re.I,
)


def redact_text(text: str) -> str:
    """``text`` with passwords in URLs, values of secret-named ``--flags`` and platform API
    tokens replaced by ``[redacted]``."""
    text = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    text = _SECRET_ARGUMENT.sub(lambda m: f"{m['flag']}{REDACTED}", text)
    return str(redact(text))


def may_see_env_values(user, team) -> bool:
    """Whether ``user`` sees the values of the env of ``team``'s jobs (not only the names)."""
    return can_submit_to(user, team)


def shown_env(env: dict | None, *, visible: bool) -> dict:
    """An environment as shown: the values when ``visible``, else the names with every value
    hidden."""
    env = env or {}
    return dict(env) if visible else {name: HIDDEN_VALUE for name in env}


def shown_command(command: str, *, visible: bool) -> str:
    """A command as shown: as submitted when ``visible``, else with its secrets redacted."""
    if visible or not command:
        return command
    return redact_text(command)


def shown_record(record: dict[str, Any], *, visible: bool) -> dict[str, Any]:
    """An attempt record as shown: its env and its resubmission's env by :func:`shown_env`."""
    if visible:
        return record
    shown = dict(record)
    if "env" in shown:
        shown["env"] = shown_env(shown["env"], visible=False)
    if isinstance(shown.get("resubmit"), dict) and "env" in shown["resubmit"]:
        shown["resubmit"] = {
            **shown["resubmit"],
            "env": shown_env(shown["resubmit"]["env"], visible=False),
        }
    return shown
