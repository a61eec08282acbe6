"""Template filters of the billing pages."""

from decimal import Decimal

from django import template

register = template.Library()


@register.filter
def usd(value: Decimal | float | str | None) -> str:
    """``Decimal("1234.5")`` -> ``"$1,234.50"``; None -> an em dash; negatives as ``-$5.00``."""
    if value is None or value == "":
        return "—"
    amount = Decimal(value).quantize(Decimal("0.01"))
    sign = "-" if amount < 0 else ""
    return f"{sign}${abs(amount):,.2f}"
