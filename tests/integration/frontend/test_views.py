"""Portal pages (frontend.views): what each page shows, to whom, and that every action goes
through a service with its refusals visible and side-effect free."""

from __future__ import annotations

import gzip
import json
import re

import pytest
from django.test import Client

from scheduler import services, transitions
from scheduler.backends import reset_backends
from scheduler.loop.cycle import run_cycle
from scheduler.models import Job, JobEvent, Node, NodeEvent

pytestmark = pytest.mark.django_db

PAGES = ["/", "/jobs/", "/jobs/new/", "/jobs/states/?ids=1", "/cluster/", "/cluster/state/"]


@pytest.fixture(autouse=True)
def fresh_backends():
    reset_backends()
    yield
    reset_backends()


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def submit(user, team="vision", name="train", **fields):
    req = {"name": name, "team": team, "workers": 1, "gpus_per_worker": 1, **fields}
    return services.job_submit(user=user, request=services.JobRequest(**req))


@pytest.mark.parametrize("path", PAGES)
def test_pages_need_a_login(platform, path):
    response = Client().get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


@pytest.mark.parametrize("path", ["/", "/jobs/", "/jobs/new/", "/cluster/"])
def test_pages_render_and_load_no_external_assets(platform, path):
    html = client_for(platform["alice"]).get(path).content.decode()
    assert "<h1>" in html
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert sources and not [s for s in sources if s.startswith(("http:", "https:", "//"))]
    # Every input has a label (by for=id) or an aria-label.
    labelled = set(re.findall(r'<label[^>]*for="([^"]+)"', html))
    for tag in re.findall(r"<(?:input|select|textarea)\b[^>]*>", html):
        if 'type="hidden"' in tag:
            continue
        input_id = re.search(r'id="([^"]+)"', tag)
        assert "aria-label" in tag or (input_id and input_id.group(1) in labelled), tag


def test_home_lists_my_teams_jobs_and_quota_use_only(platform):
    from tenants.models import Quota

    Quota.objects.create(
        team=platform["alice"].memberships.get().team,
        gpu_model=Node.objects.get(name="n1").gpu_model,
        guaranteed_gpus=8,
        borrow_limit_gpus=4,
    )
    submit(platform["alice"], name="vit-large", gpus_per_worker=2, gpu_model="h100-80gb")
    submit(platform["bob"], team="nlp", name="bob-llm-secret")
    html = client_for(platform["alice"]).get("/").content.decode()
    assert "vit-large" in html
    assert "bob-llm-secret" not in html
    # Quota table: vision on h100 with 2 pending GPUs, 8 guaranteed, 4 to borrow.
    row = re.search(r"<th scope=\"row\">vision</th><td>h100-80gb</td>(.*?)</tr>", html, re.S)
    assert row is not None
    assert re.findall(r'<td class="num">(\d+)</td>', row.group(1)) == ["0", "2", "8", "4"]
    assert 'id="quota-figure"' in html


def test_home_says_which_quota_counts_a_model_the_team_has_none_for(platform):
    """A team without its own quota for a model is counted under its nearest ancestor's quota for
    it, or under none (docs/policy.md, rule 1c); the home page said "0 guaranteed, 0 to borrow,
    100 % of guarantee" for both, as if the team were over a limit of zero."""
    from tenants.models import Quota, Team

    h100 = Node.objects.get(name="n1").gpu_model
    Quota.objects.create(
        team=Team.objects.get(slug="research"),
        gpu_model=h100,
        guaranteed_gpus=16,
        borrow_limit_gpus=0,
    )
    submit(platform["alice"], name="on-h100", gpu_model="h100-80gb")
    submit(platform["alice"], name="on-a100", gpu_model="a100-40gb")
    html = client_for(platform["alice"]).get("/").content.decode()
    rows = dict(re.findall(r'<th scope="row">vision</th><td>([\w-]+)</td>(.*?)</tr>', html, re.S))
    assert "under research's quota" in rows["h100-80gb"], rows["h100-80gb"]
    assert "no quota" in rows["a100-40gb"], rows["a100-40gb"]
    for cells in rows.values():
        assert "%" not in cells and "<meter" not in cells
        assert re.findall(r'<td class="num">([^<]*)</td>', cells) == ["0", "1", "—", "—"]
    figure = json.loads(re.search(r'id="quota-figure"[^>]*>(.*?)</script>', html, re.S).group(1))
    guaranteed = next(t for t in figure["data"] if t["name"] == "Guaranteed")
    assert guaranteed["y"] == [None, None]


