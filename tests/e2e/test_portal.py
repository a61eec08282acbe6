"""The portal in a real browser (Chromium via Playwright) against a live Daphne server with the
scheduling loop running: submit through the form, watch the job go pending -> running ->
succeeded without a reload, cancel another job, see a quarantine arrive live as an admin, and
never see another team's job names as bob (pages or websocket frames)."""

from __future__ import annotations

import re
import time

import pytest

from .conftest import shot, wait_live

pytestmark = pytest.mark.e2e

SECRET = "vision-secret"  # every job of alice's team in these tests carries it in its name


def _only_local(session) -> None:
    foreign = [
        u for u in session.requests if not u.startswith((session.base_url, "data:", "blob:"))
    ]
    assert foreign == [], foreign


def _wait_js(session, page, expression: str) -> None:
    """Wait for ``expression`` to hold; on a timeout, say what the page and its stream saw.

    Polled from here: ``page.wait_for_function`` compiles its predicate with ``eval`` inside the
    page, which the portal's Content-Security-Policy (no unsafe-eval) rightly refuses."""
    deadline_s = time.monotonic() + 30
    try:
        while not page.evaluate(expression):
            if time.monotonic() > deadline_s:
                raise TimeoutError(f"still false after 30 s: {expression}")
            page.wait_for_timeout(100)
    except Exception:
        print("page text:", page.locator("main").inner_text()[:2000])
        print("frames:", session.frames[-20:])
        print("console:", session.console)
        raise


def _submit_form(page, **values) -> None:
    for field, value in values.items():
        locator = page.locator(f"#id_{field}")
        if locator.evaluate("el => el.tagName") == "SELECT":
            locator.select_option(value)
        else:
            locator.fill(value)
    page.get_by_role("button", name="Submit job").click()


def test_alice_submits_a_job_watches_it_run_live_and_cancels_another(session_as):
    alice = session_as("alice")
    page = alice.login()
    wait_live(page)
    assert page.get_by_role("heading", name="My teams' jobs").is_visible()
    assert page.locator("tr", has_text="vision-secret-bigrun").is_visible()
    page.wait_for_selector(".chart .main-svg")  # the quota chart, drawn by the local plotly.js
    shot(page, "01-home")

    page.get_by_role("link", name="Submit", exact=True).click()
    _submit_form(
        page,
        name="vision-secret-e2e",
        team="vision",
        workers="1",
        gpus_per_worker="16",
        gpu_model="h100-80gb",
        simulated_duration_s="1800",
    )
    # Refused by job_submit: the message sits next to the field, which has the focus.
    error = page.locator('[data-errors-for="gpus_per_worker"]')
    assert "more than a h100-80gb node has (8)" in error.inner_text()
    assert page.evaluate("document.activeElement.id") == "id_gpus_per_worker"
    assert page.locator("#gpu-preview").inner_text().startswith("16 GPUs")
    shot(page, "02-submit-inline-errors")

    page.locator("#id_gpus_per_worker").fill("2")
    assert page.locator("#gpu-preview").inner_text() == "2 GPUs (1 × 2)"
    page.get_by_role("button", name="Submit job").click()
    page.wait_for_url(re.compile(r".*/jobs/\d+/$"))
    wait_live(page)
    # vision's whole H100 ceiling is held by its big run: the new job waits, and says why.
    assert page.locator("#job-state").inner_text() == "Pending"
    _wait_js(alice, page, "document.getElementById('why-pending').textContent.includes('quota')")
    page.evaluate("window.__noReload = 'still here'")
    shot(page, "03-job-pending")

    # Cancel the big run from another tab; the first tab only listens.
    other = alice.page("/jobs/?state=running")
    other.get_by_role("link", name="vision-secret-bigrun").click()
    other.get_by_role("button", name="Cancel job").click()
    assert other.locator("#job-state").inner_text() == "Cancelled"
    assert "cancelled" in other.locator(".messages").inner_text()
    assert other.get_by_role("button", name="Cancel job").count() == 0
    shot(other, "04-other-job-cancelled")

    page.wait_for_selector("#timeline li[data-live][data-kind=running]", timeout=20_000)
    assert page.locator("#placement .gpu.mine").count() == 2
    shot(page, "05-job-running")
    page.wait_for_selector("#timeline li[data-live][data-kind=succeeded]", timeout=20_000)
    assert page.locator("#job-state").inner_text() == "Succeeded"
    assert page.evaluate("window.__noReload") == "still here"
    live_kinds = page.locator("#timeline li[data-live]").evaluate_all(
        "items => items.map(li => li.dataset.kind)"
    )
    assert live_kinds[-2:] == ["running", "succeeded"]
    _wait_js(
        alice, page, "document.getElementById('log-tail').textContent.includes('training finished')"
    )
    assert page.locator("#placement-empty").is_visible()
    shot(page, "06-job-succeeded")

    page.goto("/jobs/")
    row = page.locator("tr", has_text="vision-secret-e2e")
    assert row.locator("[data-field=state]").inner_text() == "Succeeded"
    shot(page, "07-job-list")
    _only_local(alice)


