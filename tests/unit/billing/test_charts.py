"""Chart code: plain series in, figures out (no database), and honest notes for missing data."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

from billing import charts
from billing.series import (
    BudgetSummary,
    ClusterDaySpend,
    CostDashboard,
    DaySpend,
    EgressLine,
    IdleSummary,
    JobCost,
    LostPoint,
)


def _dashboard(**overrides) -> CostDashboard:
    base = {
        "title": "Vision",
        "month": date(2026, 12, 1),
        "now": datetime(2026, 12, 3, 12, tzinfo=UTC),
        "days": [
            DaySpend(date(2026, 12, 1), "h100", "on_demand", 2.0, Decimal(4)),
            DaySpend(date(2026, 12, 2), "a100", "spot", 1.0, Decimal(1)),
        ],
        "top_jobs": [JobCost(1, "big", "vision", "alice", 2.0, Decimal(4))],
        "lost": [LostPoint(date(2026, 12, 2), "preempted", 0.5, Decimal("1.00"))],
        "idle": IdleSummary(False, 0.0, 0.0, Decimal(0)),
        "budget": BudgetSummary(Decimal(10), True, Decimal(5), Decimal(60)),
    }
    base.update(overrides)
    return CostDashboard(**base)


def _texts(fig):
    return [a.text for a in fig.layout.annotations]


def test_spend_is_stacked_by_gpu_model_per_day():
    fig = charts.spend_over_time(_dashboard())
    assert {t.name: (list(t.x), list(t.y)) for t in fig.data} == {
        "a100": (["2026-12-02"], [1.0]),
        "h100": (["2026-12-01"], [4.0]),
    }


def test_egress_is_stacked_on_the_days_spend_and_in_the_cumulative_line():
    egress = [
        EgressLine(
            datetime(2026, 12, 2, 23, 30, tzinfo=UTC), 7, 1, "vision", "c4", "archive", "cloud",
            800.0, Decimal("0.02"), Decimal(16),
        )
    ]  # fmt: skip
    d = _dashboard(egress=egress)
    fig = charts.spend_over_time(d)
    assert {t.name: (list(t.x), list(t.y)) for t in fig.data} == {
        "a100": (["2026-12-02"], [1.0]),
        "h100": (["2026-12-01"], [4.0]),
        charts.EGRESS_TRACE: (["2026-12-02"], [16.0]),
    }
    assert d.cumulative_daily()[-1] == (date(2026, 12, 3), Decimal(21))
    only_egress = charts.spend_over_time(_dashboard(days=[], egress=egress))
    assert [t.name for t in only_egress.data] == [charts.EGRESS_TRACE]
    assert "no usage metered this month" not in _texts(only_egress)


def test_spend_is_stacked_by_cluster_per_day():
    d = _dashboard(
        cluster_days=[
            ClusterDaySpend(date(2026, 12, 1), "onprem", 2.0, Decimal(4)),
            ClusterDaySpend(date(2026, 12, 2), "cloud-a", 1.0, Decimal(1)),
            ClusterDaySpend(date(2026, 12, 2), "onprem", 1.0, Decimal("0.5")),
        ]
    )
    fig = charts.spend_by_cluster(d)
    assert {t.name: (list(t.x), list(t.y)) for t in fig.data} == {
        "cloud-a": (["2026-12-02"], [1.0]),
        "onprem": (["2026-12-01", "2026-12-02"], [4.0, 0.5]),
    }
    assert [(c.cluster, c.cost) for c in d.by_cluster()] == [
        ("onprem", Decimal("4.5")),
        ("cloud-a", Decimal(1)),
    ]


def test_budget_chart_has_spend_forecast_and_hard_budget():
    fig = charts.budget_and_forecast(_dashboard())
    names = [t.name for t in fig.data]
    assert names == ["spend to date", "forecast", "hard budget"]
    assert list(fig.data[0].y) == [4.0, 5.0, 5.0]  # cumulative per day to today
    assert list(fig.data[1].y) == [5.0, 60.0] and list(fig.data[1].x)[-1] == "2026-12-31"


def test_waste_says_no_telemetry_instead_of_zero():
    fig = charts.waste(_dashboard())
    assert "idle cost: no telemetry" in _texts(fig)
    assert [t.name for t in fig.data] == ["lost: preempted"]
    with_telemetry = charts.waste(_dashboard(idle=IdleSummary(True, 0.5, 3.0, Decimal("6"))))
    assert any("idle cost $6" in t and "50%" in t for t in _texts(with_telemetry))


def test_empty_month_gives_notes_not_blank_frames():
    empty = _dashboard(days=[], top_jobs=[], lost=[])
    assert "no usage metered this month" in _texts(charts.spend_over_time(empty))
    assert "no jobs metered this month" in _texts(charts.top_jobs(empty))
    assert "no usage metered this month" in _texts(charts.spend_by_cluster(empty))
    assert set(charts.all_figures(empty)) == {"spend", "clusters", "budget", "top-jobs", "waste"}
