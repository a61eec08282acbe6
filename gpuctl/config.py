"""Where gpuctl keeps the server URL and the API token.

Guarantees: the file (``$GPUCTL_CONFIG``, else ``$XDG_CONFIG_HOME/gpuctl/config.json``, else
``~/.config/gpuctl/config.json``) is written atomically and is never readable by other users
(mode 0600, its directory 0700), even for the instant between create and rename.
``GPUCTL_URL`` and ``GPUCTL_TOKEN`` override the file, so CI jobs need no file at all.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ConfigError(Exception):
    """The configuration is missing or unreadable; the message says how to fix it."""


@dataclass(frozen=True)
class Settings:
    url: str
    token: str
    username: str = ""


def config_path() -> Path:
    """The config file gpuctl reads and ``gpuctl login`` writes."""
    explicit = os.environ.get("GPUCTL_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpuctl" / "config.json"


def read_file() -> dict[str, Any]:
    """The stored config, or ``{}`` when there is none yet."""
    path = config_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"cannot read {path}: not UTF-8 text") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise ConfigError(f"{path} is not valid JSON; run gpuctl login again") from None
    return data if isinstance(data, dict) else {}


def write_file(data: dict[str, Any]) -> Path:
    """Replace the config file with ``data`` (mode 0600), atomically."""
    path = config_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # mkstemp creates the file 0600 from the start, so the token is never exposed.
    fd, tmp = tempfile.mkstemp(prefix=".config-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2)
            handle.write("\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def remove_file() -> bool:
    """Delete the config file; True when there was one."""
    try:
        config_path().unlink()
    except FileNotFoundError:
        return False
    return True


def resolve(*, url_flag: str | None = None) -> Settings:
    """URL and token to use: ``--url`` > ``GPUCTL_URL`` > file; ``GPUCTL_TOKEN`` > file.

    Raises ``ConfigError`` when either is missing."""
    stored = read_file()
    url = url_flag or os.environ.get("GPUCTL_URL") or stored.get("url") or ""
    token = os.environ.get("GPUCTL_TOKEN") or stored.get("token") or ""
    if not url:
        raise ConfigError("no server URL: run `gpuctl login --url URL` or set GPUCTL_URL")
    if not token:
        raise ConfigError("not logged in: run `gpuctl login` or set GPUCTL_TOKEN")
    return Settings(url=normalise_url(url), token=token, username=stored.get("username", ""))


def normalise_url(url: str) -> str:
    """``host:8000`` → ``http://host:8000``; trailing slashes dropped."""
    url = url.strip()
    if "://" not in url:
        url = "http://" + url
    return url.rstrip("/")
