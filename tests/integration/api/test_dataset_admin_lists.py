"""A dataset's lists (residency regions, copies, a copy's fields) are as long as the admin's
client makes them: every bad item was listed, so 300,000 bad names made a 400 of tens of MB
(the API) or a page of 300,000 error lines (the portal). As for routing lists
(``core.errors.ListErrors``): the first 20 bad entries of the request, then ``and N more not
shown`` on each list that had more. Nothing is written."""

from __future__ import annotations

import re

import pytest

from scheduler.models import ClusterDataset, Dataset
from tenants.models import AuditEntry

pytestmark = pytest.mark.django_db

MANY = 300_000


def _nothing_written(*, datasets: int = 0) -> None:
    assert Dataset.objects.count() == datasets and not ClusterDataset.objects.exists()
    assert not AuditEntry.objects.filter(action__startswith="dataset.").exists()


def test_300000_bad_residency_regions_give_a_small_400(platform, api_as):
    admin = api_as(platform["admin"])
    regions = [f"Region {i}" for i in range(MANY)]
    bad = admin.post(
        "/api/v1/admin/datasets/", {"name": "c4", "residency_regions": regions}, format="json"
    )
    assert bad.status_code == 400
    assert len(bad.content) < 4_000, len(bad.content)
    body = bad.json()
    assert [k for k in body if k.startswith("residency_regions[")] == [
        f"residency_regions[{i}]" for i in range(20)
    ]
    assert body["residency_regions"] == [f"and {MANY - 20} more not shown"]
    _nothing_written()


def test_300000_bad_copies_give_a_small_400_on_create_and_update(platform, api_as):
    admin = api_as(platform["admin"])
    copies = [{"cluster": f"nope-{i}", "egress_price_per_gb": -1} for i in range(MANY // 2)]
    bad = admin.post("/api/v1/admin/datasets/", {"name": "c4", "copies": copies}, format="json")
    assert bad.status_code == 400
    assert len(bad.content) < 4_000, len(bad.content)
    body = bad.json()
    # Two entries per copy (its cluster and its price): the first 20 entries are ten copies'.
    assert body["copies[0].cluster"] == ["no cluster is named 'nope-0'"]
    assert body["copies[0].egress_price_per_gb"] == ["must be >= 0"]
    assert "copies[9].egress_price_per_gb" in body and "copies[10].cluster" not in body
    assert body["copies"] == [f"and {MANY - 20} more not shown"]
    _nothing_written()

    dataset = Dataset.objects.create(name="c4")
    update = admin.patch(
        f"/api/v1/admin/datasets/{dataset.pk}/",
        {"copies": [{"cluster": "test", **{f"k{i}": 1 for i in range(MANY)}}]},
        format="json",
    )
    assert update.status_code == 400
    assert len(update.content) < 4_000, len(update.content)
    assert update.json()["copies"] == [f"and {MANY - 20} more not shown"]
    _nothing_written(datasets=1)


def test_a_few_bad_items_are_all_listed_without_a_count(platform, api_as):
    admin = api_as(platform["admin"])
    bad = admin.post(
        "/api/v1/admin/datasets/",
        {"name": "c4", "residency_regions": ["EU", "eu-west", "eu-west"], "copies": [{}]},
        format="json",
    )
    assert bad.json() == {
        "residency_regions[0]": [
            "'EU' is not a region name: lowercase letters and digits in words joined by '-' "
            "(e.g. eu-west, us-east-1)"
        ],
        "residency_regions[2]": ["'eu-west' listed twice"],
        "copies[0].cluster": ["no cluster is named None"],
    }


def _errors_on_page(content: str) -> list[str]:
    return re.findall(r"<li>([^<]*)</li>", content)


@pytest.mark.parametrize(
    ("field", "text", "listed"),
    [
        ("residency", ",".join(["EU"] * MANY), "is not a region name"),
        ("copies", "\n".join(["onprem"] * MANY), "write CLUSTER=price per GB"),
        ("copies", "\n".join(["x=1"] * MANY), "no cluster is named"),
    ],
)
def test_the_portal_dataset_forms_show_20_errors_and_a_count(platform, client, field, text, listed):
    client.force_login(platform["admin"])
    dataset = Dataset.objects.create(name="old")
    for url, prefix in (
        ("/cluster/routing/datasets/new/", "new"),
        (f"/cluster/routing/datasets/{dataset.pk}/", f"d-{dataset.pk}"),
    ):
        page = client.post(url, {f"{prefix}-name": "c4", f"{prefix}-{field}": text})
        assert page.status_code == 400
        errors = [e for e in _errors_on_page(page.content.decode()) if listed in e]
        assert 1 <= len(errors) <= 20, len(errors)
        assert f"and {MANY - 20} more not shown" in page.content.decode()
    _nothing_written(datasets=1)
