"""Monthly statements: rolled up the team tree, closed = frozen (later usage and re-runs change
nothing; corrections are adjustments), CSV export, and 404 for another team's statement."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction

from billing import meter, services, statements
from billing.models import Statement, StatementLine
from billing.selectors import statement_view
from core.errors import Conflict, DomainError

from .conftest import utc

pytestmark = pytest.mark.django_db

NOV = utc(2026, 11, 1).date()


@pytest.fixture
def november(make_job, allocate, price, bob):
    """Nov 2026: vision 2 GPU-h of H100 at $2, nlp 1 GPU-h of A100 at $1."""
    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    price("a100", "on_demand", "1.00", utc(2026, 1, 1))
    allocate(make_job(), "n1", 0, utc(2026, 11, 10, 0), utc(2026, 11, 10, 2))
    allocate(make_job(team="nlp", user=bob), "n3", 0, utc(2026, 11, 10, 0), utc(2026, 11, 10, 1))
    meter.meter_run(now=utc(2026, 11, 20))
    return {s.team.slug: s for s in Statement.objects.filter(month=NOV).select_related("team")}


def test_statements_roll_up_the_team_tree(november):
    assert set(november) == {"vision", "nlp", "research"}
    research = statements.statement_live_lines(statement=november["research"])
    assert sorted((r["capacity"], r["cost"]) for r in research) == [
        ("on_demand", Decimal("1.000000")),
        ("on_demand", Decimal("4.000000")),
    ]
    vision = statements.statement_live_lines(statement=november["vision"])
    assert [r["cost"] for r in vision] == [Decimal("4.000000")]


def test_closed_statement_cannot_change(november, make_job, allocate, platform_admin, alice):
    statement = november["research"]
    with pytest.raises(Conflict):  # November is not over yet on the 20th
        statements.statement_close(
            user=platform_admin, statement_id=statement.pk, now=utc(2026, 11, 20)
        )
    with pytest.raises(DomainError):  # members do not close statements
        statements.statement_close(user=alice, statement_id=statement.pk, now=utc(2026, 12, 2))

    closed = statements.statement_close(
        user=platform_admin, statement_id=statement.pk, mode="chargeback", now=utc(2026, 12, 2)
    )
    assert (closed.status, closed.mode, closed.total) == ("closed", "chargeback", Decimal("5.00"))
    frozen = list(StatementLine.objects.filter(statement=closed).values_list("team__slug", "cost"))
    assert sorted(frozen) == [("nlp", Decimal("1.00")), ("vision", Decimal("4.00"))]

    # Late usage for November (an allocation reported after the close) and meter re-runs...
    allocate(make_job(name="late"), "n2", 0, utc(2026, 11, 29, 0), utc(2026, 11, 29, 3))
    meter.meter_run(now=utc(2026, 12, 3))
    meter.meter_run(now=utc(2026, 12, 3))
    # ...leave the closed statement exactly as it was, and say what was metered after close.
    closed.refresh_from_db()
    assert closed.total == Decimal("5.00")
    assert sorted(
        StatementLine.objects.filter(statement=closed).values_list("team__slug", "cost")
    ) == sorted(frozen)
    view = statement_view(statement=closed)
    assert (view.total, view.metered_after_close) == (Decimal("5.00"), Decimal("6.00"))

    with pytest.raises(Conflict):
        statements.statement_close(
            user=platform_admin, statement_id=closed.pk, now=utc(2026, 12, 3)
        )
    # The database refuses a closed statement without its frozen total.
    with pytest.raises(IntegrityError), transaction.atomic():
        Statement.objects.filter(pk=closed.pk).update(total=None)

    # Corrections are adjustments: the frozen total stays, the adjusted total moves.
    statements.adjustment_add(
        user=platform_admin, statement_id=closed.pk, amount=Decimal("6.00"), reason="late usage"
    )
    view = statement_view(statement=closed)
    assert (view.total, view.adjusted_total) == (Decimal("5.00"), Decimal("11.00"))


def test_statement_api_is_scoped_and_exports_csv(november, api_as, alice, bob, platform_admin):
    vision, nlp = november["vision"], november["nlp"]
    as_alice = api_as(alice)
    listed = as_alice.get("/api/v1/billing/statements/").json()["results"]
    assert {s["team"] for s in listed} == {"vision"}
    assert as_alice.get(f"/api/v1/billing/statements/{nlp.pk}/").status_code == 404
    assert as_alice.get(f"/api/v1/billing/statements/{nlp.pk}/csv/").status_code == 404
    assert api_as(bob).get(f"/api/v1/billing/statements/{vision.pk}/").status_code == 404

    detail = as_alice.get(f"/api/v1/billing/statements/{vision.pk}/").json()
    assert detail["month"] == "2026-11" and detail["computed_total"] == "4.00"
    assert detail["lines"] == [
        {
            "team": "vision",
            "gpu_model": "h100-80gb",
            "capacity": "on_demand",
            "gpu_hours": "2.0000",
            "cost": "4.00",
            "cluster": "test",
            "unpriced_gpu_hours": "0.0000",
        }
    ]
    response = as_alice.get(f"/api/v1/billing/statements/{vision.pk}/csv/")
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == [
        "month",
        "statement_team",
        "team",
        "gpu_model",
        "capacity",
        "gpu_hours",
        "cost_usd",
        "note",
        "cluster",
        "from_cluster",
        "gb",
        "unpriced_gpu_hours",
    ]
    assert rows[1] == [
        "2026-11",
        "vision",
        "vision",
        "h100-80gb",
        "on_demand",
        "2.0000",
        "4.00",
        "",
        "test",
        "",
        "",
        "0.0000",
    ]
    assert rows[-1][6] == "4.00"  # cost_usd keeps its place; later columns are appended

    # Members cannot close; admins can, and the detail then shows the frozen lines.
    assert as_alice.post(f"/api/v1/billing/statements/{vision.pk}/close/").status_code == 400
    closed = api_as(platform_admin).post(f"/api/v1/billing/statements/{vision.pk}/close/")
    assert closed.status_code == 200 and closed.json()["total"] == "4.00"
    again = api_as(platform_admin).post(f"/api/v1/billing/statements/{vision.pk}/close/")
    assert again.status_code == 409


def test_portal_statement_pages(november, client, alice, bob):
    vision = november["vision"]
    client.force_login(alice)
    page = client.get(f"/billing/statements/{vision.pk}/")
    assert page.status_code == 200 and b"$4.00" in page.content
    assert client.get(f"/billing/statements/{vision.pk}/csv").status_code == 200
    client.force_login(bob)
    assert client.get(f"/billing/statements/{vision.pk}/").status_code == 404
    assert client.get(f"/billing/statements/{vision.pk}/csv").status_code == 404
    listing = client.get("/billing/statements/")
    assert (
        b"nlp" in listing.content
        and f"/billing/statements/{vision.pk}/".encode() not in listing.content
    )


def test_a_closed_statement_with_nothing_late_shows_nothing_recorded_after_close(
    make_job, allocate, price, bob, platform_admin, client
):
    # Two lines whose cents round down ($2.004 and $1.004): the bill says $3.00 (its lines to
    # the cent), while the exact usage rounds once to $3.01.
    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    price("a100", "on_demand", "1.00", utc(2026, 1, 1))
    start = utc(2026, 11, 10)
    allocate(make_job(), "n1", 0, start, start + timedelta(seconds=3607, milliseconds=200))
    allocate(
        make_job(team="nlp", user=bob),
        "n3",
        0,
        start,
        start + timedelta(seconds=3614, milliseconds=400),
    )
    meter.meter_run(now=utc(2026, 11, 20))
    research = Statement.objects.get(team__slug="research", month=NOV)

    closed = statements.statement_close(
        user=platform_admin, statement_id=research.pk, now=utc(2026, 12, 2)
    )
    meter.meter_run(now=utc(2026, 12, 2))

    view = statement_view(statement=closed)
    assert (view.total, view.gpu_total, view.metered_after_close) == (
        Decimal("3.00"),
        Decimal("3.00"),
        Decimal("0.00"),
    )
    client.force_login(platform_admin)
    page = client.get(f"/billing/statements/{closed.pk}/").content.decode()
    assert "recorded after it was closed" not in page


def _moved_under_ops(platform_admin, teams):
    from tenants.models import Team
    from tenants.teams import team_update

    ops = Team.objects.create(slug="ops", name="Ops")
    team_update(user=platform_admin, team=teams["vision"], parent=ops)
    return ops


def _statement_totals(month):
    return {
        s.team.slug: statement_view(statement=s).total
        for s in Statement.objects.filter(month=month).select_related("team")
    }


def test_a_team_moved_mid_month_is_billed_once_under_its_new_parent(
    november, make_job, allocate, platform_admin, teams
):
    ops = _moved_under_ops(platform_admin, teams)
    allocate(make_job(name="after-move"), "n1", 1, utc(2026, 11, 21), utc(2026, 11, 21, 1))
    meter.meter_run(now=utc(2026, 11, 22))

    # The tree as it is now: vision's whole month (before and after the move) under ops only.
    totals = _statement_totals(NOV)
    assert totals == {
        "ops": Decimal("6.00"),
        "vision": Decimal("6.00"),
        "research": Decimal("1.00"),
        "nlp": Decimal("1.00"),
    }
    spends = services.team_spends(month=NOV)
    assert (spends[ops.pk], spends[teams["research"].pk]) == (Decimal(6), Decimal(1))


def test_a_team_moved_after_its_month_ended_is_on_its_new_parents_statement(
    november, platform_admin, teams
):
    # Moved once November is over but before its statements close: nothing of vision is
    # metered for November any more, and its November must still reach a root's bill.
    _moved_under_ops(platform_admin, teams)
    meter.meter_run(now=utc(2026, 12, 2))

    totals = _statement_totals(NOV)
    assert (totals.get("ops"), totals["research"]) == (Decimal("4.00"), Decimal("1.00"))


def test_a_month_the_meter_has_not_caught_up_with_is_not_closed(
    make_job, allocate, price, bob, platform_admin, api_as
):
    """8 GPUs of vision running across the month's end, metered last at 23:00 on Nov 30; nlp's
    run ended at 23:30, metered only up to 23:00 too. Closed 30 s into December, before the next
    meter run, the bill froze at $32.40 instead of $63.00: the last hour showed as "recorded
    after close", to settle by hand. The close is refused (409, nothing written) until the
    meter has run past the month's end; then the bill is whole."""
    price("h100", "on_demand", "3.60", utc(2026, 1, 1))  # $0.001 per GPU-second
    price("a100", "on_demand", "3.60", utc(2026, 1, 1))
    running = make_job(name="across")
    for gpu in range(8):
        allocate(running, "n1", gpu, utc(2026, 11, 30, 22, 0))
    ended = allocate(make_job(team="nlp", user=bob, name="ended"), "n3", 0, utc(2026, 11, 30, 22))
    meter.meter_run(now=utc(2026, 11, 30, 23))
    type(ended).objects.filter(pk=ended.pk).update(ended_at=utc(2026, 11, 30, 23, 30))
    research = Statement.objects.get(team__slug="research", month=NOV)
    nlp = Statement.objects.get(team__slug="nlp", month=NOV)

    with pytest.raises(Conflict) as refused:
        statements.statement_close(
            user=platform_admin, statement_id=research.pk, now=utc(2026, 12, 1, 0, 0, 30)
        )
    assert refused.value.field == "status"
    assert "not fully metered yet: 9 GPU allocations" in refused.value.message
    answer = api_as(platform_admin).post(f"/api/v1/billing/statements/{nlp.pk}/close/")
    assert answer.status_code == 409 and "1 GPU allocation of" in answer.json()["status"][0]
    research.refresh_from_db()
    assert (research.status, research.total, research.lines.count()) == ("open", None, 0)

    meter.meter_run(now=utc(2026, 12, 1, 0, 1))
    closed = statements.statement_close(
        user=platform_admin, statement_id=research.pk, now=utc(2026, 12, 1, 0, 1, 30)
    )
    # vision 8 x 2 h, nlp 1.5 h, at $3.60 per GPU-hour
    assert closed.total == Decimal("63.00")
    assert statement_view(statement=closed).metered_after_close == Decimal("0.00")


