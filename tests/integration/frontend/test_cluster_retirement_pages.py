"""Retiring and reinstating a cluster from the portal's cluster page (platform admins, as the
API and gpuctl do): a confirmation page, then a CSRF-checked POST through
``scheduler.retirement``, a message after; a refusal is a message or the form again, never a 500;
everyone else sees no button and gets a 403 for the page and the POST, with nothing changed."""

from __future__ import annotations

import html
import re

import pytest
from django.test import Client

from scheduler.models import Cluster, Job, Node, NodeState
from scheduler.states import JobState
from tenants.models import AuditEntry

pytestmark = pytest.mark.django_db

RETIRE, REINSTATE = "/cluster/clusters/test/retire/", "/cluster/clusters/test/reinstate/"


def client_for(user, **options) -> Client:
    client = Client(**options)
    client.force_login(user)
    return client


def text_of(response) -> str:
    raw = re.sub(r"<[^>]+>", " ", response.content.decode())
    return re.sub(r"\s+", " ", html.unescape(raw))


def _unchanged() -> None:
    cluster = Cluster.objects.get(name="test")
    assert cluster.retiring_since is None and cluster.retired_at is None
    assert set(Node.objects.values_list("state", flat=True)) == {NodeState.READY}
    assert not AuditEntry.objects.filter(action__startswith="cluster.").exists()


def test_an_admin_retires_and_reinstates_a_cluster_from_the_cluster_page(platform, submit):
    admin = client_for(platform["admin"], enforce_csrf_checks=True)
    running = submit(platform["alice"], gpu_model="h100-80gb", simulated_duration_s=3600)
    Job.objects.filter(pk=running.json()["id"]).update(
        state=JobState.RUNNING, cluster=platform["cluster"]
    )
    page = admin.get("/cluster/").content.decode()
    assert f'href="{RETIRE}"' in page and f'href="{REINSTATE}"' not in page

    confirm = admin.get(RETIRE)
    assert confirm.status_code == 200
    said = text_of(confirm)
    assert "Retire cluster test?" in said
    assert "Its 4 nodes in service are drained now" in said
    assert "the 1 job running there now runs to its end" in said
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', confirm.content.decode())
    assert token is not None
    # No CSRF token: refused, nothing retired.
    assert admin.post(RETIRE, {"reason": "hall closes"}).status_code == 403
    _unchanged()

    done = admin.post(
        RETIRE, {"reason": "hall closes", "csrfmiddlewaretoken": token.group(1)}, follow=True
    )

    assert done.status_code == 200
    assert done.redirect_chain[-1][0] == "/cluster/#cluster-test"
    # Its job still runs there (the loop's finish marks it retired once that ends).
    assert "Cluster test: retiring. Its nodes are drained and retire as their jobs end" in text_of(
        done
    )
    cluster = Cluster.objects.get(name="test")
    assert cluster.retiring_since is not None and cluster.retired_at is None
    assert set(Node.objects.values_list("state", flat=True)) == {NodeState.RETIRED}
    assert set(Node.objects.values_list("retire_reason", flat=True)) == {"hall closes"}
    assert AuditEntry.objects.get(action="cluster.retire").actor == platform["admin"]
    # Its nodes are out of the grid: the page lists it apart, with the way back.
    page = done.content.decode()
    assert 'data-retired-cluster="test"' in page and f'href="{REINSTATE}"' in page

    confirm = admin.get(REINSTATE)
    assert "Reinstate cluster test?" in text_of(confirm)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', confirm.content.decode())
    back = admin.post(REINSTATE, {"csrfmiddlewaretoken": token.group(1)}, follow=True)

    assert "Cluster test: reinstated. Its nodes are back drained" in text_of(back)
    assert Cluster.objects.get(name="test").retiring_since is None
    assert set(Node.objects.values_list("state", flat=True)) == {NodeState.DRAINING}
    assert AuditEntry.objects.filter(action="cluster.reinstate").count() == 1
    assert f'href="{RETIRE}"' in back.content.decode()


def test_a_cluster_still_retiring_says_so_and_offers_reinstate(platform, submit):
    from django.utils import timezone

    Cluster.objects.filter(name="test").update(retiring_since=timezone.now())
    for user in ("alice", "admin"):
        page = client_for(platform[user]).get("/cluster/")
        assert "Being retired since" in text_of(page)
    page = client_for(platform["admin"]).get("/cluster/").content.decode()
    assert f'href="{REINSTATE}"' in page and f'href="{RETIRE}"' not in page
    again = client_for(platform["admin"]).get(RETIRE)
    assert "nothing to retire" in text_of(again)
    assert 'id="cluster-retirement-form"' not in again.content.decode()


def test_reinstating_a_cluster_in_service_is_a_message_not_a_500(platform):
    admin = client_for(platform["admin"])
    assert "nothing to reinstate" in text_of(admin.get(REINSTATE))
    response = admin.post(REINSTATE, follow=True)
    assert response.status_code == 200
    assert response.redirect_chain[-1][0] == "/cluster/"
    assert "Cluster test not reinstated: cluster test is not retired or retiring" in text_of(
        response
    )
    _unchanged()


def test_a_reason_too_long_shows_at_the_field_with_nothing_retired(platform):
    response = client_for(platform["admin"]).post(RETIRE, {"reason": "r" * 301})
    assert response.status_code == 400
    errors = re.search(r'data-errors-for="reason"><li>(.*?)</li>', response.content.decode())
    assert errors is not None and "at most 300 characters" in html.unescape(errors.group(1))
    assert 'id="cluster-retirement-form"' in response.content.decode()
    _unchanged()


def test_a_reason_the_database_cannot_store_is_a_400_naming_it(platform):
    response = client_for(platform["admin"]).post(RETIRE, {"reason": "before\x00after"})
    assert response.status_code == 400
    assert "reason" in response.json()
    _unchanged()


def test_everyone_else_sees_no_button_and_is_refused(platform):
    for user in ("alice", "bob"):
        member = client_for(platform[user])
        page = member.get("/cluster/").content.decode()
        assert "/cluster/clusters/" not in page and "Retire cluster" not in page
        for path in (RETIRE, REINSTATE, "/cluster/clusters/nope/retire/"):
            assert member.get(path).status_code == 403, path
            assert member.post(path, {"reason": "x"}).status_code == 403, path
    anonymous = Client().post(RETIRE, {"reason": "x"})
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")
    _unchanged()


def test_an_unknown_cluster_or_action_is_a_404_for_an_admin(platform):
    admin = client_for(platform["admin"])
    assert admin.get("/cluster/clusters/nope/retire/").status_code == 404
    assert admin.post("/cluster/clusters/nope/retire/").status_code == 404
    assert admin.post("/cluster/clusters/test/explode/").status_code == 404
    assert admin.put(RETIRE).status_code == 405
    _unchanged()
