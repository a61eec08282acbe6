"""Billing across clusters (issue 25): prices per cluster overriding the platform-wide book, the
meter pricing each allocation by its node's cluster and recording it, egress charges for moving
a dataset to a cluster without a copy, and the dashboards, API and statements split by cluster.

Two clusters with H100s: ``test`` (the shared fixture, nodes n1..n4) and ``cloud`` (node c1);
``archive`` holds a dataset and has no nodes."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from billing import dashboards, meter, selectors, services, statements
from billing.models import EgressCharge, PriceRate, Statement, UsageDaily, UsageRecord
from scheduler.models import Cluster, Dataset

from .conftest import utc

pytestmark = pytest.mark.django_db

DEC = utc(2026, 12, 1).date()


def _usage():
    return list(
        UsageRecord.objects.order_by("allocation_id", "hour").values_list(
            "allocation_id", "cluster__name", "hour", "cost"
        )
    )


def test_a_cluster_rate_overrides_the_platform_rate_there_only(
    clouds, make_job, allocate, price, cluster_price
):
    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    cluster_price(clouds["cloud"], "h100", "on_demand", "3.00", utc(2026, 1, 1))
    job = make_job()
    here = allocate(job, "n1", 0, utc(2026, 12, 1, 10), utc(2026, 12, 1, 11))
    there = allocate(job, "c1", 0, utc(2026, 12, 1, 10), utc(2026, 12, 1, 11))

    meter.meter_run(now=utc(2026, 12, 1, 12))

    assert _usage() == [
        (here.pk, "test", utc(2026, 12, 1, 10), Decimal("2.000000")),
        (there.pk, "cloud", utc(2026, 12, 1, 10), Decimal("3.000000")),
    ]
    daily = UsageDaily.objects.order_by("cluster__name").values_list("cluster__name", "cost")
    assert list(daily) == [("cloud", Decimal("3.000000")), ("test", Decimal("2.000000"))]


def test_an_override_takes_effect_mid_allocation_and_outranks_later_platform_rates(
    clouds, make_job, allocate, price, cluster_price
):
    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    # The cloud's own $5 from 10:30; the platform goes to $4 at 11:00, which the cloud, having
    # its own rate by then, does not follow.
    cluster_price(clouds["cloud"], "h100", "on_demand", "5.00", utc(2026, 12, 1, 10, 30))
    price("h100", "on_demand", "4.00", utc(2026, 12, 1, 11))
    job = make_job()
    here = allocate(job, "n1", 0, utc(2026, 12, 1, 10), utc(2026, 12, 1, 12))
    there = allocate(job, "c1", 0, utc(2026, 12, 1, 10), utc(2026, 12, 1, 12))

    meter.meter_run(now=utc(2026, 12, 1, 13))

    assert _usage() == [
        (here.pk, "test", utc(2026, 12, 1, 10), Decimal("2.000000")),
        (here.pk, "test", utc(2026, 12, 1, 11), Decimal("4.000000")),
        # 30 min at the platform's $2, then 30 min at the cloud's $5.
        (there.pk, "cloud", utc(2026, 12, 1, 10), Decimal("3.500000")),
        (there.pk, "cloud", utc(2026, 12, 1, 11), Decimal("5.000000")),
    ]
    # The routing's view of the same book agrees with the meter at each instant.
    assert selectors.price_book_in_force(
        at=utc(2026, 12, 1, 10, 15), cluster_names=["test", "cloud"]
    ) == {"test": {"h100-80gb": {"on_demand": 2.0}}, "cloud": {"h100-80gb": {"on_demand": 2.0}}}
    assert selectors.price_book_in_force(
        at=utc(2026, 12, 1, 11, 30), cluster_names=["test", "cloud", "archive"]
    ) == {
        "test": {"h100-80gb": {"on_demand": 4.0}},
        "cloud": {"h100-80gb": {"on_demand": 5.0}},
        "archive": {"h100-80gb": {"on_demand": 4.0}},
    }


def test_price_book_in_force_adds_a_clusters_own_models_and_capacities(
    clouds, price, cluster_price
):
    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    cluster_price(clouds["cloud"], "h100", "spot", "0.90", utc(2026, 1, 1))
    cluster_price(clouds["cloud"], "a100", "on_demand", "1.10", utc(2026, 1, 1))
    cluster_price(clouds["cloud"], "a100", "on_demand", "9.00", utc(2027, 1, 1))  # not yet
    assert selectors.price_book_in_force(at=utc(2026, 6, 1), cluster_names=["test", "cloud"]) == {
        "test": {"h100-80gb": {"on_demand": 2.0}},
        "cloud": {
            "h100-80gb": {"on_demand": 2.0, "spot": 0.9},
            "a100-40gb": {"on_demand": 1.1},
        },
    }


def test_one_rate_per_scope_and_instant(clouds, price, cluster_price):
    at = utc(2026, 1, 1)
    price("h100", "on_demand", "2.00", at)
    cluster_price(clouds["cloud"], "h100", "on_demand", "3.00", at)  # another scope: fine
    with pytest.raises(IntegrityError), transaction.atomic():
        price("h100", "on_demand", "2.50", at)
    with pytest.raises(IntegrityError), transaction.atomic():
        cluster_price(clouds["cloud"], "h100", "on_demand", "3.50", at)
    assert PriceRate.objects.count() == 2


def test_price_api_takes_a_cluster_and_names_the_bad_field(api_as, clouds, platform_admin, alice):
    later = (timezone.now() + timedelta(days=1)).isoformat()
    body = {
        "gpu_model": "h100-80gb",
        "capacity": "on_demand",
        "rate_per_gpu_hour": "3.10",
        "effective_from": later,
        "cluster": "cloud",
    }
    admin = api_as(platform_admin)
    created = admin.post("/api/v1/billing/prices/", body, format="json")
    assert created.status_code == 201 and created.json()["cluster"] == "cloud"
    platform = admin.post("/api/v1/billing/prices/", dict(body, cluster=None), format="json")
    assert platform.status_code == 201 and platform.json()["cluster"] is None
    again = admin.post("/api/v1/billing/prices/", body, format="json")
    assert again.status_code == 400 and "effective_from" in again.json()

    unknown = admin.post("/api/v1/billing/prices/", dict(body, cluster="mars"), format="json")
    assert unknown.status_code == 400 and "cluster" in unknown.json()
    negative = admin.post(
        "/api/v1/billing/prices/", dict(body, rate_per_gpu_hour="-1"), format="json"
    )
    assert negative.status_code == 400 and "rate_per_gpu_hour" in negative.json()
    assert PriceRate.objects.count() == 2  # nothing half-written by the refusals

    listed = api_as(alice).get("/api/v1/billing/prices/").json()["results"]
    assert [(r["cluster"], r["rate_per_gpu_hour"]) for r in listed] == [
        (None, "3.1000"),
        ("cloud", "3.1000"),
    ]


def test_price_set_service_refuses_an_unknown_cluster_by_name(clouds, platform_admin, gpu_models):
    from core.errors import FieldErrors

    with pytest.raises(FieldErrors) as refused:
        services.price_set(
            user=platform_admin,
            gpu_model=gpu_models["h100"],
            capacity="on_demand",
            rate_per_gpu_hour=Decimal("1"),
            effective_from=timezone.now() + timedelta(hours=1),
            cluster="nowhere",
        )
    assert "cluster" in refused.value.errors
    rate = services.price_set(
        user=platform_admin,
        gpu_model=gpu_models["h100"],
        capacity="on_demand",
        rate_per_gpu_hour=Decimal("1"),
        effective_from=timezone.now() + timedelta(hours=1),
        cluster="cloud",
    )
    assert rate.cluster == clouds["cloud"]


def test_egress_is_charged_once_per_attempt_that_moves_data(c4, clouds, make_job, allocate, price):
    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    moved = make_job(name="moved", dataset="c4")
    allocate(moved, "c1", 0, utc(2026, 12, 1, 10), utc(2026, 12, 1, 11), attempt=1)
    allocate(moved, "c1", 1, utc(2026, 12, 1, 10), utc(2026, 12, 1, 11), attempt=1)
    local = make_job(name="local", dataset="c4")  # runs where a copy is
    allocate(local, "n1", 0, utc(2026, 12, 1, 10), utc(2026, 12, 1, 11))
    unknown = make_job(name="unknown", dataset="not-described")  # no size, no holder
    allocate(unknown, "c1", 2, utc(2026, 12, 1, 10), utc(2026, 12, 1, 11))

    first = meter.meter_run(now=utc(2026, 12, 1, 12))
    # A second attempt of the moved job, on the cloud again: moved again.
    allocate(moved, "c1", 0, utc(2026, 12, 1, 13), utc(2026, 12, 1, 14), attempt=2)
    meter.meter_run(now=utc(2026, 12, 1, 15))
    usage_before = _usage()
    again = meter.meter_run(now=utc(2026, 12, 1, 15))

    assert (first.egress_rows, again.egress_rows) == (1, 0)
    assert _usage() == usage_before
    charges = list(
        EgressCharge.objects.order_by("attempt").values_list(
            "job_id",
            "attempt",
            "team__slug",
            "dataset",
            "from_cluster__name",
            "to_cluster__name",
            "size_gb",
            "price_per_gb",
            "cost",
            "time",
        )
    )
    # 800 GB from the cheapest holder (archive, $0.02/GB), not test's $0.05: the routing's rule.
    assert charges == [
        (moved.pk, 1, "vision", "c4", "archive", "cloud", 800.0, Decimal("0.0200"),
         Decimal("16.000000"), utc(2026, 12, 1, 10)),
        (moved.pk, 2, "vision", "c4", "archive", "cloud", 800.0, Decimal("0.0200"),
         Decimal("16.000000"), utc(2026, 12, 1, 13)),
    ]  # fmt: skip
    with pytest.raises(IntegrityError), transaction.atomic():
        EgressCharge.objects.create(
            job_id=moved.pk, attempt=1, team=moved.team, dataset="c4",
            from_cluster=clouds["archive"], to_cluster=clouds["cloud"], size_gb=1,
            price_per_gb=Decimal(0), cost=Decimal(0), time=utc(2026, 12, 1),
        )  # fmt: skip


def test_egress_is_decided_with_the_facts_of_the_attempts_first_metering(
    c4, clouds, make_job, allocate, price
):
    """A size recorded after the attempt was first metered does not charge it afterwards."""
    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    Dataset.objects.filter(pk=c4.pk).update(size_gb=None)
    job = make_job(dataset="c4")
    allocate(job, "c1", 0, utc(2026, 12, 1, 10))  # still running
    meter.meter_run(now=utc(2026, 12, 1, 11))
    Dataset.objects.filter(pk=c4.pk).update(size_gb=800)
    meter.meter_run(now=utc(2026, 12, 1, 12))
    assert not EgressCharge.objects.exists()
    assert UsageRecord.objects.filter(cluster=clouds["cloud"]).count() == 2


@pytest.fixture
def split_month(c4, clouds, make_job, allocate, price, cluster_price, bob):
    """December: vision ran 10 GPU-h on test ($2) and 4 GPU-h on the cloud ($3) and moved c4
    once ($16); nlp ran 2 GPU-h on the cloud and moved c4 once too."""
    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    cluster_price(clouds["cloud"], "h100", "on_demand", "3.00", utc(2026, 1, 1))
    job = make_job(name="split", dataset="c4")
    allocate(job, "n1", 0, utc(2026, 12, 1, 0), utc(2026, 12, 1, 10), attempt=1)
    allocate(job, "c1", 0, utc(2026, 12, 2, 0), utc(2026, 12, 2, 4), attempt=2)
    nlp_job = make_job(team="nlp", user=bob, name="nlp-job", dataset="c4")
    allocate(nlp_job, "c1", 1, utc(2026, 12, 2, 0), utc(2026, 12, 2, 2))
    meter.meter_run(now=utc(2026, 12, 3))
    return job


def test_dashboard_splits_spend_by_cluster_and_shows_egress(split_month, alice, charlie):
    for user in (alice, charlie):  # a viewer of the team sees the same numbers
        d = dashboards.team_cost_dashboard(
            user=user, team_slug="vision", month=DEC, now=utc(2026, 12, 3)
        )
        assert [(c.cluster, c.gpu_hours, c.cost) for c in d.by_cluster()] == [
            ("test", 10.0, Decimal("20.000000")),
            ("cloud", 4.0, Decimal("12.000000")),
        ]
        assert sum(c.cost for c in d.by_cluster()) == d.gpu_spend == Decimal("32.00")
        assert d.spend == d.gpu_spend + d.budget.egress == Decimal("48.00")
        assert [(e.job_id, e.to_cluster, e.cost) for e in d.egress] == [
            (split_month.pk, "cloud", Decimal("16.000000"))
        ]
        assert d.egress_cost == Decimal("16.000000") and d.egress_gb == 800.0


def test_admin_overview_splits_every_teams_spend_by_cluster(split_month, platform_admin):
    o = dashboards.admin_cost_overview(user=platform_admin, month=DEC, now=utc(2026, 12, 3))
    by_cluster = {c.cluster: c.cost for c in o.dashboard.by_cluster()}
    assert by_cluster == {"test": Decimal("20.000000"), "cloud": Decimal("18.000000")}
    assert sum(by_cluster.values()) == o.dashboard.gpu_spend == Decimal("38.00")
    assert o.dashboard.spend == Decimal("70.00")  # + $32 of egress
    assert o.dashboard.egress_cost == Decimal("32.000000")


def test_cost_api_by_cluster_and_egress_are_team_scoped(
    split_month, api_as, alice, bob, charlie, platform_admin
):
    body = api_as(alice).get("/api/v1/billing/costs/?team=vision&month=2026-12").json()
    assert body["by_cluster"] == [
        {"cluster": "test", "gpu_hours": 10.0, "cost": "20.00"},
        {"cluster": "cloud", "gpu_hours": 4.0, "cost": "12.00"},
    ]
    assert sum(Decimal(c["cost"]) for c in body["by_cluster"]) == Decimal(body["gpu_spend"])
    assert Decimal(body["spend"]) == Decimal(body["gpu_spend"]) + Decimal(body["egress"]["cost"])
    assert body["egress"]["cost"] == "16.00" and body["egress"]["gb"] == 800.0
    [charge] = body["egress"]["charges"]
    assert (charge["job"], charge["from_cluster"], charge["to_cluster"]) == (
        split_month.pk,
        "archive",
        "cloud",
    )
    viewer = api_as(charlie).get("/api/v1/billing/costs/?team=vision&month=2026-12").json()
    assert (viewer["by_cluster"], viewer["egress"]) == (body["by_cluster"], body["egress"])
    # Another team's numbers: a 404, and bob's own team shows only its own charge.
    assert api_as(bob).get("/api/v1/billing/costs/?team=vision&month=2026-12").status_code == 404
    nlp = api_as(bob).get("/api/v1/billing/costs/?team=nlp&month=2026-12").json()
    assert [c["team"] for c in nlp["egress"]["charges"]] == ["nlp"]
    assert nlp["by_cluster"] == [{"cluster": "cloud", "gpu_hours": 2.0, "cost": "6.00"}]
    everything = api_as(platform_admin).get("/api/v1/billing/costs/?month=2026-12").json()
    assert sum(Decimal(c["cost"]) for c in everything["by_cluster"]) == Decimal("38.00")
    assert everything["egress"]["cost"] == "32.00"


def test_cost_pages_show_the_cluster_split_and_egress(split_month, client, alice, platform_admin):
    client.force_login(alice)
    html = client.get("/billing/teams/vision/?month=2026-12").content.decode()
    assert "By cluster" in html and 'data-cluster="cloud"' in html
    assert 'data-figure="fig-clusters"' in html and 'id="fig-clusters"' in html
    assert "$16.00" in html and "archive" in html
    nlp_only = "nlp-job"
    assert nlp_only not in html
    client.force_login(platform_admin)
    overview = client.get("/billing/overview/?month=2026-12").content.decode()
    assert 'data-cluster="test"' in overview and "$32.00" in overview


def test_statement_lines_carry_the_cluster_and_csv_appends_it(split_month, client, alice, teams):
    statement = Statement.objects.get(team=teams["vision"], month=DEC)
    view = selectors.statement_view(statement=statement)
    assert [(x.gpu_model, x.cluster, x.cost) for x in view.lines] == [
        ("h100-80gb", "cloud", Decimal("12.00")),
        ("h100-80gb", "test", Decimal("20.00")),
    ]
    rows = selectors.statement_csv_rows(view=view)
    assert rows[0] == [
        "month", "statement_team", "team", "gpu_model", "capacity", "gpu_hours", "cost_usd",
        "note", "cluster", "from_cluster", "gb", "unpriced_gpu_hours",
    ]  # fmt: skip
    assert [r[8] for r in rows[1:3]] == ["cloud", "test"]
    assert all(len(r) == len(rows[0]) for r in rows)
    client.force_login(alice)
    body = client.get(f"/billing/statements/{statement.pk}/csv").content.decode()
    parsed = list(csv.reader(io.StringIO(body)))
    assert parsed[1][8] == "cloud" and parsed[1][6] == "12.00"


def test_closing_freezes_the_cluster_names(split_month, platform_admin, teams):
    statement = Statement.objects.get(team=teams["vision"], month=DEC)
    statement = statements.statement_close(
        user=platform_admin, statement_id=statement.pk, now=utc(2027, 1, 1, 1)
    )
    Cluster.objects.filter(name="cloud").update(name="cloud-renamed")
    view = selectors.statement_view(statement=statement)
    assert [(x.cluster, x.cost) for x in view.lines] == [
        ("cloud", Decimal("12.00")),
        ("test", Decimal("20.00")),
    ]
    assert view.metered_after_close == Decimal(0)


def test_price_book_page_lists_rates_and_lets_admins_add_cluster_rates(
    clouds, client, alice, platform_admin, price
):
    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    later = (timezone.now() + timedelta(days=1)).strftime("%Y-%m-%d %H:%M")
    form = {
        "gpu_model": "h100-80gb",
        "capacity": "on_demand",
        "cluster": "cloud",
        "rate_per_gpu_hour": "3.25",
        "effective_from": later,
        "note": "cloud list price",
    }
    client.force_login(alice)
    page = client.get("/billing/prices/").content.decode()
    assert "all clusters" in page and "Add a rate" not in page  # members read, never write
    assert client.post("/billing/prices/", form).status_code == 404
    assert PriceRate.objects.count() == 1

    client.force_login(platform_admin)
    added = client.post("/billing/prices/", form)
    assert added.status_code == 302
    rate = PriceRate.objects.get(cluster=clouds["cloud"])
    assert (rate.rate_per_gpu_hour, rate.note) == (Decimal("3.2500"), "cloud list price")
    page = client.get("/billing/prices/").content.decode()
    assert 'data-cluster="cloud"' in page and "3.2500" in page

    for field, bad in (("cluster", "mars"), ("rate_per_gpu_hour", "-1")):
        refused = client.post("/billing/prices/", dict(form, **{field: bad}))
        assert refused.status_code == 400
        assert f'data-field="{field}"' in refused.content.decode()
    backdated = client.post("/billing/prices/", dict(form, effective_from="2026-01-02 00:00"))
    assert (
        backdated.status_code == 400 and 'data-field="effective_from"' in backdated.content.decode()
    )
    assert PriceRate.objects.count() == 2  # the refusals wrote nothing


def test_the_price_book_page_reads_and_shows_utc_whatever_zone_is_active(
    clouds, client, platform_admin
):
    # Labelled "Effective from (UTC)": a portal showing local times must not start the rate at
    # local midnight (05:00 UTC in New York) nor list it as 19:00 the day before.
    from zoneinfo import ZoneInfo

    client.force_login(platform_admin)
    form = {
        "gpu_model": "h100-80gb",
        "capacity": "on_demand",
        "rate_per_gpu_hour": "3.25",
        "effective_from": "2099-01-01 00:00",
    }
    with timezone.override(ZoneInfo("America/New_York")):
        assert client.post("/billing/prices/", form).status_code == 302
        page = client.get("/billing/prices/").content.decode()
    assert PriceRate.objects.get().effective_from == utc(2099, 1, 1)
    assert "2099-01-01 00:00" in page


def test_lost_work_is_priced_at_its_clusters_rate(clouds, make_job, allocate, price, cluster_price):
    from billing.models import LostWork

    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    cluster_price(clouds["cloud"], "h100", "on_demand", "3.60", utc(2026, 1, 1))
    job = make_job(name="preempted")
    allocate(job, "c1", 0, utc(2026, 12, 1, 10), utc(2026, 12, 1, 11))
    job.lost_gpu_seconds = 1000
    job.save()
    meter.meter_run(now=utc(2026, 12, 1, 12))
    meter.meter_run(now=utc(2026, 12, 1, 12))
    assert list(LostWork.objects.values_list("gpu_seconds", "cost")) == [
        (1000.0, Decimal("1.000000"))  # 1000 GPU-s at the cloud's $3.60/h, not the book's $2
    ]