def test_usage_withdrawn_after_close_is_not_called_recorded_after_close(
    make_job, allocate, price, platform_admin, client
):
    """8 GPUs placed at 23:58 on Nov 30, metered at 00:01 (2 minutes each in November: $0.96),
    the month closed at 00:01:30, then the run given up as never started by the cluster: its
    November rows go. The closed bill keeps $0.96, and its page said "-$0.96 of usage or egress
    for this month was recorded after it was closed ... (add an adjustment to bill it)"."""
    from scheduler.transitions import job_requeue_unstarted

    price("h100", "on_demand", "3.60", utc(2026, 1, 1))  # $0.001 per GPU-second
    job = make_job(name="ghost", attempts=1, started_at=utc(2026, 11, 30, 23, 58))
    for gpu in range(8):
        allocate(job, "n1", gpu, utc(2026, 11, 30, 23, 58))
    meter.meter_run(now=utc(2026, 12, 1, 0, 1))
    research = Statement.objects.get(team__slug="research", month=NOV)
    closed = statements.statement_close(
        user=platform_admin, statement_id=research.pk, now=utc(2026, 12, 1, 0, 1, 30)
    )
    assert closed.total == Decimal("0.96")

    assert job_requeue_unstarted(job=job, now=utc(2026, 12, 1, 0, 5), reason="kept pending")
    meter.meter_run(now=utc(2026, 12, 1, 0, 6))

    view = statement_view(statement=closed)
    assert (view.total, view.metered_after_close, view.withdrawn_after_close) == (
        Decimal("0.96"),
        Decimal("-0.96"),
        Decimal("0.96"),
    )
    client.force_login(platform_admin)
    page = client.get(f"/billing/statements/{closed.pk}/").content.decode()
    assert "recorded after it was closed" not in page and "-$0.96" not in page
    assert "$0.96 billed on this statement left the month" in page
    assert "add a credit adjustment to refund it" in page