def test_job_list_filters_and_isolation(platform):
    alice, bob = platform["alice"], platform["bob"]
    submit(alice, name="a-pending")
    cancelled = submit(alice, name="a-cancelled")
    transitions.job_cancel(user=alice, job_id=cancelled.pk)
    submit(bob, team="nlp", name="b-pending")
    client = client_for(alice)

    html = client.get("/jobs/").content.decode()
    assert "a-pending" in html and "a-cancelled" in html and "b-pending" not in html
    html = client.get("/jobs/?state=cancelled").content.decode()
    assert "a-cancelled" in html and "a-pending" not in html
    # Another team, or none: the same 404 (docs/tenancy.md), not a list that says "no jobs".
    other, missing = client.get("/jobs/?team=nlp"), client.get("/jobs/?team=nope")
    assert other.status_code == missing.status_code == 404
    noise = re.compile(rb'(nonce|csrfmiddlewaretoken" value)="[^"]*"')
    bodies = [noise.sub(b"", r.content) for r in (other, missing)]
    assert bodies[0] == bodies[1] and b"b-pending" not in other.content
    html = client.get("/jobs/?submitter=bob").content.decode()
    assert "b-pending" not in html and "No jobs match" in html
    # Nonsense filters are ignored or match nothing; never an error.
    assert client.get("/jobs/?state=bogus&submitter=").status_code == 200
    assert client.get("/jobs/?team=%00").status_code < 500


def test_job_states_for_table_resync_are_scoped_to_the_caller(platform):
    mine = submit(platform["alice"], name="mine")
    theirs = submit(platform["bob"], team="nlp", name="theirs")
    transitions.job_cancel(user=platform["alice"], job_id=mine.pk)
    client = client_for(platform["alice"])
    data = client.get(f"/jobs/states/?ids={mine.pk},{theirs.pk},x,").json()
    assert data == {
        "jobs": {str(mine.pk): {"state": "cancelled", "why": "", "estimated_start": None}}
    }
    assert client.get("/jobs/states/").json() == {"jobs": {}}


def test_job_detail_shows_timeline_placement_log_and_is_404_for_other_teams(platform, settings):
    settings.SIMULATED_TIME_SCALE = 60.0
    job = submit(platform["alice"], name="detail-job", gpus_per_worker=2, gpu_model="h100-80gb")
    run_cycle()
    job.refresh_from_db()
    assert job.state == "running"
    client = client_for(platform["alice"])
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "detail-job" in html
    assert 'data-kind="submitted"' in html and 'data-kind="started"' in html
    assert html.count('class="gpu mine"') == 2
    assert "[gpuplatform] attempt 1" in html  # the simulated backend's log tail
    status = client.get(f"/jobs/{job.pk}/status/").json()
    assert status["state"] == "running" and status["attempts"] == 1
    assert '<tr data-attempt="1">' in html and "Output" in html
    assert sum(len(gpus) for gpus in status["placement"].values()) == 2

    bob = client_for(platform["bob"])
    assert bob.get(f"/jobs/{job.pk}/").status_code == 404
    assert bob.get(f"/jobs/{job.pk}/status/").status_code == 404


