"""Signing in and out: ``gpuctl login`` (a password exchanged for an API token, or a token
made in the portal for single sign-on users) and ``gpuctl logout``. The saved login is
``config``'s file; these commands are the only ones that write or remove it."""

from __future__ import annotations

import argparse
import getpass
import sys

from . import config, output
from .client import Client
from .common import UsageError
from .common import out as _out


def cmd_login(args: argparse.Namespace) -> int:
    """Exchange username + password for a token and save {url, token, username} (mode 0600).
    With ``--token-stdin``, check a token created in the portal and save it instead."""
    stored = config.read_file()
    url, url_source = config.pick_url(args.url, stored)
    if not url:
        raise UsageError("--url is required the first time", {"--url": ["is required"]})
    url = config.normalise_url(url, url_source)
    # Before the server issues a token: a token it cannot save would be lost.
    config.check_writable()
    if args.token_stdin:
        return _login_with_token(args, url)
    username = args.username
    if not username:
        if not sys.stdin.isatty():
            raise UsageError("--username is required", {"--username": ["is required"]})
        username = input("Username: ").strip()
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif sys.stdin.isatty():
        password = getpass.getpass("Password: ")
    else:
        raise UsageError(
            "no terminal to ask for the password: pipe it in with --password-stdin",
            {"--password-stdin": ["required when standard input is not a terminal"]},
        )
    if not password:
        raise UsageError("the password is empty", {"password": ["is required"]})
    with Client(url) as api:
        answer = api.post(
            "/api/v1/auth/token",
            {"username": username, "password": password, "name": args.token_name},
        )
    token = answer["token"]
    path = config.write_file({"url": url, "token": token, "username": username})
    if args.json:
        result = {"url": url, "username": username, "config": str(path)}
        if args.show_token:
            result["token"] = token
        output.print_json(result, _out())
    else:
        _out().write(f"logged in to {url} as {username} (token saved to {path})\n")
        if args.show_token:
            _out().write(token + "\n")
    return 0


def _login_with_token(args: argparse.Namespace, url: str) -> int:
    """Single sign-on users have no password here: they paste a token made in the portal."""
    if args.username or args.password_stdin or args.show_token:
        raise UsageError(
            "--token-stdin takes the token from standard input; it goes with no --username, "
            "--password-stdin or --show-token",
            {"--token-stdin": ["cannot be combined with password login options"]},
        )
    token = sys.stdin.readline().strip()
    if not token:
        raise UsageError("the token is empty", {"--token-stdin": ["no token on standard input"]})
    config.check_token(token, "the token on standard input")
    with Client(url, token) as api:
        me = api.get("/api/v1/auth/me")
    username = str(me["username"])
    path = config.write_file({"url": url, "token": token, "username": username})
    if args.json:
        output.print_json({"url": url, "username": username, "config": str(path)}, _out())
    else:
        _out().write(f"logged in to {url} as {username} (token saved to {path})\n")
    return 0


def cmd_logout(args: argparse.Namespace) -> int:
    """Delete the saved login (the token stays valid on the server until revoked)."""
    removed = config.remove_file()
    if args.json:
        output.print_json({"removed": removed, "config": str(config.config_path())}, _out())
    else:
        _out().write("logged out\n" if removed else "not logged in\n")
    return 0
