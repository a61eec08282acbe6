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

The job's output is the same rule applied to text the job wrote (:func:`shown_log`): a job that
prints its environment, or echoes a token it was given, would otherwise show the values to the
viewers its record hides them from.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, TypeAlias

from tenants.audit import REDACTED, redact
from tenants.models import Team
from tenants.permissions import Caller, can_submit_to

HIDDEN_VALUE = "(hidden)"

# Both run on text a user wrote (a command, an environment value of any length), so each match
# attempt is bounded: the scheme is at most 32 characters (only its tail is ever matched, and
# kept), and a flag starts where no name character precedes it and names at most 64 on either
# side of its keyword. Unbounded, they backtracked over every start position of a long value,
# holding the interpreter's lock (and so every request of the server) for as long.
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]{0,31}://[^/\s:@]+:)[^@\s/]+@")
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_SCHEME_MAX_CHARS = 32


def _url_passwords_redacted(text: str) -> str:
    """``_URL_PASSWORD.sub`` (the password masked, the scheme and user kept), the same matches,
    but tried only where a ``://`` is: the pattern alone tries a scheme at every letter of the
    text, 150-200 ms over a value of a million letters, and a job's env values pass through here
    at every start, under the loop's lock."""
    out: list[str] = []
    done = 0  # the search goes on after the last match, as re.sub's does
    pos = text.find("://")
    while pos != -1:
        # A scheme cannot hold ':' or '/', so it ends at this "://": its leftmost start is the
        # first letter in the run of scheme characters (at most 32) just before it.
        start = pos
        lowest = max(done, pos - _SCHEME_MAX_CHARS)
        while start > lowest and text[start - 1] in _SCHEME_CHARS:
            start -= 1
        while start < pos and not text[start].isalpha():
            start += 1
        # What follows "://" is the same for every start, so the leftmost start decides.
        match = _URL_PASSWORD.match(text, start) if start < pos else None
        if match is None:
            pos = text.find("://", pos + 1)
            continue
        out += (text[done:start], match["scheme"], REDACTED, "@")
        done = match.end()
        pos = text.find("://", done)
    return "".join(out) + text[done:] if out else text


def _secret_argument(*, within_line: bool) -> re.Pattern[str]:
    # In a command a flag's value may follow on the next line (a continued shell line); in a
    # log it may not: a log is read in pieces that end on line ends, and the value of a flag
    # that ends one line must not be masked or shown depending on where a read stopped.
    gap, quoted = (r"[^\S\r\n]+", r"\r\n") if within_line else (r"\s+", "")
    # The flag's first "-", then the check that no name character precedes it: a pattern that
    # starts with a literal is searched for that character first (16x faster over a 10 MB log
    # than trying the lookbehind at every position); the matches are the same.
    return re.compile(
        r"(?P<flag>-(?<![A-Za-z0-9_-]-)-?[A-Za-z0-9_-]{0,64}?"
        r"(?:pass(?:word)?|secret|token|key|credential)[A-Za-z0-9_-]{0,64}"
        rf"(?:=|{gap}))(?P<value>\"[^\"{quoted}]*\"|'[^'{quoted}]*'|\S+)",
        re.I,
    )


_SECRET_ARGUMENT = _secret_argument(within_line=False)
_SECRET_ARGUMENT_IN_LINE = _secret_argument(within_line=True)


def redact_text(text: str, *, within_lines: bool = False) -> str:
    """``text`` with passwords in URLs, values of secret-named ``--flags`` and platform API
    tokens replaced by ``[redacted]``. ``within_lines``: a flag's value is looked for on the
    flag's own line only (a log's text, read in pieces of whole lines)."""
    argument = _SECRET_ARGUMENT_IN_LINE if within_lines else _SECRET_ARGUMENT
    text = _url_passwords_redacted(text)
    text = argument.sub(lambda m: f"{m['flag']}{REDACTED}", text)
    return str(redact(text))


def may_see_env_values(user: Caller, team: Team) -> bool:
    """Whether ``user`` sees the values of the env of ``team``'s jobs (not only the names)."""
    return can_submit_to(user, team)


def shown_env(env: dict[str, Any] | None, *, visible: bool) -> dict[str, Any]:
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


# Shorter values stay in the log: a value such as "1", "true", "cuda" or "en_US" occurs in
# ordinary output (step counts, words, paths), so masking each occurrence would garble the log
# a viewer reads, and a value that short hides nothing a viewer could not guess anyway.
MIN_MASKED_VALUE_CHARS = 6
_LINE_END = re.compile(r"[\r\n]+")


def shown_log(text: str, *, env: dict[str, Any] | None, visible: bool) -> str:
    """A job's output as shown: as written when ``visible``; else with every occurrence of a
    value of the job's ``env`` (of at least :data:`MIN_MASKED_VALUE_CHARS` characters) and
    what :func:`redact_text` redacts (a flag's value on its own line) replaced by
    ``[redacted]``, the record's mask.

    A value of several lines (a PEM key) is masked line by line, each line a value of its own,
    so a read that ends between two of its lines masks both halves. Overlapping occurrences of
    two values are masked as one. Linear in ``text``: one pass of one pattern for all the
    values, then the constant passes of :func:`redact_text`; the patterns are compiled once per
    environment."""
    if visible or not text:
        return text
    values = _env_values(env or {})
    if values:
        text = _mask_values(text, values)
    return redact_text(text, within_lines=True)