def test_bob_never_sees_alice_jobs_on_pages_or_in_frames(session_as):
    bob = session_as("bob")
    bob.login()
    cluster = bob.page("/cluster/")
    jobs = bob.page("/jobs/")
    wait_live(cluster)
    wait_live(jobs)

    # Meanwhile alice submits and cancels a job, which the loop schedules and publishes.
    alice = session_as("alice")
    page = alice.login()
    # Her job is published on submit and on cancel, both while the submitting tab is between
    # pages (POST, redirect) with no socket open; a tab that only listens is sure to hear them.
    listener = alice.page("/jobs/")
    wait_live(listener)
    page.goto("/jobs/new/")
    _submit_form(
        page,
        name="vision-secret-hidden",
        team="vision",
        workers="1",
        gpus_per_worker="1",
        gpu_model="h100-80gb",
        simulated_duration_s="600000",
    )
    page.wait_for_url(re.compile(r".*/jobs/\d+/$"))
    alice_job_url = page.url
    page.get_by_role("button", name="Cancel job").click()
    assert page.locator("#job-state").inner_text() == "Cancelled"
    # alice hears her own job; by the time she has, it has been published everywhere.
    # Frames reach the test only while Playwright's event loop runs (the waits): poll, bounded.
    for _ in range(150):
        if any(p.get("name") == "vision-secret-hidden" for p in alice.payloads()):
            break
        page.wait_for_timeout(100)
    assert any(p.get("name") == "vision-secret-hidden" for p in alice.payloads())

    cluster.wait_for_timeout(1500)
    types = {p["type"] for p in bob.payloads()}
    assert "hello" in types and types & {"cluster.utilization", "node.status"}
    assert not [f for f in bob.frames if SECRET in f]
    updates = [p for p in bob.payloads() if p["type"] == "job.status"]
    updates += [j for p in bob.payloads() if p["type"] == "jobs.status" for j in p["jobs"]]
    assert all(p.get("team") in (None, "nlp") for p in updates)

    # Other teams' GPUs are only "in use" on bob's cluster view.
    busy = cluster.locator("li.node .gpu.busy").evaluate_all("els => els.map(e => e.title)")
    holders = {t.split(": ", 1)[1].split(",")[0] for t in busy}
    assert busy and all(h == "in use" or h.startswith("nlp") for h in holders), holders
    shot(cluster, "08-cluster-as-bob")

    view = bob.page()
    for path in [
        "/",
        "/jobs/",
        "/jobs/?team=vision",
        "/jobs/?submitter=alice",
        "/cluster/",
        "/cluster/state/",
    ]:
        view.goto(path)
        assert SECRET not in view.content(), path
    response = view.goto(alice_job_url)
    assert response.status == 404 and SECRET not in view.content()
    _only_local(bob)


