"""Statements bill egress: one egress line per (sub-team, source cluster, destination cluster),
included in the total and the CSV; closing freezes them with the GPU lines, and closing twice
(or re-running the meter) changes nothing. Another team's statement is a 404.

Clusters of ``conftest``: ``c4`` (800 GB) comes from ``archive`` at $0.02/GB to the ``cloud``
($16 per attempt); ``shards`` (123.457 GB, only on ``test`` at $0.0123/GB: $1.518521 per attempt)
has a cost below the cent, so the cents are checked, not only the dollars."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest

from billing import meter, selectors, statements
from billing.models import Statement, StatementEgressLine, StatementLine
from core.errors import Conflict
from scheduler.models import ClusterDataset, Dataset

from .conftest import utc

pytestmark = pytest.mark.django_db

NOV = utc(2026, 11, 1).date()
CLOSING = utc(2026, 12, 2)


@pytest.fixture
def november(c4, clouds, make_job, allocate, price, bob):
    """vision: job ``far`` on the cloud twice (1 h = $2, then 10 min 7 s = $0.337222), moving c4
    each time ($32). nlp: 1 h on the cloud ($2) moving shards ($1.518521)."""
    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    shards = Dataset.objects.create(name="shards", size_gb=123.457)
    ClusterDataset.objects.create(
        cluster=clouds["test"], dataset=shards, egress_price_per_gb=Decimal("0.0123")
    )
    far = make_job(name="far", dataset="c4")
    allocate(far, "c1", 0, utc(2026, 11, 10, 0), utc(2026, 11, 10, 1), attempt=1)
    allocate(far, "c1", 0, utc(2026, 11, 11, 0), utc(2026, 11, 11, 0, 10, 7), attempt=2)
    sharded = make_job(team="nlp", user=bob, name="sharded", dataset="shards")
    allocate(sharded, "c1", 1, utc(2026, 11, 12, 0), utc(2026, 11, 12, 1))
    meter.meter_run(now=utc(2026, 11, 20))
    return {
        "statements": {
            s.team.slug: s for s in Statement.objects.filter(month=NOV).select_related("team")
        },
        "far": far,
    }


def _egress(view):
    return [
        (e.team, e.from_cluster, e.to_cluster, e.charges, e.gb, e.cost) for e in view.egress_lines
    ]


EGRESS_LINES = [
    ("nlp", "test", "cloud", 1, Decimal("123.457"), Decimal("1.52")),
    ("vision", "archive", "cloud", 2, Decimal("1600.000"), Decimal("32.00")),
]


def test_an_open_statement_bills_gpu_lines_plus_egress_lines(november):
    view = selectors.statement_view(statement=november["statements"]["research"])
    assert [(x.team, x.cluster, x.cost) for x in view.lines] == [
        ("nlp", "cloud", Decimal("2.00")),
        ("vision", "cloud", Decimal("2.34")),  # 2 + 0.337222
    ]
    assert _egress(view) == EGRESS_LINES
    assert view.gpu_total == Decimal("4.34") and view.egress_total == Decimal("33.52")
    assert view.total == view.gpu_total + view.egress_total == Decimal("37.86")
    assert view.by_team == [("nlp", Decimal("3.52")), ("vision", Decimal("34.34"))]
    # A sub-team's statement carries its own egress only.
    nlp = selectors.statement_view(statement=november["statements"]["nlp"])
    assert (_egress(nlp), nlp.total) == ([EGRESS_LINES[0]], Decimal("3.52"))


def test_closing_freezes_egress_lines_once(november, make_job, allocate, platform_admin):
    research = november["statements"]["research"]
    closed = statements.statement_close(
        user=platform_admin, statement_id=research.pk, mode="chargeback", now=CLOSING
    )
    assert closed.total == Decimal("37.86")
    frozen = list(
        StatementEgressLine.objects.filter(statement=closed)
        .order_by("team__slug")
        .values_list("team__slug", "from_cluster", "to_cluster", "charges", "gb", "cost")
    )
    assert frozen == EGRESS_LINES
    gpu_lines = sum(StatementLine.objects.filter(statement=closed).values_list("cost", flat=True))
    assert gpu_lines + sum(e[-1] for e in frozen) == closed.total  # to the cent

    # Closing again is refused and writes nothing; neither do meter re-runs.
    with pytest.raises(Conflict):
        statements.statement_close(user=platform_admin, statement_id=closed.pk, now=CLOSING)
    meter.meter_run(now=utc(2026, 12, 3))
    meter.meter_run(now=utc(2026, 12, 3))
    closed.refresh_from_db()
    assert closed.total == Decimal("37.86")
    assert StatementEgressLine.objects.filter(statement=closed).count() == 2
    assert StatementLine.objects.filter(statement=closed).count() == 2

    # A November attempt reported after the close moves c4 once more: not on the statement,
    # shown as recorded after close (its GPU time and its egress).
    allocate(november["far"], "c1", 2, utc(2026, 11, 29, 0), utc(2026, 11, 29, 1), attempt=3)
    meter.meter_run(now=utc(2026, 12, 4))
    view = selectors.statement_view(statement=closed)
    assert (view.total, view.metered_after_close) == (Decimal("37.86"), Decimal("18.00"))
    assert _egress(view) == EGRESS_LINES

    # The frozen names stay whatever the clusters are called later.
    from scheduler.models import Cluster

    Cluster.objects.filter(name="archive").update(name="archive-renamed")
    assert _egress(selectors.statement_view(statement=closed)) == EGRESS_LINES


def test_csv_has_egress_rows_and_the_total_adds_up(november, client, alice):
    vision = november["statements"]["vision"]
    client.force_login(alice)
    body = client.get(f"/billing/statements/{vision.pk}/csv").content.decode()
    rows = list(csv.reader(io.StringIO(body)))
    assert rows[0] == [
        "month", "statement_team", "team", "gpu_model", "capacity", "gpu_hours", "cost_usd",
        "note", "cluster", "from_cluster", "gb", "unpriced_gpu_hours",
    ]  # fmt: skip
    assert all(len(r) == len(rows[0]) for r in rows)
    lines = [r for r in rows[1:] if r[2]]
    assert [(r[4], r[6], r[7], r[8], r[9], r[10]) for r in lines] == [
        ("on_demand", "2.34", "", "cloud", "", ""),
        ("egress", "32.00", "2 charges", "cloud", "archive", "1600.000"),
    ]
    [total] = [r for r in rows if r[4] == "total"]
    assert Decimal(total[6]) == sum(Decimal(r[6]) for r in lines) == Decimal("34.34")


def test_statement_api_and_page_show_egress_team_scoped(
    november, api_as, client, alice, bob, platform_admin
):
    statements = november["statements"]
    body = api_as(alice).get(f"/api/v1/billing/statements/{statements['vision'].pk}/").json()
    assert body["egress_lines"] == [
        {"team": "vision", "from_cluster": "archive", "to_cluster": "cloud", "charges": 2,
         "gb": "1600.000", "cost": "32.00"},
    ]  # fmt: skip
    assert (body["gpu_total"], body["egress_total"], body["computed_total"]) == (
        "2.34",
        "32.00",
        "34.34",
    )
    # bob (nlp) never sees vision's statement, its CSV or its egress.
    assert (
        api_as(bob).get(f"/api/v1/billing/statements/{statements['vision'].pk}/").status_code == 404
    )
    assert (
        api_as(bob).get(f"/api/v1/billing/statements/{statements['vision'].pk}/csv/").status_code
        == 404
    )
    nlp = api_as(bob).get(f"/api/v1/billing/statements/{statements['nlp'].pk}/").json()
    assert [e["team"] for e in nlp["egress_lines"]] == ["nlp"]
    # Bad input to close stays a 400 naming the field, and closes nothing.
    bad = api_as(platform_admin).post(
        f"/api/v1/billing/statements/{statements['vision'].pk}/close/",
        {"mode": "bogus"},
        format="json",
    )
    assert bad.status_code == 400 and "mode" in bad.json()
    assert not StatementEgressLine.objects.exists()
    closed = api_as(platform_admin).post(
        f"/api/v1/billing/statements/{statements['vision'].pk}/close/", {}, format="json"
    )
    assert closed.status_code == 200 and closed.json()["total"] == "34.34"
    again = api_as(platform_admin).post(
        f"/api/v1/billing/statements/{statements['vision'].pk}/close/", {}, format="json"
    )
    assert again.status_code == 409
    assert StatementEgressLine.objects.count() == 1

    client.force_login(alice)
    html = client.get(f"/billing/statements/{statements['vision'].pk}/").content.decode()
    assert "data-egress-total>$32.00<" in html and "data-total>$34.34<" in html
    assert "archive" in html
