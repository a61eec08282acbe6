"""Every command the documentation tells an operator to type exists, with the flags it shows.

test_docs_settings.py checks the other direction (what the code reads, some document names).
Here: a `manage.py <command> --flag`, `gpuctl <command> <action> --flag` or `python -m
scheduler.simulation <command> --flag` written in README.md or docs/**/*.md, in a code span or a
code block, is a command of this checkout and takes that flag. A renamed command or flag otherwise leaves a new site's operator with "Unknown command"
on the first day, and nothing in the suite notices."""

from __future__ import annotations

import argparse
import re
import shlex
from itertools import takewhile
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class

from gpuctl.main import build_parser
from scheduler.simulation.cli import build_parser as build_simulation_parser

ROOT = Path(__file__).resolve().parents[3]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
SPAN = re.compile(r"`([^`\n]+)`")
# Shown as what not to type (docs/jobspec.md: an option goes after the command it belongs to).
DOCUMENTED_MISTAKES = {"whatif --cluster x run"}
# Where one command of a shell line ends.
END = re.compile(r"\s(?:\||;|&&|#|>)\s|\)|$")


def snippets(markdown: str) -> list[str]:
    """The lines of the code blocks (a trailing backslash joins the next) and the code spans."""
    blocks = FENCE.findall(markdown)
    prose = FENCE.sub("", markdown)
    lines = []
    for block in blocks:
        lines.extend(block.replace("\\\n", " ").splitlines())
    return lines + SPAN.findall(prose)


def invocations(program: str) -> list[tuple[str, list[str]]]:
    """(document, words after `program`) for each invocation of it in the documents."""
    pattern = re.compile(rf"(?:^|[\s/(]){re.escape(program)}\s+(.*)")
    found = []
    for doc in DOCS:
        for snippet in snippets(doc.read_text()):
            for match in pattern.finditer(snippet):
                rest = match.group(1)
                rest = rest[: END.search(rest).start()]
                try:
                    words = shlex.split(rest)
                except ValueError:  # an unbalanced quote in a shortened example
                    words = rest.split()
                # After `--` the words are the job's command; `…` stands for anything.
                words = list(takewhile(lambda w: w not in ("--", "…"), words))
                if words and " ".join(words) not in DOCUMENTED_MISTAKES:
                    found.append((doc.relative_to(ROOT).as_posix(), words))
    return found


def flags(words: list[str]) -> list[str]:
    return [w.split("=", 1)[0] for w in words if re.fullmatch(r"--[a-z][a-z0-9-]*(=.*)?", w)]


def options_of(parser: argparse.ArgumentParser) -> set[str]:
    return set(parser._option_string_actions)


def test_the_documents_are_read_for_commands():
    manage = {words[0] for _, words in invocations("manage.py")}
    assert {"seed_demo", "export_trace", "import_nodes"} <= manage
    assert {"submit", "whatif"} <= {words[0] for _, words in invocations("gpuctl")}
    assert "compare" in {words[0] for _, words in invocations("-m scheduler.simulation")}


def test_every_documented_manage_command_exists_with_its_flags():
    commands = get_commands()
    wrong = []
    for doc, words in invocations("manage.py") + invocations("manage"):
        name = words[0]
        if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
            continue  # "manage <command>", prose
        if name not in commands:
            # `manage` is also an English word in code spans ("manage quotas"): only a word that
            # is a command or is followed by flags is taken for one.
            if flags(words) or len(words) == 1:
                wrong.append(f"{doc}: manage.py {name}: no such command")
            continue
        parser = load_command_class(commands[name], name).create_parser("manage.py", name)
        wrong += [
            f"{doc}: manage.py {name} {flag}: no such flag"
            for flag in flags(words)
            if flag not in options_of(parser)
        ]
    assert not wrong, wrong


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


CLIS = {
    "gpuctl": build_parser,
    ".venv/bin/gpuctl": build_parser,
    "-m scheduler.simulation": build_simulation_parser,
}


@pytest.mark.parametrize("program", sorted(CLIS))
def test_every_documented_cli_command_exists_with_its_flags(program):
    wrong = []
    for doc, words in invocations(program):
        parser = CLIS[program]()
        path = [program]
        known = options_of(parser)
        for word in words:
            if word.startswith("-"):
                continue
            choices = _subparsers(parser)
            if not choices:
                break
            if word not in choices:
                if not word.startswith("<"):
                    wrong.append(f"{doc}: {' '.join(path)} {word}: no such command")
                break
            parser = choices[word]
            path.append(word)
            known |= options_of(parser)
        wrong += [
            f"{doc}: {' '.join(path)} {flag}: no such flag"
            for flag in flags(words)
            if flag not in known
        ]
    assert not wrong, wrong
