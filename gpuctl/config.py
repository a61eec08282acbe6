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

import httpx


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
    except (json.JSONDecodeError, RecursionError):
        raise ConfigError(f"{path} is not valid JSON; run gpuctl login again") from None
    return data if isinstance(data, dict) else {}


def check_writable() -> Path:
    """The config path, once it is known that ``write_file`` can replace it; else ``ConfigError``.

    ``gpuctl login`` asks this before the server issues a token, so an unwritable location never
    costs a token that would then be lost."""
    path = config_path()
    if path.is_dir():
        raise ConfigError(f"cannot write {path}: it is a directory (set GPUCTL_CONFIG to a file)")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".config-", suffix=".json", dir=path.parent)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    os.close(fd)
    Path(tmp).unlink(missing_ok=True)
    return path


def write_file(data: dict[str, Any]) -> Path:
    """Replace the config file with ``data`` (mode 0600), atomically; ``ConfigError`` if it
    cannot be written."""
    path = check_writable()
    # mkstemp creates the file 0600 from the start, so the token is never exposed.
    try:
        fd, tmp = tempfile.mkstemp(prefix=".config-", suffix=".json", dir=path.parent)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2)
            handle.write("\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def remove_file() -> bool:
    """Delete the config file; True when there was one, ``ConfigError`` when it cannot be."""
    path = config_path()
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    except IsADirectoryError:
        raise ConfigError(f"cannot remove {path}: it is a directory, not a gpuctl config") from None
    except OSError as exc:
        raise ConfigError(f"cannot remove {path}: {exc.strerror or exc}") from None
    return True


def resolve(*, url_flag: str | None = None) -> Settings:
    """URL and token to use: ``--url`` > ``GPUCTL_URL`` > file; ``GPUCTL_TOKEN`` > file.

    Raises ``ConfigError`` when either is missing."""
    stored = read_file()
    url, url_source = pick_url(url_flag, stored)
    token, token_source = (
        (os.environ["GPUCTL_TOKEN"], "GPUCTL_TOKEN")
        if os.environ.get("GPUCTL_TOKEN")
        else (stored.get("token") or "", f"the token in {config_path()}")
    )
    if not url:
        raise ConfigError("no server URL: run `gpuctl login --url URL` or set GPUCTL_URL")
    if not token:
        raise ConfigError("not logged in: run `gpuctl login` or set GPUCTL_TOKEN")
    check_token(token, token_source)
    username = stored.get("username")
    return Settings(
        url=normalise_url(url, url_source),
        token=token,
        username=username if isinstance(username, str) else "",
    )


def pick_url(url_flag: str | None, stored: dict[str, Any]) -> tuple[Any, str]:
    """The URL to use, ``--url`` > ``GPUCTL_URL`` > file, and where it came from (for errors)."""
    if url_flag:
        return url_flag, "--url"
    if os.environ.get("GPUCTL_URL"):
        return os.environ["GPUCTL_URL"], "GPUCTL_URL"
    return stored.get("url") or "", f"the url in {config_path()}"


def check_token(token: Any, source: str) -> None:
    """``ConfigError`` unless ``token`` can travel in an HTTP header as it is.

    Tokens are printable ASCII. Anything else would fail inside httpx, either as an encoding
    error or (for CR/LF) with a message that quotes the whole header, token included; so the
    message here says what is wrong without repeating the token."""
    if not isinstance(token, str) or not all("!" <= ch <= "~" for ch in token):
        raise ConfigError(
            f"{source} is not a valid API token (tokens are printable ASCII without spaces); "
            "run `gpuctl login` again"
        )


def normalise_url(url: Any, source: str = "--url") -> str:
    """``host:8000`` → ``http://host:8000``; trailing slashes dropped. ``ConfigError`` naming
    ``source`` when it is not an http(s) URL."""
    if not isinstance(url, str):
        raise ConfigError(f"{source} must be a URL string, not {type(url).__name__}")
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    text = text.rstrip("/")
    try:
        parsed = httpx.URL(text)
    except httpx.InvalidURL as exc:
        raise ConfigError(f"{source} is not a valid URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigError(f"{source} is not a valid URL: expected http(s)://host[:port]")
    return text
