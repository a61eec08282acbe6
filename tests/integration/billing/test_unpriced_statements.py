"""GPU time with no price in the book is billed at $0 and said so on statements: each line carries
its unpriced GPU-hours (live from usage while open, frozen with the line at close), the page
notes them above the lines, and the CSV and the API carry them. The total stays the lines."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest

from billing import meter, statements
from billing.models import Statement, StatementLine
from billing.selectors import statement_view

from .conftest import utc

pytestmark = pytest.mark.django_db

NOV = utc(2026, 11, 1).date()
NOTE = "GPU-hours had no price in the price book and are billed at $0"


@pytest.fixture
def half_priced(make_job, allocate, price, bob):
    """November 2026. vision: 2 GPU-h of H100 from the 10th 00:00, whose price ($2) starts at
    01:00: 1 GPU-h unpriced, $2. nlp: 1 GPU-h of A100, which has no price at all: $0."""
    price("h100", "on_demand", "2.00", utc(2026, 11, 10, 1))
    allocate(make_job(), "n1", 0, utc(2026, 11, 10, 0), utc(2026, 11, 10, 2))
    allocate(make_job(team="nlp", user=bob), "n3", 0, utc(2026, 11, 10, 0), utc(2026, 11, 10, 1))
    meter.meter_run(now=utc(2026, 11, 20))
    return {s.team.slug: s for s in Statement.objects.filter(month=NOV).select_related("team")}


def _lines(view):
    return [(x.team, x.gpu_hours, x.unpriced_gpu_hours, x.cost) for x in view.lines]


EXPECTED = [
    ("nlp", Decimal("1.0000"), Decimal("1.0000"), Decimal("0.00")),
    ("vision", Decimal("2.0000"), Decimal("1.0000"), Decimal("2.00")),
]


def test_an_open_statement_line_carries_its_unpriced_hours(half_priced):
    view = statement_view(statement=half_priced["research"])
    assert _lines(view) == EXPECTED
    assert view.unpriced_gpu_hours == Decimal("2.0000")
    assert view.total == sum((x.cost for x in view.lines), Decimal(0)) == Decimal("2.00")


def test_closing_freezes_the_unpriced_hours_with_the_line(
    half_priced, price, make_job, allocate, platform_admin
):
    statement = half_priced["research"]
    statements.statement_close(user=platform_admin, statement_id=statement.pk, now=utc(2026, 12, 2))
    assert sorted(
        StatementLine.objects.filter(statement=statement).values_list(
            "team__slug", "unpriced_gpu_hours"
        )
    ) == [("nlp", Decimal("1.0000")), ("vision", Decimal("1.0000"))]
    # Late unpriced usage for November changes the usage rows, not the closed lines.
    allocate(make_job(name="late"), "n2", 0, utc(2026, 11, 29, 0), utc(2026, 11, 29, 1))
    meter.meter_run(now=utc(2026, 12, 3))
    statement.refresh_from_db()
    view = statement_view(statement=statement)
    assert _lines(view) == EXPECTED
    assert (view.total, view.unpriced_gpu_hours) == (Decimal("2.00"), Decimal("2.0000"))


def test_the_page_notes_unpriced_hours_above_the_lines(half_priced, client, alice, bob):
    client.force_login(alice)
    html = client.get(f"/billing/statements/{half_priced['vision'].pk}/").content.decode()
    assert f"1.0000 {NOTE}" in html
    assert html.index(NOTE) < html.index('class="statement-lines"')
    assert "data-unpriced-gpu-hours" in html
    # bob's nlp statement is all unpriced; alice cannot see it.
    assert client.get(f"/billing/statements/{half_priced['nlp'].pk}/").status_code == 404
    client.force_login(bob)
    assert (
        f"1.0000 {NOTE}"
        in client.get(f"/billing/statements/{half_priced['nlp'].pk}/").content.decode()
    )


def test_a_fully_priced_statement_has_no_note(make_job, allocate, price, client, alice):
    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    allocate(make_job(), "n1", 0, utc(2026, 11, 10, 0), utc(2026, 11, 10, 1))
    meter.meter_run(now=utc(2026, 11, 20))
    statement = Statement.objects.get(team__slug="vision", month=NOV)
    client.force_login(alice)
    html = client.get(f"/billing/statements/{statement.pk}/").content.decode()
    assert NOTE not in html
    assert statement_view(statement=statement).unpriced_gpu_hours == Decimal(0)


def test_csv_appends_an_unpriced_column(half_priced, client, platform_admin):
    client.force_login(platform_admin)
    response = client.get(f"/billing/statements/{half_priced['research'].pk}/csv")
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    header = rows[0]
    # Appended after the existing columns, which keep their places.
    assert header[:11] == [
        "month", "statement_team", "team", "gpu_model", "capacity", "gpu_hours", "cost_usd",
        "note", "cluster", "from_cluster", "gb",
    ]  # fmt: skip
    assert header[11:] == ["unpriced_gpu_hours"]
    by_team = {r[2]: r for r in rows[1:] if r[2]}
    assert by_team["vision"][11] == "1.0000" and by_team["nlp"][11] == "1.0000"
    total = next(r for r in rows if r[4] == "total")
    assert total[6] == "2.00" and total[11] == ""


def test_api_lines_carry_unpriced_hours_and_other_teams_are_404(
    half_priced, api_as, alice, platform_admin
):
    as_alice = api_as(alice)
    detail = as_alice.get(f"/api/v1/billing/statements/{half_priced['vision'].pk}/").json()
    assert [(x["team"], x["unpriced_gpu_hours"]) for x in detail["lines"]] == [("vision", "1.0000")]
    assert detail["unpriced_gpu_hours"] == "1.0000"
    assert as_alice.get(f"/api/v1/billing/statements/{half_priced['nlp'].pk}/").status_code == 404
    research = (
        api_as(platform_admin)
        .get(f"/api/v1/billing/statements/{half_priced['research'].pk}/")
        .json()
    )
    assert research["unpriced_gpu_hours"] == "2.0000"
    assert research["computed_total"] == "2.00"
