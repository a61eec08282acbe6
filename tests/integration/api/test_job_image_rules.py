"""``image`` is an OCI image reference, a pyxis form (an enroot URI, a squashfs file) or nothing.
A reference outside those is never pulled: the kubelet fails every pod with InvalidImageName
(enroot likewise), so such a job used to wait its turn, take its GPUs and fail; now it is a 400
on ``image``."""

import pytest

from scheduler.models import Job, JobArray

pytestmark = pytest.mark.django_db

DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize(
    "image",
    [
        "PyTorch:2.4",  # the path must be lower case
        "pytorch 2.4",
        "registry.example.com/vision//train:1",
        "train:",
        "train:" + "t" * 129,  # tags are at most 128 characters
        "train@sha256:abc",  # not a digest
        "train:1 ; rm -rf /",
        "nvcr.io#NVIDIA/pytorch:24.05",  # an enroot URI's path is lower case too
        "#pytorch",
        "/shared/images/pytorch 24.05.sqsh",
    ],
)
def test_an_image_no_cluster_could_pull_is_a_400_on_image(platform, submit, image):
    response = submit(platform["alice"], image=image)
    assert response.status_code == 400, response.json()
    assert "is not an image reference" in str(response.json()["image"]), response.json()
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    "image",
    [
        "busybox",
        "pytorch:24.05",
        "nvcr.io/nvidia/pytorch:24.05-py3",
        "Registry.Example.com:5000/vision/train_v2__x/res-net:1.4",
        f"registry.example.com/vision/train@{DIGEST}",
        f"localhost:5000/a/b:1.2@{DIGEST}",
        # Slurm with pyxis (--container-image): an enroot URI, a squashfs file on the nodes
        "nvcr.io#nvidia/pytorch:24.05-py3",
        "alice@registry.example.com:5000#vision/train:1",
        "/shared/images/pytorch-24.05.sqsh",
    ],
)
def test_images_a_cluster_pulls_are_kept_as_given(platform, submit, image):
    response = submit(platform["alice"], image=image)
    assert response.status_code == 201, response.json()
    assert Job.objects.get().image == image


def test_an_array_item_with_an_image_no_cluster_could_pull_is_refused(platform, api_as):
    body = {
        "name": "sweep",
        "team": "vision",
        "template": {"workers": 1, "gpus_per_worker": 1, "image": "train:1"},
        "items": [{}, {"image": "Train:2"}],
    }
    response = api_as(platform["alice"]).post("/api/v1/job-arrays/", body, format="json")
    assert response.status_code == 400, response.json()
    assert "is not an image reference" in str(response.json()["items[1].image"])
    assert list(response.json()) == ["items[1].image"]
    assert JobArray.objects.count() == 0 and Job.objects.count() == 0


def test_an_array_template_with_an_image_no_cluster_could_pull_is_named_once(platform, api_as):
    body = {
        "name": "sweep",
        "team": "vision",
        "template": {"workers": 1, "gpus_per_worker": 1, "image": "Train:1"},
        "count": 3,
    }
    response = api_as(platform["alice"]).post("/api/v1/job-arrays/", body, format="json")
    assert response.status_code == 400, response.json()
    assert list(response.json()) == ["template.image"]
