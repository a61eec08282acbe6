"""gpuctl's argument parser: argparse whose usage errors raise ``UsageError`` (so ``main`` owns
every exit code) and name an option given before the command it belongs to."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from .common import UsageError


class CommandParser(argparse.ArgumentParser):
    """argparse, but usage errors raise instead of exiting, so ``main`` owns every exit code,
    and an option given before the command it belongs to is named as such."""

    _argv: list[str] = []

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        hint = self._misplaced_option()
        raise UsageError(f"{hint or message}\n{self.format_usage().rstrip()}")

    def _children(self) -> dict[str, CommandParser]:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                return dict(action.choices)
        return {}

    def _misplaced_option(self) -> str:
        """``--cluster is an option of `gpuctl whatif run` ...`` when an option this parser
        does not know belongs to a command below it. argparse took the option's value for the
        command (``gpuctl whatif --cluster x run``: "invalid choice: 'x'") or, with ``=``,
        said "unrecognized arguments" with the top level's usage; neither said what was wrong."""
        words = self._argv[: self._argv.index("--")] if "--" in self._argv else self._argv
        chain: list[CommandParser] = []  # the commands the words name, below this parser
        at: list[int] = []  # where each is named
        parser = self
        for i, word in enumerate(words):
            child = parser._children().get(word)
            if child is not None:
                chain.append(child)
                at.append(i)
                parser = child
        for i, word in enumerate(words):
            name = word.split("=", 1)[0]
            if not name.startswith("-") or name in self._option_string_actions:
                continue
            owners = [p for p in chain if name in p._option_string_actions]
            if not owners:
                owners = [p for p in self._descendants() if name in p._option_string_actions]
            if not owners:
                continue
            value = words[i + 1] if "=" not in word and i + 1 < len(words) else ""
            example = " ".join(w for w in (owners[0].prog, word, value) if w)
            named = ", ".join(f"`{p.prog}`" for p in owners[:3])
            given = ([self] + [p for p, j in zip(chain, at, strict=True) if j < i])[-1]
            return (
                f"{name} is an option of {named}, not of `{given.prog}`: give it after the "
                f"command it belongs to, e.g. `{example} ...`"
            )
        return ""

    def _descendants(self) -> list[CommandParser]:
        found: list[CommandParser] = []
        stack = list(self._children().values())
        while stack:
            parser = stack.pop(0)
            if parser not in found:  # aliases (show, get) share one parser
                found.append(parser)
                stack.extend(parser._children().values())
        return found
