"""Passwords in URLs (``env_visibility.redact_text``) are found from each ``://`` rather than by
trying the pattern at every letter: the same matches as the pattern's own ``sub``, in linear
time on a long value; no database."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.env_visibility import _URL_PASSWORD, _url_passwords_redacted
from tenants.audit import REDACTED


def the_patterns_own(text: str) -> str:
    return _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)


# Mostly the characters the pattern turns on, so random texts hold many near-URLs.
_PIECES = st.sampled_from(
    ["a", "Z", "9", "+", ".", "-", ":", "/", "@", " ", "\n", "://", "é", "x" * 31, "s3", "@h"]
)


@settings(max_examples=3000, deadline=None)
@given(st.lists(_PIECES, max_size=60).map("".join))
def test_the_same_text_as_the_patterns_own_substitution(text):
    assert _url_passwords_redacted(text) == the_patterns_own(text)


def test_examples():
    cases = {
        "pull https://me:pa55@host/x": "pull https://me:[redacted]@host/x",
        "a://u:p@ b://v:q@": "a://u:[redacted]@ b://v:[redacted]@",
        "9http://u:p@h": "9http://u:[redacted]@h",  # the scheme starts at its first letter
        ("x" * 40) + "://u:p@h": ("x" * 40) + "://u:[redacted]@h",  # a scheme of 32 at most
        "http://u@h http://nopass/": "http://u@h http://nopass/",
        "": "",
    }
    for text, expected in cases.items():
        assert _url_passwords_redacted(text) == expected == the_patterns_own(text)