def test_the_job_pages_output_masks_the_jobs_secrets_for_a_viewer(platform, tmp_path):
    """The output pane's first text (the page's own read): the team's viewer sees the env
    values and the token the job printed masked, alice (a member) as printed."""
    import html as html_module

    from tests.joblogs import COMMAND, ENV, MASKED, PRINTED, SECRET, OutputFile

    job = submit(platform["alice"], name="prints-its-env", env=ENV, command=COMMAND)
    run_cycle()
    job.refresh_from_db()
    OutputFile(job, tmp_path).write(PRINTED + f"token {SECRET[:8]}")

    def pane(user) -> str:
        page = client_for(user).get(f"/jobs/{job.pk}/").content.decode()
        match = re.search(r'<pre class="log" id="log-tail"[^>]*>(.*?)</pre>', page, re.S)
        assert match is not None
        return html_module.unescape(match.group(1))

    # the viewer's pane ends before the unfinished line: the socket shows it once it is whole
    assert pane(platform["charlie"]) == MASKED.rstrip("\n")
    assert pane(platform["alice"]) == PRINTED + f"token {SECRET[:8]}"


def test_pending_job_page_says_why(platform):
    h100_gang = {"workers": 2, "gpus_per_worker": 8, "gpu_model": "h100-80gb"}
    submit(platform["alice"], name="first", **h100_gang)
    job = submit(platform["alice"], name="waiting", **h100_gang)
    run_cycle()
    job.refresh_from_db()
    html = client_for(platform["alice"]).get(f"/jobs/{job.pk}/").content.decode()
    assert job.why_pending and job.why_pending[:30] in html.replace("&#x27;", "'")
    assert (
        'id="pending-box"' in html
        and 'id="pending-box" aria-labelledby="pending-heading" hidden' not in html
    )


def test_cancel_goes_through_the_service_and_refusals_change_nothing(platform):
    alice, bob, charlie = platform["alice"], platform["bob"], platform["charlie"]
    job = submit(alice, name="to-cancel")

    assert client_for(bob).post(f"/jobs/{job.pk}/cancel/").status_code == 404
    response = client_for(charlie).post(f"/jobs/{job.pk}/cancel/", follow=True)
    assert "viewers cannot cancel jobs" in response.content.decode()
    job.refresh_from_db()
    assert job.state == "pending"
    assert not JobEvent.objects.filter(job=job, kind="cancelled").exists()

    assert client_for(alice).get(f"/jobs/{job.pk}/cancel/").status_code == 405
    response = client_for(alice).post(f"/jobs/{job.pk}/cancel/", follow=True)
    assert response.redirect_chain[-1][0] == f"/jobs/{job.pk}/"
    job.refresh_from_db()
    assert job.state == "cancelled"
    again = client_for(alice).post(f"/jobs/{job.pk}/cancel/", follow=True)
    assert "job is already cancelled" in again.content.decode()


def test_cluster_view_names_only_jobs_the_viewer_may_see(platform):
    job = submit(
        platform["alice"], name="alice-secret-run", gpus_per_worker=8, gpu_model="h100-80gb"
    )
    run_cycle()
    job.refresh_from_db()
    assert job.state == "running"

    alice_html = client_for(platform["alice"]).get("/cluster/").content.decode()
    assert alice_html.count("alice-secret-run") == 8  # one title per GPU
    bob = client_for(platform["bob"])
    bob_html = bob.get("/cluster/").content.decode()
    assert "alice-secret-run" not in bob_html
    assert bob_html.count(': in use"') == 8
    assert f'data-job="{job.pk}"' not in bob_html
    state = bob.get("/cluster/state/").json()
    assert "alice-secret-run" not in json.dumps(state)
    assert state["totals"] == {"free": 24, "in_use": 8, "unavailable": 0, "total": 32}
    assert "node-events" not in bob_html  # the admin feed is for admins


