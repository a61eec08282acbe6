"""Two platform admins creating the same named thing at the same moment (a team, a single
sign-on rule, a dataset, a price): each service checked that the name was new, both checks
passed, and the second INSERT met the unique constraint: an IntegrityError, a 500. The second
is now the same 400 naming the field as a sequential duplicate, and the first stands alone."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from core.errors import FieldErrors
from tests.integration.concurrency import race

pytestmark = pytest.mark.django_db(transaction=True)


def _team(admin, gpu_models):
    from tenants.teams import team_create

    return lambda: team_create(user=admin, slug="speech", name="Speech")


def _sso_rule(admin, gpu_models):
    from tenants.identity import sso_rule_create

    return lambda: sso_rule_create(user=admin, group="ml-speech", team="vision", role="member")


def _dataset(admin, gpu_models):
    from scheduler.routing_admin import dataset_create

    return lambda: dataset_create(user=admin, name="imagenet", size_gb=150)


def _price(admin, gpu_models):
    from billing.services import price_set

    starts = timezone.now() + timedelta(days=1)
    return lambda: price_set(
        user=admin,
        gpu_model=gpu_models["h100"],
        capacity="on_demand",
        rate_per_gpu_hour=Decimal("2.50"),
        effective_from=starts,
    )


@pytest.mark.parametrize(
    "creator,model,field",
    [
        (_team, "tenants.Team", "slug"),
        (_sso_rule, "tenants.SsoGroupRule", "group"),
        (_dataset, "scheduler.Dataset", "name"),
        (_price, "billing.PriceRate", "effective_from"),
    ],
    ids=["team", "sso-rule", "dataset", "price"],
)
def test_the_second_of_two_identical_creates_is_a_400_on_the_field(
    platform, gpu_models, creator, model, field
):
    from django.apps import apps

    create = creator(platform["admin"], gpu_models)
    before = apps.get_model(model).objects.count()
    second = race(create, create)
    assert isinstance(second, FieldErrors), repr(second)
    assert second.status_code == 400 and field in second.errors
    assert apps.get_model(model).objects.count() == before + 1
