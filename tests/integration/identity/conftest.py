"""Fixtures of the identity tests: the gpuctl runner of the CLI tests."""

from tests.integration.cli.conftest import cli_config, gpuctl  # noqa: F401