def test_admin_sees_a_quarantine_arrive_live_and_releases_the_node(session_as):
    admin = session_as("admin")
    admin.login()
    watcher = admin.page("/cluster/")
    wait_live(watcher)
    watcher.evaluate("window.__noReload = 1")
    node = watcher.locator('li.node[data-node="r3-n05"]')
    assert node.get_attribute("data-state") == "ready"

    actor = admin.page("/cluster/")
    actor.locator('li[data-node="r3-n05"] summary').click()
    # A ready node has nothing to release; the form's display rule once outranked [hidden].
    assert actor.locator('li[data-node="r3-n05"]').get_by_role("button", name="Release").is_hidden()
    actor.get_by_label("Quarantine reason").locator("visible=true").fill("e2e: XID 79 storm")
    actor.locator('li[data-node="r3-n05"]').get_by_role("button", name="Quarantine").click()
    actor.wait_for_load_state()

    event = watcher.locator("#node-events li[data-live]", has_text="r3-n05").first
    event.wait_for()
    assert "quarantined" in event.inner_text() and "XID 79 storm" in event.inner_text()
    watcher.wait_for_selector('li.node[data-node="r3-n05"][data-state=quarantined]')
    assert node.locator("[data-field=node-state]").inner_text() == "QUARANTINED"
    # node.status carries no reason: the re-read of /cluster/state/ that follows it brings it.
    node.locator("[data-field=tip-state]", has_text="XID 79 storm").wait_for(state="attached")
    assert watcher.evaluate("window.__noReload") == 1
    shot(watcher, "09-cluster-quarantine-live")

    actor.locator('li[data-node="r3-n05"] summary').click()
    actor.locator('li[data-node="r3-n05"]').get_by_role("button", name="Release").click()
    watcher.locator("#node-events li[data-live]", has_text="released").first.wait_for()
    watcher.wait_for_selector('li.node[data-node="r3-n05"][data-state=ready]')
    _only_local(admin)


def test_a_node_that_goes_down_holding_a_drain_keeps_its_release_live(session_as):
    """node.status said only "down", so the cluster view hid Release on a node that went down
    holding a drain (and every resync from /cluster/state/ hid the one the page had rendered).
    The live update and the resync now show what the node comes back as and keep Release.

    The e2e cluster cannot take a node down on demand, so the payloads are the server's shapes
    fed to the page's own handlers: node.status through the stream's dispatcher, the resync's
    JSON as the server answered with one node's hold written in."""
    admin = session_as("admin")
    admin.login()
    page = admin.page("/cluster/")
    wait_live(page)
    node = page.locator('li.node[data-node="r3-n06"]')
    release = node.locator("form[action$='/release/']")
    tip = node.locator("[data-field=tip-state]")
    node.locator("summary").click()
    assert release.is_hidden()

    def status(resume_state: str) -> None:
        page.evaluate(
            """held => window.GP.emit("node.status", {type: "node.status", node: "r3-n06",
                state: "down", resume_state: held, health: 1, gpus: {}, time: "t"})""",
            resume_state,
        )

    status("draining")
    assert node.get_attribute("data-resume-state") == "draining"
    assert release.is_visible() and tip.text_content() == "Down — comes back drained"
    assert "r3-n06: down, comes back drained, health" in node.get_attribute("aria-label")
    status("")  # released while down: nothing to lift any more
    assert release.is_hidden() and tip.text_content() == "Down"

    def held_state(route) -> None:
        data = route.fetch().json()
        for row in data["nodes"]:
            if row["node"] == "r3-n06":
                row.update(state="down", reason="lost", resume_state="quarantined")
                row["resume_reason"] = "RMA GPU 3"
        route.fulfill(json=data)

    page.route("**/cluster/state/", held_state)
    page.evaluate("window.GP.emit('reconnected', {})")  # resyncs 0.2 s later
    page.wait_for_selector('li.node[data-node="r3-n06"][data-resume-state=quarantined]')
    assert tip.text_content() == "Down: lost — comes back quarantined: RMA GPU 3"
    assert release.is_visible()
    _only_local(admin)


def test_a_node_the_cluster_holds_arrives_live_and_stops_counting_as_free(session_as):
    """A site admin's drain on the cluster (the sync's cluster hold, with its node.status): the
    live view says the node takes no new work and counts its idle GPUs as unavailable, and so
    does the resync from /cluster/state/. Fed as the server's shapes, as above."""
    alice = session_as("alice")
    alice.login()
    page = alice.page("/cluster/")
    wait_live(page)
    node = page.locator('li.node[data-node="r3-n06"]')
    tip = node.locator("[data-field=tip-state]")
    free = page.locator("#total-free")
    idle = node.locator(".gpu.free").count()
    assert idle > 0
    before = int(free.text_content())

    def status(hold: str) -> None:
        page.evaluate(
            """hold => window.GP.emit("node.status", {type: "node.status", node: "r3-n06",
                state: "ready", resume_state: "", cluster_hold: hold, health: 1, gpus: {},
                time: "t"})""",
            hold,
        )

    status("drained on the cluster: bios update")
    assert node.get_attribute("data-cluster-hold") == "drained on the cluster: bios update"
    assert tip.text_content() == "Ready — no new work: drained on the cluster: bios update"
    assert ", no new work: drained on the cluster: bios update," in node.get_attribute("aria-label")
    assert int(free.text_content()) == before - idle
    status("")  # the cluster let it go
    assert tip.text_content() == "Ready" and int(free.text_content()) == before

    def held_state(route) -> None:
        data = route.fetch().json()
        for row in data["nodes"]:
            if row["node"] == "r3-n06":
                row["cluster_hold"] = "reserved on the cluster: maint until 2026-12-05T18:00:00"
        route.fulfill(json=data)

    page.route("**/cluster/state/", held_state)
    page.evaluate("window.GP.emit('reconnected', {})")  # resyncs 0.2 s later
    page.wait_for_selector('li.node[data-node="r3-n06"][data-cluster-hold^=reserved]')
    assert tip.text_content().endswith(
        "no new work: reserved on the cluster: maint until 2026-12-05T18:00:00"
    )
    assert int(free.text_content()) == before - idle
    _only_local(alice)


