"""The ``gpuctl`` grammar: an option a command takes before its action (``gpuctl nodes
--cluster old retire n1``) is never silently replaced by the action's own default for an option
of the same name, which is what argparse does when both parsers write one attribute."""

from __future__ import annotations

import argparse

from gpuctl.main import build_parser


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def _own_dests(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {
        a.dest: a
        for a in parser._actions
        if a.option_strings and not isinstance(a, argparse._HelpAction)
    }


def test_no_action_option_overwrites_an_option_of_its_command():
    clashes = []
    for command_name, command in _subcommands(build_parser()).items():
        command_dests = _own_dests(command)
        for action_name, action in _subcommands(command).items():
            for dest, option in _own_dests(action).items():
                # An option whose default is SUPPRESS (the shared --json, --url) writes the
                # attribute only when given, so it keeps a value given before the action.
                if dest in command_dests and option.default is not argparse.SUPPRESS:
                    clashes.append(f"{command_name} {action_name} {option.option_strings[0]}")
    assert clashes == []
