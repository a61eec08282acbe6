"""Pure billing arithmetic: hour buckets, UTC months, pricing an interval against a price book,
and the month-end forecast. No Django, no clock: every instant comes in as an argument, so the
same inputs always give the same money.

All datetimes are timezone-aware UTC. Money is ``Decimal``; time is counted in whole
microseconds so that splitting an interval never loses or invents a fraction of a cent.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

HOUR = timedelta(hours=1)
_US = timedelta(microseconds=1)
_US_PER_HOUR = Decimal(3_600_000_000)
COST_QUANTUM = Decimal("0.000001")
CENT = Decimal("0.01")
# The months the platform reads or writes (budgets, statements, cost pages): wide enough for any
# cluster's history and plans, narrow enough that every month has a representable neighbour on
# both sides (a month at year 1 or 9999 broke the previous/next links and the forecast).
MIN_MONTH = date(2000, 1, 1)
MAX_MONTH = date(2199, 12, 1)


def floor_hour(at: datetime) -> datetime:
    """The start of the UTC hour containing ``at``."""
    return at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def hour_buckets(start: datetime, end: datetime) -> Iterator[tuple[datetime, datetime, datetime]]:
    """Yield ``(bucket_hour, piece_start, piece_end)`` covering ``[start, end)`` hour by hour.

    Pieces are non-empty and never cross an hour boundary (hence never a month boundary)."""
    if end <= start:
        return
    bucket = floor_hour(start)
    while bucket < end:
        nxt = bucket + HOUR
        yield bucket, max(start, bucket), min(end, nxt)
        bucket = nxt


def month_start(at: datetime | date) -> date:
    """First day of the (UTC) month containing ``at``."""
    if isinstance(at, datetime):
        at = at.astimezone(UTC)
    return date(at.year, at.month, 1)


def next_month(month: date) -> date:
    return date(month.year + (month.month == 12), month.month % 12 + 1, 1)


def month_bounds(month: date) -> tuple[datetime, datetime]:
    """``[start, end)`` of a month as UTC datetimes."""
    start = datetime(month.year, month.month, 1, tzinfo=UTC)
    nm = next_month(month)
    return start, datetime(nm.year, nm.month, 1, tzinfo=UTC)


def parse_month(text: str) -> date:
    """``"2026-12"`` -> ``date(2026, 12, 1)``; raises ValueError on anything else, including a
    month outside ``MIN_MONTH..MAX_MONTH``."""
    year, _, month = text.partition("-")
    if not (len(year) == 4 and len(month) == 2 and (year + month).isascii()):
        raise ValueError(f"not a YYYY-MM month: {text[:20]!r}")
    if not (year.isdigit() and month.isdigit() and 1 <= int(month) <= 12):
        raise ValueError(f"not a YYYY-MM month: {text[:20]!r}")
    parsed = date(int(year), int(month), 1)
    if not MIN_MONTH <= parsed <= MAX_MONTH:
        raise ValueError(f"must be a month from {MIN_MONTH:%Y-%m} to {MAX_MONTH:%Y-%m}")
    return parsed


def line_gpu_hours(seconds: float | None) -> Decimal:
    """GPU-seconds summed from usage rows as the GPU-hours a statement line shows (4 places):
    one rounding for a line's hours and for its unpriced part, open or closed, so the unpriced
    part never shows more than the line."""
    return (Decimal(repr(seconds or 0.0)) / 3600).quantize(Decimal("0.0001"))


def microseconds(delta: timedelta) -> int:
    return delta // _US


@dataclass(frozen=True, slots=True)
class RateStep:
    """``rate`` USD per GPU-hour applies from ``effective_from`` until the next step."""

    effective_from: datetime
    rate: Decimal


class PriceSchedule:
    """The price steps of one (GPU model, capacity) pair, sorted by effective time."""

    __slots__ = ("_starts", "_steps")

    def __init__(self, steps: Sequence[RateStep]):
        self._steps = sorted(steps, key=lambda s: s.effective_from)
        self._starts = [s.effective_from for s in self._steps]

    @property
    def steps(self) -> tuple[RateStep, ...]:
        return tuple(self._steps)

    def overridden_by(self, override: PriceSchedule) -> PriceSchedule:
        """This (platform-wide) schedule with a cluster's own steps taking over from the first
        of them on: before it, this schedule's rates; from it, only the override's (a later
        platform-wide step no longer applies). No override: this schedule unchanged."""
        if not override._steps:
            return self
        first = override._steps[0].effective_from
        return PriceSchedule(
            [s for s in self._steps if s.effective_from < first] + list(override._steps)
        )

    def rate_at(self, at: datetime) -> Decimal | None:
        """The rate in force at ``at``, or None before the first step."""
        i = bisect.bisect_right(self._starts, at) - 1
        return self._steps[i].rate if i >= 0 else None

    def price(self, start: datetime, end: datetime) -> tuple[Decimal, int]:
        """Cost of one GPU over ``[start, end)`` and the microseconds that had no rate.

        A rate change inside the interval splits it: each part is billed at the rate in force
        for that part only (a change applies from its instant, never backwards)."""
        if end <= start:
            return Decimal(0), 0
        cost = Decimal(0)
        unpriced = 0
        i = bisect.bisect_right(self._starts, start) - 1
        cursor = start
        while cursor < end:
            nxt_start = self._starts[i + 1] if i + 1 < len(self._starts) else None
            piece_end = min(end, nxt_start) if nxt_start is not None else end
            us = microseconds(piece_end - cursor)
            if i < 0:
                unpriced += us
            else:
                cost += self._steps[i].rate * Decimal(us) / _US_PER_HOUR
            cursor = piece_end
            i += 1
        return cost.quantize(COST_QUANTUM), unpriced


def forecast_month_end(
    *,
    spend_to_date: Decimal,
    trailing_spend: Decimal,
    trailing_window: timedelta,
    now: datetime,
    month: date,
) -> Decimal:
    """Month-end spend if the current burn rate holds: spend so far plus the trailing window's
    average spend per second times the seconds left in the month.

    A month already over forecasts its actual spend; an empty window forecasts no further spend.
    """
    start, end = month_bounds(month)
    if now >= end:
        return spend_to_date.quantize(CENT)
    now = max(now, start)
    window_us = microseconds(trailing_window)
    if window_us <= 0:
        return spend_to_date.quantize(CENT)
    rate_per_us = trailing_spend / Decimal(window_us)
    remaining_us = microseconds(end - now)
    return (spend_to_date + rate_per_us * Decimal(remaining_us)).quantize(CENT)


def forecast_window(now: datetime, month: date, hours: int = 24) -> tuple[datetime, datetime]:
    """The trailing window the burn rate is measured over: the last ``hours`` hours up to
    ``now`` (up to the month's end once it is over), whether or not they cross the month's
    start. The rate is the team's, not the month's: clipped to a month a few minutes old, one
    charge in those minutes read as a rate per minute forecast millions; so a month less than
    a day old is measured partly over the end of the month before. A month not begun yet has
    an empty window (no burn of its own to extrapolate)."""
    start, end = month_bounds(month)
    if now < start:
        return start, start
    hi = min(now, end)
    return hi - timedelta(hours=hours), hi
