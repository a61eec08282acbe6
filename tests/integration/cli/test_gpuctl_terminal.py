"""Other people's text never drives the terminal (issue 26, finding 10): a member names a job
with escape sequences (clear the screen, a hidden hyperlink, a bidirectional override); the
platform admin lists every team's jobs with ``gpuctl ls`` and sees the sequences as text."""

from __future__ import annotations

import json

import pytest

from scheduler import services
from scheduler.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE = "\x1b[2J\x1b]8;;https://evil.example/\x07click me\x1b]8;;\x07\u202etxt.exe\r"


def test_job_names_with_escape_sequences_are_printed_as_text(platform, as_admin):
    job = services.job_submit(
        user=platform["alice"],
        request=services.JobRequest(name="plain", team="vision", workers=1, gpus_per_worker=1),
    )
    # Submissions refuse such names now (core.names); rows stored before that still hold them.
    Job.objects.filter(pk=job.pk).update(name=HOSTILE)
    for args in (("ls",), ("show", str(job.pk)), ("why", str(job.pk))):
        result = as_admin(*args)
        assert result.code == 0, (args, result.err)
        shown = result.out
        assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown, args
        assert "\r" not in shown, args
        assert "\\x1b[2J" in shown, (args, shown)
        if args[0] != "ls":  # the table clips long names
            assert "\\u202e" in shown, (args, shown)
    # Scripts still get the exact name, JSON-escaped.
    listed = json.loads(as_admin("ls", "--json").out)
    assert HOSTILE in [item["name"] for item in listed]


def test_server_messages_are_printed_as_text_too(platform, as_admin):
    result = as_admin(
        "submit",
        "--name",
        "x",
        "--team",
        "vision",
        "--gpu-model",
        "\x1b[31mred",
        "-N",
        "1",
        "--gpus-per-worker",
        "1",
    )
    assert result.code != 0
    assert "\x1b" not in result.err and "\\x1b[31mred" in result.err
