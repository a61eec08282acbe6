"""The Slurm backend's ``team_accounts``: the settings, and what makes a team account's run
directories private to it (``SlurmBackend._check_account_dirs`` runs the commands)."""

from __future__ import annotations

import os
import pwd
import re
import stat
from collections.abc import Mapping
from typing import Any


def prefix_setting(cfg: Mapping[str, Any], key: str, default: tuple[str, ...]) -> tuple[str, ...]:
    """A configured argument list (``command_prefix``, ``node_command_prefix``)."""
    prefix = cfg.get(key)
    if prefix is None:
        return default
    if isinstance(prefix, str) or not all(isinstance(a, str) and a for a in prefix):
        raise ValueError(f"{key} must be a list of arguments, e.g. ['ssh', 'login1']")
    return tuple(prefix)


# A Unix account name as useradd takes it, and nothing a shell or sudo would read as syntax:
# the name goes into a command prefix and into directory names.
_ACCOUNT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
ACCOUNT_PLACEHOLDER = "{account}"
# With team_accounts, the owner of a run the platform cannot establish: in neither squeue nor
# accounting, or in a record without its uid. Its files are never read: the service account
# would look for them in the shared job_workdir / log_dir, where every team account may put a
# link to whatever the service account can read (the platform's own environment, its keys).
# Not a Unix account name, so it can never be taken for one.
UNKNOWN_OWNER = "?"
DEFAULT_TEAM_COMMAND_PREFIX = ("sudo", "-n", "-u", ACCOUNT_PLACEHOLDER)


def team_accounts_setting(cfg: Mapping[str, Any]) -> dict[str, str]:
    """``team_accounts``: team slug -> the Unix account its jobs run as."""
    accounts = cfg.get("team_accounts")
    if accounts is None:
        return {}
    if not isinstance(accounts, Mapping):
        raise ValueError(
            "team_accounts must be a mapping of team slug to Unix account, "
            "e.g. {'vision': 'gp-vision'}"
        )
    out = {}
    for team, account in accounts.items():
        if not isinstance(team, str) or not team:
            raise ValueError(f"team_accounts: {team!r} is not a team slug")
        if not isinstance(account, str) or not _ACCOUNT_NAME.fullmatch(account):
            raise ValueError(
                f"team_accounts[{team!r}]: {account!r} is not a Unix account name (a letter or "
                "'_', then letters, digits, '.', '_' or '-'; at most 32 characters)"
            )
        out[team] = account
    return out


def team_command_prefix_setting(cfg: Mapping[str, Any], enabled: bool) -> tuple[str, ...]:
    """``team_command_prefix``: how a command reaches a team's account."""
    if cfg.get("team_command_prefix") is None:
        return DEFAULT_TEAM_COMMAND_PREFIX if enabled else ()
    if not enabled:
        raise ValueError("team_command_prefix is set but team_accounts is not: set both")
    prefix = prefix_setting(cfg, "team_command_prefix", ())
    if not any(ACCOUNT_PLACEHOLDER in arg for arg in prefix):
        # Without the placeholder every team's commands would run as one account.
        raise ValueError(
            f"team_command_prefix must name the account as {ACCOUNT_PLACEHOLDER}, "
            "e.g. ['sudo', '-n', '-u', '{account}']"
        )
    return prefix


def path_and_parents(path: str) -> list[str]:
    """``/a/b/c`` -> ``["/", "/a", "/a/b", "/a/b/c"]`` (a relative path: its own parts)."""
    path = os.path.normpath(path)
    chain = [path]
    while (parent := os.path.dirname(chain[-1])) not in ("", chain[-1]):
        chain.append(parent)
    return chain[::-1]


def _file_kind(mode: int) -> str:
    return "symbolic link" if stat.S_ISLNK(mode) else "file that is not a directory"


def directory_problems(
    stat_answer: str,
    *,
    own_dirs: set[str],
    account: str,
    account_uid: int | None,
    trusted: set[int | None],
) -> list[str]:
    """What makes ``account``'s run directories not private to it, from ``stat -c "%u %f %n"``
    of the directories and every directory above them, as written and as resolved.

    ``install -d`` follows a symbolic link and accepts any directory the account owns, so
    another account could have put a link there (to the account's home, say) and, after the
    check, replace it with a directory of its own, where the run's output would land; or rename
    the directory away, if an ancestor is writable to it. So each of its own must be a real
    directory it owns, mode 0700, and every one above owned by a ``trusted`` uid (root, the
    service account, the account) and never writable by others without the sticky bit (which
    keeps them from renaming or removing what they do not own)."""
    problems = []
    for line in stat_answer.splitlines():
        uid_text, mode_text, path = line.split(" ", 2)
        uid, mode = int(uid_text), int(mode_text, 16)
        if path in own_dirs:
            if not stat.S_ISDIR(mode):
                problems.append(f"{path} is not a directory but a {_file_kind(mode)}")
            elif uid != account_uid or stat.S_IMODE(mode) != 0o700:
                problems.append(
                    f"{path} is owned by uid {uid} with mode {stat.S_IMODE(mode):o} "
                    f"(wanted: {account}'s, 0700)"
                )
        elif uid not in trusted:
            problems.append(f"{path} belongs to uid {uid}, who could replace what lies below it")
        elif stat.S_ISDIR(mode) and mode & 0o022 and not mode & stat.S_ISVTX:
            problems.append(
                f"{path} is writable by others without the sticky bit, so they could "
                f"rename {account}'s directory and put their own in its place"
            )
    return problems


def local_uids(names: list[str]) -> dict[str, int]:
    """The uid of each of ``names`` on this host; one that does not exist is left out."""
    uids = {}
    for name in names:
        try:
            uids[name] = pwd.getpwnam(name).pw_uid
        except KeyError:
            continue
    return uids


def uids_from_getent(stdout: str, names: list[str]) -> dict[str, int]:
    """The uid of each of ``names`` in ``getent passwd``'s answer."""
    uids = {}
    for line in stdout.splitlines():
        fields = line.split(":")
        if len(fields) > 2 and fields[0] in names and fields[2].isdigit():
            uids[fields[0]] = int(fields[2])
    return uids
