"""A job's output as a viewer of its team reads it (``env_visibility.shown_log``) and where a
byte-cursor read may stop for such a reader (``backends.base.byte_chunk``'s break); no database.
The surfaces that serve the output are tested in tests/integration (API, socket, gpuctl, page)."""

from __future__ import annotations

import pytest

from scheduler.backends.base import byte_chunk
from scheduler.env_visibility import MIN_MASKED_VALUE_CHARS, shown_log

ENV = {
    "WANDB_API_KEY": "wk-0123456789abcdef",
    "DATA_DIR": "/mnt/private/vision",
    "DEBUG": "1",  # short: left in the log
    "LANG": "en_US",
    "TLS_KEY": "-----BEGIN KEY-----\nMIIEvQIBADANBgkq\nhkiG9w0BAQEFAASC\n-----END KEY-----\n",
}


@pytest.mark.parametrize(
    "text,expected",
    [
        # every occurrence, anywhere in a line
        (
            "env: WANDB_API_KEY=wk-0123456789abcdef DATA_DIR=/mnt/private/vision\n",
            "env: WANDB_API_KEY=[redacted] DATA_DIR=[redacted]\n",
        ),
        (
            "load /mnt/private/vision/shard-1 x wk-0123456789abcdef\n",
            "load [redacted]/shard-1 x [redacted]\n",
        ),
        # short values are not masked: "1" and "en_US" are everywhere in a log
        ("step 1 DEBUG=1 LANG=en_US\n", "step 1 DEBUG=1 LANG=en_US\n"),
        # a value of several lines is masked line by line (each half of a read split inside it)
        ("MIIEvQIBADANBgkq\nhkiG9w0BAQEFAASC\n", "[redacted]\n[redacted]\n"),
        # what the command's redaction redacts, a flag's value on the flag's line only
        ("args: --hf-token hf_abc --lr 0.1\n", "args: --hf-token [redacted] --lr 0.1\n"),
        ("pull https://me:pa55@host/x\n", "pull https://me:[redacted]@host/x\n"),
        ("no more --password\nfoo\n", "no more --password\nfoo\n"),
        ("", ""),
    ],
)
def test_a_viewer_reads_the_values_and_secrets_masked(text, expected):
    assert shown_log(text, env=ENV, visible=False) == expected


def test_those_who_may_submit_read_the_output_as_written():
    text = "WANDB_API_KEY=wk-0123456789abcdef --hf-token hf_abc\n"
    assert shown_log(text, env=ENV, visible=True) == text


def test_overlapping_values_are_masked_as_one_stretch():
    env = {"A": "prefix-abc", "B": "abc-the-secret-tail"}
    # "prefix-abc" is found first; B starts inside it and reaches past its end
    assert shown_log("x prefix-abc-the-secret-tail y\n", env=env, visible=False) == (
        "x [redacted] y\n"
    )
    # the longest value wins where two start at the same place
    env = {"A": "secret", "B": "secret-and-more"}
    assert shown_log("secret-and-more!\n", env=env, visible=False) == "[redacted]!\n"


def test_a_long_value_is_masked_whole_and_many_values_sharing_a_start_each():
    long = "Q" * 300 + "-its-end"
    other = "Q" * 300 + "-another-longer-end"
    paths = {f"P{i}": f"/mnt/private/run-{i:03d}" for i in range(50)}  # one prefix tree
    env = {"LONG": long, "OTHER": other, **paths}
    text = f"a {long} b {other} c /mnt/private/run-007/x /mnt/private/run-1\n"
    assert shown_log(text, env=env, visible=False) == (
        "a [redacted] b [redacted] c [redacted]/x /mnt/private/run-1\n"
    )


def test_the_shortest_masked_value():
    short, enough = "a" * (MIN_MASKED_VALUE_CHARS - 1), "b" * MIN_MASKED_VALUE_CHARS
    text = f"{short} {enough}\n"
    assert shown_log(text, env={"S": short, "E": enough}, visible=False) == f"{short} [redacted]\n"


def _pieces(data: bytes, limit: int, first: str | None = None) -> list[tuple[str, str]]:
    """(text, cursor) of each read a whole-line reader makes of ``data`` from ``first``."""
    out, cursor = [], first
    for _ in range(100):
        start = 0 if cursor is None else int(cursor)
        chunk = byte_chunk(
            data[start : start + limit],
            start,
            limit=limit,
            tail=cursor is None,
            truncated=False,
        )
        text, cursor = chunk.text, chunk.cursor
        if chunk.break_at is not None:
            text, cursor = text[: chunk.break_at], chunk.break_cursor
        out.append((text, cursor))
        if start >= len(data) or not text:
            break
    return out


def test_a_read_breaks_after_its_last_line_end_and_waits_for_an_unfinished_line():
    chunk = byte_chunk(b"one\ntwo\nthr", 0, limit=100, tail=False, truncated=False)
    assert (chunk.text, chunk.cursor, chunk.break_at, chunk.break_cursor) == (
        "one\ntwo\nthr",
        "11",
        8,
        "8",
    )
    assert not chunk.at_limit
    alone = byte_chunk(b"thr", 8, limit=100, tail=False, truncated=False)
    assert (alone.break_at, alone.break_cursor) == (0, "8")  # nothing whole yet
    whole = byte_chunk(b"one\r", 0, limit=100, tail=False, truncated=False)
    assert (whole.break_at, whole.break_cursor) == (None, None)  # \r ends a progress bar's line
    # characters, not bytes: "é" is two bytes
    wide = byte_chunk("é\nab".encode(), 5, limit=100, tail=False, truncated=False)
    assert (wide.text[: wide.break_at], wide.break_cursor) == ("é\n", "8")


def test_a_line_longer_than_the_read_is_broken_after_a_blank_never_inside_a_word():
    line = b"x" * 30 + b" token wk-0123456789abcdef and more words\n"
    pieces = _pieces(line, limit=48, first="0")
    texts = [text for text, _ in pieces if text]
    assert "".join(texts) == line.decode()
    assert all(text.endswith((" ", "\n")) for text in texts)
    assert any("wk-0123456789abcdef" in text for text in texts)  # never cut in two
    # a line without blanks is cut where the read stops
    blob = byte_chunk(b"y" * 48, 0, limit=48, tail=False, truncated=False)
    assert (blob.break_at, blob.at_limit) == (None, True)