def test_pages_fit_a_phone_and_work_with_the_keyboard(session_as):
    phone = session_as("alice", viewport={"width": 390, "height": 844})
    page = phone.login()  # typed with the keyboard only
    for path, name in [
        ("/", "home"),
        ("/jobs/", "jobs"),
        ("/jobs/new/", "submit"),
        ("/cluster/", "cluster"),
        ("/teams/", "teams"),
        ("/teams/team/vision/", "team"),
        ("/teams/requests/", "quota-requests"),
    ]:
        page.goto(path)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1, f"{path} overflows a phone screen by {overflow}px"
        shot(page, f"phone-{name}")
    # The admin's pages carry the widest tables (weight forms in rows, the audit's details).
    admin = session_as("admin", viewport={"width": 390, "height": 844}).login()
    for path in ("/teams/manage/", "/teams/audit/"):
        admin.goto(path)
        overflow = admin.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1, f"{path} overflows a phone screen by {overflow}px"

    page.goto("/")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"

    page.goto("/cluster/")
    node = page.locator("li.node").first
    node.focus()  # nodes are focusable; the details tooltip shows on focus, not only on hover
    assert node.locator(".tip").is_visible()
    assert "GPUs in use" in node.get_attribute("aria-label")

    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(re.compile(r".*/login/$"))
    page.goto("/jobs/")
    assert "/login/" in page.url  # signed out: the portal asks to log in again


