"""Import a cluster's nodes from its backend (Slurm: sinfo; Kubernetes: node labels)."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import Conflict
from scheduler.backends.base import BackendError
from scheduler.models import BackendKind, Cluster, Node
from scheduler.services import cluster_import_nodes


class Command(BaseCommand):
    help = "Create or update a cluster's nodes from what its backend reports."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("cluster", help="cluster name")

    def handle(self, *args: Any, cluster: str, **options: Any) -> None:
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
        # A simulated backend reports the platform's own node rows, so a new one has nothing to
        # import: say where they come from instead of leaving "0 created" to be guessed at.
        if (
            row.backend_kind == BackendKind.SIMULATED
            and not Node.objects.filter(cluster=row).exists()
        ):
            self.stdout.write(
                f"{row.name} is a simulated cluster: it reports the nodes added to it in Django "
                "admin (Scheduler > Nodes), and it has none yet"
            )
