import pytest

from scheduler.backends import reset_backends


@pytest.fixture
def fast_simulation(settings):
    """One real second is one simulated hour, on a simulated backend built afresh."""
    settings.SIMULATED_TIME_SCALE = 3600.0
    reset_backends()
    yield
    reset_backends()