def test_alice_submits_a_sweep_sees_it_grouped_and_cancels_it_all(session_as):
    alice = session_as("alice")
    page = alice.login()
    page.goto("/jobs/new/")
    form = {
        "name": "vision-secret-sweep",
        "team": "vision",
        "workers": "1",
        "gpus_per_worker": "1",
        "gpu_model": "h100-80gb",
        "simulated_duration_s": "10000000",
        "array_count": "3",
        "array_params": "lr=0.1,0.01,0.001\ngpus_per_worker=1,16,1",
    }
    _submit_form(page, **form)
    # One bad index refuses the whole array; the error names the index, next to its field.
    error = page.locator('[data-errors-for="array_params"]')
    assert "index 1: gpus_per_worker: 16 GPUs per worker is more than" in error.inner_text()
    assert "Nothing was submitted" in page.locator("#error-summary").inner_text()
    shot(page, "20-sweep-bad-index")

    page.locator("#id_array_params").fill("lr=0.1,0.01,0.001")
    page.get_by_role("button", name="Submit job").click()
    page.wait_for_url(re.compile(r".*/arrays/\d+/$"))
    array_id = page.url.rstrip("/").rsplit("/", 1)[1]
    assert page.locator("table[data-array-members] tbody tr").count() == 3
    assert "lr=0.01" in page.locator("table[data-array-members]").inner_text()

    # Someone else watching the array's page sees its members cancelled without a reload.
    watcher = alice.page(f"/arrays/{array_id}/")
    wait_live(watcher)
    assert watcher.locator("table[data-array-members] tr[data-job]").count() == 3

    # The job list groups the three jobs under the array's header; it follows the cancel live,
    # even when its reads of the array's counts go wrong as they do under load: the first read
    # is held until the cancel has been announced and then answers what it read before the
    # cancel; the next one fails with a 503. (Only these two are touched: the server is real.)
    listing = alice.page()
    reads: list[str] = []  # what happened to each read of the counts, in order
    held = []

    def state_read(route):
        if not reads:
            held.append((route, route.fetch()))
            reads.append("held")
        elif len(reads) == 2:
            route.fulfill(status=503, body="busy")
            reads.append("503")
        else:
            route.continue_()
            reads.append("read")

    state_url = re.compile(rf"/arrays/{array_id}/state/$")
    listing.route(state_url, state_read)
    failed: list[str] = []  # reads of the counts the page gave up (aborted) itself

    def read_failed(request):
        if state_url.search(request.url):
            failed.append(request.url)

    listing.on("requestfailed", read_failed)
    listing.goto("/jobs/")
    wait_live(listing)
    header = listing.locator(f'tr.array-group[data-array="{array_id}"]')
    assert "vision-secret-sweep" in header.inner_text()
    assert listing.locator(f'tr.array-member[data-array="{array_id}"]').count() == 3
    listing.evaluate("window.__noReload = 'still here'")
    shot(listing, "21-sweep-grouped")
    for _ in range(150):  # the hello's read of the counts goes out 0.5 s after it; it is held
        if held:
            break
        listing.wait_for_timeout(100)
    assert held, "the listing never read the array's counts"

    page.get_by_text("Cancel all…").click()
    page.get_by_role("button", name="Yes, cancel 3 jobs").click()
    page.wait_for_selector(".messages")
    assert "every live job cancelled" in page.locator(".messages").inner_text()
    assert page.locator('[data-count="cancelled"]').inner_text() == "3 cancelled"
    assert page.get_by_text("Cancel all…").count() == 0

    # The cancel is one array.status; the listing's handler re-reads the member rows (that read
    # is not touched) and asks for the counts again while the held read is still out.
    all_cancelled = (
        "(function (badges) {{ return badges.length === 3 && Array.from(badges).every("
        "function (b) {{ return b.textContent === 'Cancelled'; }}); }})"
        "(document.querySelectorAll('{rows} [data-field=state]'))"
    )
    _wait_js(alice, listing, all_cancelled.format(rows=f'tr.array-member[data-array="{array_id}"]'))
    stale_route, stale_answer = held[0]
    assert stale_answer.json()["counts"]["cancelled"] == 0, stale_answer.text()
    stale_route.fulfill(response=stale_answer)
    reads.append("stale answer sent")
    counts = f'[data-array-counts="{array_id}"] [data-count="cancelled"]'
    _wait_js(
        alice,
        listing,
        f"(document.querySelector('{counts}') || {{}}).textContent === '3 cancelled'",
    )
    assert reads[:4] == ["held", "stale answer sent", "503", "read"], reads
    assert failed == [], failed  # the held read was answered, not given up by the page
    _wait_js(alice, watcher, all_cancelled.format(rows="table[data-array-members] tr[data-job]"))
    shot(page, "22-sweep-cancelled")
    assert listing.evaluate("window.__noReload") == "still here"
    _only_local(alice)


def test_an_admin_reaches_a_cluster_retirement_confirmation_and_backs_out(session_as):
    """The cluster page's "Retire cluster …" leads to a confirmation (under the page's
    Content-Security-Policy); backing out changes nothing. The confirmed POST is left to the
    Django test client's tests: a retired demo cluster would empty the grid the other tests use."""
    admin = session_as("admin")
    admin.login()
    page = admin.page("/cluster/")
    retire = page.get_by_role("link", name=re.compile(r"^Retire cluster "))
    assert retire.count() >= 1
    name = retire.first.inner_text().removeprefix("Retire cluster ").rstrip("…")
    retire.first.click()
    page.wait_for_selector("#cluster-retirement-form")
    assert page.locator("h1").inner_text() == f"Retire cluster {name}?"
    assert page.get_by_role("button", name=f"Retire {name}").is_visible()
    page.get_by_role("link", name="Back to the cluster").click()
    page.wait_for_selector(f"#cluster-{name}")
    assert page.get_by_role("link", name=f"Retire cluster {name}…").is_visible()
    shot(page, "10-cluster-retire-link")

    alice = session_as("alice")
    alice.login()
    member = alice.page("/cluster/")
    member.wait_for_selector(f"#cluster-{name}")
    assert member.get_by_role("link", name=re.compile(r"^(Retire|Reinstate) cluster ")).count() == 0
    _only_local(admin)