def test_admin_quarantines_drains_and_releases_from_the_cluster_view(platform):
    admin = client_for(platform["admin"])
    node = Node.objects.get(name="n2")
    html = admin.get("/cluster/").content.decode()
    assert 'id="node-events"' in html and f"/cluster/nodes/{node.pk}/quarantine/" in html

    response = admin.post(
        f"/cluster/nodes/{node.pk}/quarantine/", {"reason": "xid 79"}, follow=True
    )
    node.refresh_from_db()
    assert node.state == "quarantined" and node.state_reason == "xid 79"
    assert NodeEvent.objects.filter(node=node, kind="quarantined").count() == 1
    assert "xid 79" in response.content.decode()  # in the feed and the node's tooltip

    admin.post(f"/cluster/nodes/{node.pk}/release/")
    node.refresh_from_db()
    assert node.state == "ready"
    admin.post(f"/cluster/nodes/{node.pk}/drain/", {"reason": "maintenance"})
    node.refresh_from_db()
    assert node.state == "draining"

    # A quarantine without a reason is refused with a message, and changes nothing.
    other = Node.objects.get(name="n3")
    response = admin.post(f"/cluster/nodes/{other.pk}/quarantine/", {"reason": " "}, follow=True)
    other.refresh_from_db()
    assert other.state == "ready" and "give a reason" in response.content.decode()
    assert admin.post(f"/cluster/nodes/{other.pk}/explode/").status_code == 404

    # A reason longer than the node's record holds is refused whole, not cut (as the API does).
    for action in ("quarantine", "drain"):
        response = admin.post(
            f"/cluster/nodes/{other.pk}/{action}/", {"reason": "r" * 301}, follow=True
        )
        other.refresh_from_db()
        assert other.state == "ready" and "at most 300 characters" in response.content.decode()
    admin.post(f"/cluster/nodes/{other.pk}/drain/", {"reason": "r" * 300})
    other.refresh_from_db()
    assert other.state == "draining" and other.state_reason == "r" * 300


def release_form_shown(html: str, node: Node) -> bool:
    form = re.search(rf'<form[^>]*action="/cluster/nodes/{node.pk}/release/"[^>]*>', html)
    return form is not None and " hidden" not in form.group(0)


def test_admin_releases_a_down_node_from_the_cluster_view(platform):
    """A down node an admin had drained offers Release, which lifts the drain where the node
    stands (it stays down and comes back ready). A down node with nothing to lift does not, and
    a release posted anyway is refused with a message, changing nothing."""
    admin = client_for(platform["admin"])
    held, other = Node.objects.get(name="n2"), Node.objects.get(name="n3")
    Node.objects.filter(pk__in=[held.pk, other.pk]).update(state="down", state_reason="lost")
    services.node_drain(user=platform["admin"], node_id=held.pk, reason="firmware update")
    html = admin.get("/cluster/").content.decode()
    assert release_form_shown(html, held) and not release_form_shown(html, other)

    response = admin.post(f"/cluster/nodes/{held.pk}/release/", follow=True)
    assert response.status_code == 200 and "release done" in response.content.decode()
    held.refresh_from_db()
    assert (held.state, held.resume_state) == ("down", "")
    assert not release_form_shown(response.content.decode(), held)

    refused = admin.post(f"/cluster/nodes/{other.pk}/release/", follow=True)
    assert refused.status_code == 200
    assert "Release refused: node is down and neither drained nor quarantined" in (
        refused.content.decode()
    )
    other.refresh_from_db()
    assert other.state == "down" and not NodeEvent.objects.filter(node=other).exists()


def node_cell(html: str, node: Node) -> str:
    return re.search(rf'<li class="node[^"]*" id="node-{node.pk}".*?</li>', html, re.S).group(0)


