import pytest

from scheduler.backends import reset_backends


@pytest.fixture
def fast_simulation(settings):
    """One real second is one simulated hour, on a simulated backend built afresh."""
    settings.SIMULATED_TIME_SCALE = 3600.0
    reset_backends()
    yield
    reset_backends()


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
