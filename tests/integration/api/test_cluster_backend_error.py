"""A cluster's backend error is the backend's own text (a submit's stderr, a Kubernetes API
error body), which may echo another team's job. Platform admins see it whole on every surface;
everyone else sees only that the backend failed, and when."""

from datetime import UTC, datetime

import pytest
from django.test import Client

from scheduler.models import Cluster
from scheduler.services import cluster_backend_mark

pytestmark = pytest.mark.django_db

# What sbatch said about bob's (nlp's) run: its name, its command and a secret of its env.
NLP_JOB_ECHO = (
    "submit failed: sbatch: error: Batch job submission failed: gp-41-a1 "
    "'python train_secret_model.py' HF_TOKEN=hf_nlp_secret"
)
GENERIC = "the cluster's backend reported an error at 2026-12-07T04:00:00Z"


@pytest.fixture
def failed_cluster(platform):
    cluster = platform["cluster"]
    cluster_backend_mark(cluster=cluster, error=NLP_JOB_ECHO)
    Cluster.objects.filter(pk=cluster.pk).update(
        backend_checked_at=datetime(2026, 12, 7, 4, 0, tzinfo=UTC)
    )
    return cluster


def _page(user) -> str:
    client = Client()
    client.force_login(user)
    response = client.get("/cluster/")
    assert response.status_code == 200
    return response.content.decode()


def test_api_shows_the_backends_text_to_platform_admins_alone(platform, failed_cluster, api_as):
    for user in (platform["alice"], platform["bob"], platform["charlie"]):
        listed = api_as(user).get("/api/v1/clusters/").json()
        rows = listed["results"] if isinstance(listed, dict) else listed
        detail = api_as(user).get(f"/api/v1/clusters/{failed_cluster.pk}/").json()
        for row in (rows[0], detail):
            assert row["backend_available"] is False
            assert row["backend_error"] == GENERIC, user.username
    admin_detail = api_as(platform["admin"]).get(f"/api/v1/clusters/{failed_cluster.pk}/")
    assert admin_detail.json()["backend_error"] == NLP_JOB_ECHO


def test_cluster_page_shows_the_backends_text_to_platform_admins_alone(platform, failed_cluster):
    for user in (platform["alice"], platform["bob"]):
        page = _page(user)
        assert "backend is not answering" in page and GENERIC in page.replace("&#x27;", "'")
        assert "train_secret_model" not in page and "hf_nlp_secret" not in page
    assert "hf_nlp_secret" in _page(platform["admin"])


def test_an_answering_backend_shows_no_error(platform, api_as):
    cluster_backend_mark(cluster=platform["cluster"], error=NLP_JOB_ECHO)
    cluster_backend_mark(cluster=platform["cluster"])
    for user in (platform["alice"], platform["admin"]):
        row = api_as(user).get(f"/api/v1/clusters/{platform['cluster'].pk}/").json()
        assert row["backend_available"] is True and row["backend_error"] == ""