def _env_values(env: dict[str, Any]) -> tuple[str, ...]:
    """The pieces of ``env``'s values that are masked in a log, longest first, each once."""
    pieces = {
        piece.strip()
        for value in env.values()
        for piece in _LINE_END.split(str(value))
        if len(piece.strip()) >= MIN_MASKED_VALUE_CHARS
    }
    return tuple(sorted(pieces, key=lambda piece: (-len(piece), piece)))


def _mask_values(text: str, values: tuple[str, ...]) -> str:
    """``text`` with every stretch covered by an occurrence of one of ``values`` (longest
    first) replaced by ``[redacted]``."""
    patterns = _values_patterns(values)
    pieces: list[str] = []
    shown = 0
    while (match := patterns.first.search(text, shown)) is not None:
        start = match.start()
        end = patterns.end_of(text, start, match.group())
        probe = start + 1
        while probe < end:
            # A value starting inside this occurrence may reach past it ("abcdef" found first
            # in "abcdefgh" of a value "cdefgh"): mask up to its end too. The search looks at
            # most one longest key beyond the end, and yields occurrences, not positions.
            inner = patterns.inside.search(text, probe, end + patterns.reach)
            if inner is None or inner.start() >= end:
                break
            end = max(end, patterns.end_of(text, inner.start(), inner.group(1)))
            probe = inner.start() + 1
        pieces += (text[shown:start], REDACTED)
        shown = end
    pieces.append(text[shown:])
    return "".join(pieces)


# Values are looked for by their first characters at most (a key); a key found is extended to
# the longest of its values the text holds there. The pattern stays small however long a value
# is: the prefix tree of eight 120 KiB values took 8.5 s to compile, holding the interpreter's
# lock; of their keys, 10 ms.
_KEY_CHARS = 256


@dataclass(frozen=True)
class _ValuePatterns:
    first: re.Pattern[str]  # the longest key starting at a position
    inside: re.Pattern[str]  # the same as a lookahead: keys starting inside an occurrence
    longer: dict[str, tuple[str, ...]]  # key -> its values longer than it, longest first
    reach: int  # the longest key

    def end_of(self, text: str, start: int, key: str) -> int:
        """Where the occurrence of ``key`` at ``start`` ends: after the longest of its values
        found there, else after the key (a value's first characters are its secret too)."""
        for value in self.longer.get(key, ()):
            if text.startswith(value, start):
                return start + len(value)
        return start + len(key)


@functools.lru_cache(maxsize=256)
def _values_patterns(values: tuple[str, ...]) -> _ValuePatterns:
    """The patterns that find ``values`` (longest first): the keys' prefix tree (``/mnt/a|/mnt/b``
    as ``/mnt/(?:a|b)``), which rules a position out once, not once per value sharing a start
    (3x faster over a 10 MB log with 50 values than the flat alternation). A tree too deep for
    the regex compiler (thousands of values nested in each other) falls back to that
    alternation. Cached: a followed log is read every second with the same environment."""
    longer: dict[str, list[str]] = {}
    for value in values:
        if len(value) > _KEY_CHARS:
            longer.setdefault(value[:_KEY_CHARS], []).append(value)
    keys = tuple(dict.fromkeys(value[:_KEY_CHARS] for value in values))
    try:
        pattern = _prefix_tree(keys)
        compiled = re.compile(pattern), re.compile(f"(?=({pattern}))")
    except RecursionError:
        pattern = "|".join(map(re.escape, keys))
        compiled = re.compile(pattern), re.compile(f"(?=({pattern}))")
    return _ValuePatterns(
        *compiled,
        longer={key: tuple(found) for key, found in longer.items()},
        reach=max(map(len, keys)),
    )


# A prefix tree: each character to the tree of what may follow it ("" where a value ends).
_Tree: TypeAlias = dict[str, "_Tree"]


def _prefix_tree(values: tuple[str, ...]) -> str:
    """A regex of ``values`` as a prefix tree whose every branch matches as far as it can."""
    root: _Tree = {}
    for value in values:
        node = root
        for char in value:
            node = node.setdefault(char, {})
        node[""] = {}  # a value ends here

    def emit(node: _Tree) -> str:
        # A chain of single characters is one literal: no nesting per character.
        literal = []
        while len(node) == 1 and "" not in node:
            char, node = next(iter(node.items()))
            literal.append(re.escape(char))
        branches = [re.escape(char) + emit(child) for char, child in node.items() if char]
        if not branches:
            return "".join(literal)
        rest = branches[0] if len(branches) == 1 else f"(?:{'|'.join(branches)})"
        # Greedy: a longer value is tried first; the branches start with different characters,
        # so at most one can match.
        return "".join(literal) + (f"(?:{rest})?" if "" in node else rest)

    return emit(root)