def test_a_teams_usage_is_charged_back_on_one_statement_of_the_month(november, platform_admin):
    """research's statement covers vision's and nlp's usage. Closing vision's and research's
    November both as chargeback charged vision's $4 twice; the second is now refused, and
    showback (which charges nobody) is not."""
    vision, research, nlp = november["vision"], november["research"], november["nlp"]
    statements.statement_close(
        user=platform_admin, statement_id=vision.pk, mode="chargeback", now=utc(2026, 12, 2)
    )
    with pytest.raises(Conflict, match="sub-team vision is already closed as chargeback") as twice:
        statements.statement_close(
            user=platform_admin, statement_id=research.pk, mode="chargeback", now=utc(2026, 12, 2)
        )
    assert twice.value.field == "mode"
    research.refresh_from_db()
    assert (research.status, research.total) == ("open", None)
    assert not StatementLine.objects.filter(statement=research).exists()
    # A sibling's chargeback and the parent's showback are not a second charge.
    statements.statement_close(
        user=platform_admin, statement_id=nlp.pk, mode="chargeback", now=utc(2026, 12, 2)
    )
    shown = statements.statement_close(
        user=platform_admin, statement_id=research.pk, mode="showback", now=utc(2026, 12, 2)
    )
    assert (shown.status, shown.mode, shown.total) == ("closed", "showback", Decimal("5.00"))


def test_a_parents_chargeback_refuses_its_sub_teams(november, platform_admin):
    statements.statement_close(
        user=platform_admin, statement_id=november["research"].pk, mode="chargeback",
        now=utc(2026, 12, 2),
    )  # fmt: skip
    with pytest.raises(Conflict, match="parent team research is already closed as chargeback"):
        statements.statement_close(
            user=platform_admin, statement_id=november["nlp"].pk, mode="chargeback",
            now=utc(2026, 12, 2),
        )  # fmt: skip