def test_the_cluster_view_shows_what_a_down_node_comes_back_as(platform):
    """A down node an admin drained stays down and comes back drained. The page and the JSON the
    live view resyncs from showed only "down": nobody could see the drain waiting, and every
    resync hid the Release button the page had rendered for it. Both now carry the hold."""
    held, other = Node.objects.get(name="n2"), Node.objects.get(name="n3")
    Node.objects.filter(pk__in=[held.pk, other.pk]).update(state="down", state_reason="lost")
    services.node_drain(user=platform["admin"], node_id=held.pk, reason="firmware update")

    # Everyone sees the tooltip (with the state's reason, as before); admins also the Release.
    cell = node_cell(client_for(platform["alice"]).get("/cluster/").content.decode(), held)
    assert 'data-resume-state="draining"' in cell
    assert re.search(r"n2: Down, comes back drained, health", cell)
    tip = re.search(r'data-field="tip-state">([^<]*)<', cell).group(1)
    assert tip == "Down: lost — comes back drained: firmware update"
    plain = node_cell(client_for(platform["alice"]).get("/cluster/").content.decode(), other)
    assert 'data-resume-state=""' in plain and "comes back" not in plain

    nodes = {
        n["node"]: n for n in client_for(platform["alice"]).get("/cluster/state/").json()["nodes"]
    }
    assert (nodes["n2"]["state"], nodes["n2"]["reason"]) == ("down", "lost")
    assert (nodes["n2"]["resume_state"], nodes["n2"]["resume_reason"]) == (
        "draining",
        "firmware update",
    )
    assert (nodes["n3"]["resume_state"], nodes["n3"]["resume_reason"]) == ("", "")
    assert (nodes["n1"]["state"], nodes["n1"]["resume_state"]) == ("ready", "")


def test_the_cluster_view_shows_a_node_the_cluster_holds(platform):
    """A site admin drained n2 on Slurm (the sync's cluster hold): it is ready in the platform,
    but takes no new work, so its idle GPUs are unavailable, and the page says why."""
    held = Node.objects.get(name="n2")
    Node.objects.filter(pk=held.pk).update(cluster_hold="drained on the cluster: bios update")
    page = client_for(platform["alice"]).get("/cluster/").content.decode()
    cell = node_cell(page, held)
    assert 'data-cluster-hold="drained on the cluster: bios update"' in cell
    assert re.search(r"n2: Ready, no new work: drained on the cluster: bios update, health", cell)
    tip = re.search(r'data-field="tip-state">([^<]*)<', cell).group(1)
    assert tip == "Ready — no new work: drained on the cluster: bios update"
    unavailable = int(re.search(r'id="total-unavailable">(\d+)<', page).group(1))
    assert unavailable == held.gpu_count  # every other node is ready and held by nobody
    nodes = {
        n["node"]: n for n in client_for(platform["alice"]).get("/cluster/state/").json()["nodes"]
    }
    assert nodes["n2"]["cluster_hold"] == "drained on the cluster: bios update"
    assert nodes["n1"]["cluster_hold"] == ""


def test_the_cluster_view_shows_a_node_avoided_after_the_cluster_kept_a_run_pending(platform):
    """The loop gave up on a run Slurm kept pending on n3 (a reservation ahead) and avoids the
    node for a while: ready in the platform, no new work, until when; n4's avoidance is over."""
    from datetime import timedelta

    from django.utils import timezone

    avoided = Node.objects.get(name="n3")
    until = timezone.now() + timedelta(minutes=10)
    Node.objects.filter(pk=avoided.pk).update(avoid_until=until)
    Node.objects.filter(name="n4").update(avoid_until=timezone.now() - timedelta(seconds=1))
    why = f"the cluster kept a run placed here pending; no new run until {until:%Y-%m-%d %H:%M} UTC"
    page = client_for(platform["alice"]).get("/cluster/").content.decode()
    tip = re.search(r'data-field="tip-state">([^<]*)<', node_cell(page, avoided)).group(1)
    assert tip == f"Ready — no new work: {why}"
    unavailable = int(re.search(r'id="total-unavailable">(\d+)<', page).group(1))
    assert unavailable == avoided.gpu_count
    nodes = {
        n["node"]: n for n in client_for(platform["alice"]).get("/cluster/state/").json()["nodes"]
    }
    assert (nodes["n3"]["cluster_hold"], nodes["n4"]["cluster_hold"]) == (why, "")


