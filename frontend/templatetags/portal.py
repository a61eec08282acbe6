"""Template helpers of the portal: navigation links that know the current page, the local
plotly.js URL, and GPU utilization as a CSS-ready percentage."""

from __future__ import annotations

from django import template
from django.template.context import Context
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from billing.charts import plotly_version

register = template.Library()


@register.simple_tag(takes_context=True)
def nav_link(context: Context, href: str, label: str, exclude: str = "") -> SafeString:
    """A navigation link marked ``aria-current="page"`` when the current path is under it (and
    not under ``exclude``, a sub-path that has a link of its own)."""
    request = context.get("request")
    path = request.path if request is not None else ""
    current = path == href if href == "/" else path.startswith(href)
    if exclude and path.startswith(exclude):
        current = False
    if current:
        return format_html('<a href="{}" aria-current="page">{}</a>', href, label)
    return format_html('<a href="{}">{}</a>', href, label)


@register.simple_tag
def plotly_src() -> str:
    """The versioned URL of plotly.js served by the platform (never a CDN)."""
    return reverse("plotly-js", kwargs={"version": plotly_version()})


@register.simple_tag
def plotly_style_ids() -> str:
    """Ids of the ``<style>`` elements plotly.js writes with content when it loads (see
    ``frontend.views.plotly_self_styles``), for charts.js to hold their places."""
    from frontend.views import plotly_self_styles

    return " ".join(plotly_self_styles())


@register.filter
def percent(value: float | str | None) -> int:
    """0..1 (or None) to a whole percentage."""
    if value is None:
        return 0
    try:
        return round(float(value) * 100)
    except (TypeError, ValueError):
        return 0
