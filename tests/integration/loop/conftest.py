import pytest

from scheduler.backends import reset_backends


@pytest.fixture
def fast_simulation(settings):
    """One real second is one simulated hour, on a simulated backend built afresh."""
    settings.SIMULATED_TIME_SCALE = 3600.0
    reset_backends()
    yield
    reset_backends()


@pytest.fixture
def jobs_outlive_the_test(monkeypatch):
    """A job submitted without a simulated duration runs for a simulated year, not the backend's
    default half hour: at one simulated hour per real second that half hour is 0.5 s, which a
    few cycles on a loaded machine outlast, and a job a test expects running had finished."""
    from scheduler.backends import simulated

    monkeypatch.setattr(simulated, "DEFAULT_SERVICE_TIME_S", 365 * 86_400.0)


def fill_with_best_effort(platform, submit, **extra) -> list[int]:
    """Four preemptible best-effort jobs of nlp, eight GPUs each: the test cluster full, so a
    production job must preempt one. Returns their ids."""
    return [
        submit(
            platform["bob"],
            team="nlp",
            name=f"low-{i}",
            gpus_per_worker=8,
            priority_class="best-effort",
            preemptible=True,
            **extra,
        ).json()["id"]
        for i in range(4)
    ]