def test_members_cannot_act_on_nodes(platform):
    node = Node.objects.get(name="n1")
    alice = client_for(platform["alice"])
    # An action for platform admins only: 403 (nodes belong to no team; nothing to hide).
    assert alice.post(f"/cluster/nodes/{node.pk}/quarantine/", {"reason": "x"}).status_code == 403
    node.refresh_from_db()
    assert node.state == "ready" and not NodeEvent.objects.exists()
    assert "/cluster/nodes/" not in alice.get("/cluster/").content.decode()


def test_a_node_action_finds_the_node_before_reading_the_reason(platform):
    """A member is refused (403) and a missing node is a 404 whatever reason is given: the
    quarantine's "give a reason" and a reason too long were checked first, so a member was told
    to give a reason for an action they may not take, and an admin for a node that is not
    there."""
    alice = client_for(platform["alice"])
    admin = client_for(platform["admin"])
    node = Node.objects.get(name="n1")
    for reason in (" ", "r" * 301):
        assert (
            alice.post(f"/cluster/nodes/{node.pk}/quarantine/", {"reason": reason}).status_code
            == 403
        )
        for action in ("quarantine", "drain"):
            missing = admin.post(f"/cluster/nodes/987654/{action}/", {"reason": reason})
            assert missing.status_code == 404, (action, reason)
    node.refresh_from_db()
    assert node.state == "ready" and not NodeEvent.objects.exists()


def test_plotly_is_served_locally_with_long_cache_headers(platform):
    from billing.charts import plotly_version

    client = client_for(platform["alice"])
    html = client.get("/cluster/").content.decode()
    src = f"/assets/plotly-{plotly_version()}.min.js"
    assert f'data-plotly="{src}"' in html  # charts.js loads it after the page's load event
    plain = Client().get(src)
    assert plain.status_code == 200
    assert plain["Cache-Control"] == "public, max-age=31536000, immutable"
    assert plain["Content-Type"].startswith("application/javascript")
    assert plain.content.startswith(b"/**") and len(plain.content) > 1_000_000
    packed = Client().get(src, HTTP_ACCEPT_ENCODING="gzip, br")
    assert packed["Content-Encoding"] == "gzip"
    assert gzip.decompress(packed.content) == plain.content
    assert Client().get("/assets/plotly-0.0.1.min.js").status_code == 404


def test_no_job_of_another_team_leaks_into_any_page(platform):
    job = submit(platform["alice"], name="alice-vision-secret", gpus_per_worker=4)
    run_cycle()
    bob = client_for(platform["bob"])
    for path in PAGES + [f"/jobs/{job.pk}/", "/jobs/?team=vision", "/jobs/?submitter=alice"]:
        response = bob.get(path)
        assert b"alice-vision-secret" not in response.content, path
    assert Job.objects.get(pk=job.pk).state == "running"


def test_job_list_says_when_a_pending_job_should_start_with_its_date_and_time_zone(platform):
    """The job page shows the estimated start in UTC; the list showed a bare "est. start 09:30",
    which reads as local time and hides that the start may be days away."""
    from datetime import UTC, datetime

    job = submit(platform["alice"])
    Job.objects.filter(pk=job.pk).update(estimated_start=datetime(2031, 3, 4, 9, 30, tzinfo=UTC))
    html = client_for(platform["alice"]).get("/jobs/").content.decode()
    assert re.search(r"est\. start <time[^>]*>Mar 4, 09:30</time> UTC", html), html


def test_job_states_give_a_pending_jobs_estimated_start_for_the_resync_to_paint(platform):
    """The job tables re-read their rows from /jobs/states/ when their stream says hello; an
    answer without the estimated start repainted every pending row without the "est. start"
    note the page had just rendered."""
    from datetime import UTC, datetime

    job = submit(platform["alice"])
    Job.objects.filter(pk=job.pk).update(estimated_start=datetime(2031, 3, 4, 9, 30, tzinfo=UTC))
    data = client_for(platform["alice"]).get(f"/jobs/states/?ids={job.pk}").json()
    assert data["jobs"][str(job.pk)]["estimated_start"] == "2031-03-04T09:30:00+00:00"
