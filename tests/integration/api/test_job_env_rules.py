"""What a job's ``env`` may not say: the variables a container runtime reads to pick the GPUs a
container gets. With the NVIDIA container toolkit's default configuration a pod that sets
NVIDIA_VISIBLE_DEVICES=all is given every GPU of its node, other teams' included, so the API
refuses such a job (and an array with such an index) before anything is stored."""

import pytest

from scheduler.models import Job, JobArray, JobEvent

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("name", ["NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_CONFIG_DEVICES"])
def test_a_job_choosing_its_gpus_is_a_400_on_env_and_writes_nothing(platform, submit, name):
    response = submit(platform["alice"], env={"EPOCHS": "3", name: "all"})
    assert response.status_code == 400, response.json()
    (message,) = response.json()["env"]
    assert message.startswith(f"{name} may not be set by a job"), message
    assert Job.objects.count() == 0 and JobEvent.objects.count() == 0


def test_an_array_index_choosing_its_gpus_refuses_the_array(platform, api_as):
    items = [{}, {"env": {"NVIDIA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}}]
    response = api_as(platform["alice"]).post(
        "/api/v1/job-arrays/",
        {
            "name": "sweep",
            "team": "vision",
            "template": {"workers": 1, "gpus_per_worker": 1},
            "items": items,
        },
        format="json",
    )
    assert response.status_code == 400, response.json()
    assert "NVIDIA_VISIBLE_DEVICES may not be set" in str(response.json()["items[1].env"])
    assert JobArray.objects.count() == 0 and Job.objects.count() == 0


def test_other_gpu_variables_a_job_may_set_are_kept(platform, submit):
    # Filters inside the GPUs the job was given, not a way to more of them.
    env = {"CUDA_VISIBLE_DEVICES": "0", "NVIDIA_TF32_OVERRIDE": "0"}
    response = submit(platform["alice"], env=env)
    assert response.status_code == 201, response.json()
    assert Job.objects.get().env == env


# A job that could never start: Linux refuses to start a program with a variable over 128 KiB
# (srun and the container's entry point fail with "Argument list too long", exit 126).
@pytest.mark.parametrize(
    "fields,field,needle",
    [
        ({"env": {"BIG": "x" * 140_000}}, "env", "'BIG' is 140004 bytes as NAME=value"),
        ({"env": {f"V{i}": "x" * 100_000 for i in range(11)}}, "env", "add up to"),
        ({"command": "echo " + "x" * 140_000}, "command", "is 140005 bytes"),
    ],
)
def test_an_environment_or_command_too_large_to_start_is_a_400(
    platform, submit, fields, field, needle
):
    response = submit(platform["alice"], **fields)
    assert response.status_code == 400, response.json()
    assert needle in str(response.json()[field]), response.json()
    assert Job.objects.count() == 0


def test_an_array_item_with_a_variable_too_large_to_start_is_refused(platform, api_as):
    body = {
        "name": "sweep",
        "team": "vision",
        "template": {"workers": 1, "gpus_per_worker": 1},
        "items": [{}, {"env": {"BIG": "x" * 140_000}}],
    }
    response = api_as(platform["alice"]).post("/api/v1/job-arrays/", body, format="json")
    assert response.status_code == 400, response.json()
    assert "'BIG' is 140004 bytes" in str(response.json()["items[1].env"])
    assert JobArray.objects.count() == 0 and Job.objects.count() == 0


def test_a_large_environment_a_program_can_start_with_is_kept(platform, submit):
    env = {f"V{i}": "x" * 100_000 for i in range(9)}
    response = submit(platform["alice"], env=env, command="echo " + "x" * 100_000)
    assert response.status_code == 201, response.json()
    assert Job.objects.get().env == env


def test_an_array_item_with_a_command_too_large_to_start_is_refused(platform, api_as):
    body = {
        "name": "sweep",
        "team": "vision",
        "template": {"workers": 1, "gpus_per_worker": 1, "command": "echo ok"},
        "items": [{}, {"command": "echo " + "x" * 140_000}],
    }
    response = api_as(platform["alice"]).post("/api/v1/job-arrays/", body, format="json")
    assert response.status_code == 400, response.json()
    assert list(response.json()) == ["items[1].command"]
    assert JobArray.objects.count() == 0 and Job.objects.count() == 0
