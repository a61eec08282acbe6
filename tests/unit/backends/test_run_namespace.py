"""A cluster's run namespace must keep run names unambiguous and valid as Kubernetes names."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from scheduler.backends import _build


def _cluster(namespace: str) -> SimpleNamespace:
    return SimpleNamespace(
        pk=1, backend_kind="nonexistent", backend_config={"run_namespace": namespace}
    )


@pytest.mark.parametrize("namespace", ["1", "prod1", "Prod-", "a_b-", "x y-"])
def test_ambiguous_or_invalid_namespaces_are_refused(namespace):
    with pytest.raises(ValueError, match="run_namespace"):
        _build(_cluster(namespace))


@pytest.mark.parametrize("namespace", ["", "prod-", "p", "t1a2b3c4-", "eu-west-"])
def test_good_namespaces_pass_the_check(namespace):
    # The check passes; the made-up backend kind is what is refused next.
    with pytest.raises(ValueError, match="unknown backend kind"):
        _build(_cluster(namespace))
