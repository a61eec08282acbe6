"""Import a cluster's nodes from its backend (Slurm: sinfo; Kubernetes: node labels)."""

from django.core.management.base import BaseCommand, CommandError

from core.errors import Conflict
from scheduler.backends.base import BackendError
from scheduler.models import Cluster
from scheduler.services import cluster_import_nodes


class Command(BaseCommand):
    help = "Create or update a cluster's nodes from what its backend reports."

    def add_arguments(self, parser):
        parser.add_argument("cluster", help="cluster name")

    def handle(self, *args, cluster: str, **options):
        row = Cluster.objects.filter(name=cluster).first()
        if row is None:
            raise CommandError(f"cluster: no cluster named '{cluster}'")
        try:
            created, updated = cluster_import_nodes(cluster=row)
        except BackendError as exc:
            raise CommandError(f"backend: {exc}") from exc
        except Conflict as exc:
            raise CommandError(f"cluster: {exc}") from exc
        self.stdout.write(f"{row.name}: {created} nodes created, {updated} updated")
