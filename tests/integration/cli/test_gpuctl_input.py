"""Hostile or broken input to ``gpuctl``: every case ends in a one-line message and an exit code
(2 for bad input), never a traceback, and never with the token in the message.

Where nothing should reach the server, the URL is a closed port: a request that went out anyway
would end as exit 1 ("cannot reach"), so exit 2 also proves nothing was sent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tenants.models import ApiToken

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[3]
NOWHERE = "http://127.0.0.1:9"  # the discard port: nothing listens in the test environment
JOB = """\
apiVersion: gpuplatform/v1
kind: TrainingJob
metadata: {name: x, team: vision}
spec:
  image: registry.example.com/x:1
  command: [python, train.py]
  workers: 1
  gpusPerWorker: 1
  deadline: 2030-13-45
"""

# Seven levels of ten aliases each: 20 lines that stand for ten million values.
LAUGHS = "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 7)
)


@pytest.fixture
def offline(gpuctl, monkeypatch):
    """gpuctl with a URL and token configured, pointing at a port where nothing listens."""
    monkeypatch.setenv("GPUCTL_URL", NOWHERE)
    monkeypatch.setenv("GPUCTL_TOKEN", "a-plain-token")
    return gpuctl


def assert_one_line_usage_error(result, *fragments: str) -> None:
    assert result.code == 2, result.err
    assert "Traceback" not in result.err
    assert len(result.err.strip().splitlines()) == 1, result.err
    for fragment in fragments:
        assert fragment in result.err, result.err


# --- YAML the parser cannot build -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (JOB, "month must be in 1..12"),
        # libyaml refuses nesting past 1,000 levels (PyYAML's own parser ran out of stack).
        ("[" * 20000, "(line 1, column 1001): exceeded maximum nesting depth"),
        ("a: [1,\n  b: {\n", "not valid YAML (line 3, column 1)"),
        # Both parse at once; sending them walked (or spelled out) the value without end.
        ("a: &a [*a]\n", "an alias makes a value that holds itself"),
        (LAUGHS, "its aliases spell out more than 1,000,000 values"),
        # PyYAML kept the last of a key given twice: workers 8 ran where the spec's reader saw
        # 1, and a second env: block dropped the first's variables, in silence.
        (
            JOB.replace("  deadline: 2030-13-45\n", "  workers: 8\n"),
            "not valid YAML (line 9, column 3): key 'workers' given twice (first on line 7)",
        ),
        (
            "spec:\n  env:\n    A: '1'\n  x: 1\n  env: {B: '2'}\n",
            "(line 5, column 3): key 'env' given twice (first on line 2)",
        ),
    ],
    ids=[
        "impossible-date",
        "deep-nesting",
        "syntax-error",
        "self-alias",
        "alias-bomb",
        "duplicate-key",
        "duplicate-block",
    ],
)
def test_every_yaml_loader_reports_an_unreadable_file_in_one_line(offline, tmp_path, text, reason):
    path = tmp_path / "input.yaml"
    path.write_text(text)
    assert_one_line_usage_error(offline("submit", "-f", str(path)), reason)
    assert_one_line_usage_error(offline("policy", "apply", str(path), "-m", "x"), reason)
    assert_one_line_usage_error(offline("whatif", "run", "--candidate", str(path)), reason)


def test_a_key_a_merge_brings_may_be_given_again(offline, tmp_path):
    """YAML's merge key (``<<: *defaults``) is how a file overrides shared values: only a key
    written twice in the mapping itself is refused."""
    path = tmp_path / "job.yaml"
    path.write_text(
        "common: &common {workers: 1, gpusPerWorker: 1, command: [a]}\n"
        "apiVersion: gpuplatform/v1\nkind: TrainingJob\nmetadata: {name: x, team: vision}\n"
        "spec:\n  <<: *common\n  workers: 2\n"
    )
    result = offline("submit", "-f", str(path), "--dry-run", "--json")
    assert "twice" not in result.err


# --- numbers JSON cannot carry ----------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "1e300", "3601"])
def test_logs_interval_must_be_a_sane_finite_number(offline, value):
    result = offline("logs", "1", "-f", f"--interval={value}")
    assert_one_line_usage_error(result, "--interval")


@pytest.mark.parametrize("number", ["\u00b2", "\u0663", "9" * 5000])
@pytest.mark.parametrize(
    "command",
    [
        ("policy", "show", "--version", "{}"),
        ("policy", "diff", "{}", "1"),
        ("policy", "rollback", "{}", "-m", "x"),
        ("whatif", "show", "{}"),
        ("whatif", "cancel", "{}"),
        ("whatif", "run", "--version", "{}"),
    ],
    ids=lambda c: "-".join(c[:2]) if isinstance(c, tuple) else None,
)
def test_a_version_or_run_number_int_cannot_read_is_bad_usage(offline, command, number):
    """ "²" and "٣" are digits to str.isdigit but not to int(), and int() refuses 5,000
    digits: each was a ValueError traceback instead of the usage message."""
    result = offline(*(part.format(number) for part in command))
    assert_one_line_usage_error(result, "must be a")


@pytest.mark.parametrize(
    "command",
    [
        ("ls", "--team", "{}"),
        ("ls", "--user", "{}"),
        ("nodes", "--rack", "{}"),
        ("quota", "--gpu-model", "{}"),
        ("cost", "--team", "{}"),
    ],
    ids=lambda c: f"{c[0]}{c[1]}",
)
def test_a_filter_whose_bytes_are_not_utf8_is_bad_usage(offline, command):
    """Python hands an argument's bytes that are not UTF-8 (``--team $'\\xff'``) over as lone
    surrogates, which no URL can carry: building the query raised UnicodeEncodeError, a
    traceback. It is now refused, naming the parameter, before anything is sent."""
    value = b"vis\xffion".decode("utf-8", "surrogateescape")
    result = offline(*(part.format(value) for part in command))
    assert_one_line_usage_error(result, "is not UTF-8 text")


def test_a_nan_team_weight_is_refused_before_sending(offline, tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text("team_weights: {vision: .nan}\n")
    result = offline("policy", "apply", str(path), "-m", "x")
    assert_one_line_usage_error(result, "team_weights.vision: must be a finite number")

    result = offline("whatif", "run", "--candidate", f"weights={path}")
    assert_one_line_usage_error(result, "candidates.weights.team_weights.vision")


def test_a_window_too_long_for_a_float_is_refused(offline):
    result = offline("whatif", "run", "--window", "9" * 400)
    assert_one_line_usage_error(result, "--window")


# --- URL and token ----------------------------------------------------------------------------


@pytest.mark.parametrize("url", [8103, ["http://x"], "http://[::1", "ftp://host"])
def test_a_bad_url_in_the_config_file_is_named(gpuctl, cli_config, url):
    cli_config.parent.mkdir(parents=True)
    cli_config.write_text(json.dumps({"url": url, "token": "a-plain-token"}))
    assert_one_line_usage_error(gpuctl("ls"), f"the url in {cli_config}")
    assert_one_line_usage_error(gpuctl("login", "--token-stdin", stdin="t\n"), "the url in")


def test_a_malformed_url_flag_or_variable_is_bad_usage(offline, monkeypatch):
    assert_one_line_usage_error(offline("--url", "http://[::1", "ls"), "--url is not a valid URL")
    monkeypatch.setenv("GPUCTL_URL", "http://[::1")
    assert_one_line_usage_error(offline("ls"), "GPUCTL_URL is not a valid URL")


@pytest.mark.parametrize("token", ["tökén", "secret-part\r\nX-Injected: 1", "two words"])
def test_a_token_that_cannot_be_a_header_is_refused_without_printing_it(
    offline, monkeypatch, cli_config, token
):
    monkeypatch.setenv("GPUCTL_TOKEN", token)
    result = offline("ls")
    assert_one_line_usage_error(result, "GPUCTL_TOKEN is not a valid API token")
    assert "secret-part" not in result.err and "tök" not in result.err

    monkeypatch.delenv("GPUCTL_TOKEN")
    cli_config.parent.mkdir(parents=True, exist_ok=True)
    cli_config.write_text(json.dumps({"url": NOWHERE, "token": token}))
    assert_one_line_usage_error(offline("ls"), "is not a valid API token")

    # A pasted token is checked before it is sent or saved.
    cli_config.unlink()
    result = offline("login", "--token-stdin", stdin=token.replace("\r\n", " ") + "\n")
    assert_one_line_usage_error(result, "the token on standard input is not a valid API token")
    assert not cli_config.exists()


# --- the config file --------------------------------------------------------------------------


def test_login_to_an_unwritable_config_asks_the_server_for_no_token(
    platform, live_server, gpuctl, monkeypatch
):
    monkeypatch.setenv("GPUCTL_CONFIG", "/proc/gpuctl.json")
    tokens = ApiToken.objects.count()
    result = gpuctl(
        "login", "--url", live_server.url, "--username", "alice", "--password-stdin",
        stdin="pw-alice\n",
    )  # fmt: skip
    assert_one_line_usage_error(result, "cannot write /proc/gpuctl.json")
    assert ApiToken.objects.count() == tokens


def test_logout_with_a_config_path_that_is_no_file_says_so(gpuctl, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUCTL_CONFIG", str(tmp_path))
    assert_one_line_usage_error(gpuctl("logout"), "it is a directory")
    assert tmp_path.is_dir()

    regular = tmp_path / "regular"
    regular.write_text("")
    monkeypatch.setenv("GPUCTL_CONFIG", str(regular / "config.json"))
    assert_one_line_usage_error(gpuctl("logout"), "cannot remove", "Not a directory")


# --- a reader that goes away ------------------------------------------------------------------


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_output_to_a_closed_pipe_ends_quietly(as_alice, cli_config, json_flag):
    env = {**os.environ, "GPUCTL_CONFIG": str(cli_config)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    reader, writer = os.pipe()
    os.close(reader)  # as `| head -1` does once it has its line: every write now fails
    try:
        # `python -m` from the checkout, so the code under test is this tree's.
        done = subprocess.run(
            [sys.executable, "-m", "gpuctl", "ls", *json_flag],
            cwd=ROOT,
            env=env,
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(writer)
    assert done.returncode == 141
    assert done.stderr == ""


# --- a URL that is not the platform -----------------------------------------------------------


def test_a_url_that_is_not_the_api_root_says_what_was_not_found(as_alice, live_server):
    result = as_alice("--url", f"{live_server.url}/static/", "ls")
    assert result.code == 1
    assert f"{live_server.url}/static/api/v1/jobs/ was not found (HTTP 404)" in result.err
    assert "the server failed" not in result.err
