"""Fixtures of the API tests: the route isolation walk's world (two teams with data in every
model, tests/integration/security/test_route_isolation.py) and its role fixtures, which the
schema conformance test walks the same routes on."""

from tests.integration.roles import nick, vera  # noqa: F401
from tests.integration.security.test_route_isolation import world  # noqa: F401
