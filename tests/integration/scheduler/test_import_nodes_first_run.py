"""`manage.py import_nodes` on a new site's first cluster. A simulated cluster's backend reports
the nodes the platform holds for it, so importing one with none created nothing and said only
"0 nodes created, 0 updated", leaving a first-time operator to guess why."""

import io

import pytest
from django.core.management import call_command

from scheduler.models import Cluster

pytestmark = pytest.mark.django_db


def test_importing_an_empty_simulated_cluster_says_where_its_nodes_come_from():
    Cluster.objects.create(name="trial")
    out = io.StringIO()
    call_command("import_nodes", "trial", stdout=out)
    assert out.getvalue().splitlines() == [
        "trial: 0 nodes created, 0 updated",
        "trial is a simulated cluster: it reports the nodes added to it in Django admin "
        "(Scheduler > Nodes), and it has none yet",
    ]
