"""Fixtures of the identity tests: the gpuctl runner of the CLI tests, and the group rules."""

import pytest

from tests.integration.cli.conftest import cli_config, gpuctl  # noqa: F401


@pytest.fixture
def rules(platform, teams):
    """ml-vision -> vision member, ml-leads -> vision admin, ml-nlp -> nlp viewer."""
    from tenants import identity

    admin = platform["admin"]
    identity.sso_rule_create(user=admin, group="ml-vision", team="vision", role="member")
    identity.sso_rule_create(user=admin, group="ml-leads", team="vision", role="admin")
    identity.sso_rule_create(user=admin, group="ml-nlp", team="nlp", role="viewer")
