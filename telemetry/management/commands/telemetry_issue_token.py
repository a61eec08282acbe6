"""``manage.py telemetry_issue_token <cluster> <node> [--revoke-others]``: print a new agent token
for a node (only its hash is stored; this is the one time it is shown)."""

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from scheduler.models import Node
from telemetry.models import NodeAgentToken
from telemetry.tokens import node_token_issue, node_token_revoke


class Command(BaseCommand):
    help = "Issue a telemetry agent token for a node and print it once."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("cluster")
        parser.add_argument("node")
        parser.add_argument(
            "--revoke-others", action="store_true", help="revoke the node's earlier tokens"
        )

    def handle(
        self, *args: Any, cluster: str, node: str, revoke_others: bool, **options: Any
    ) -> None:
        row = Node.objects.filter(cluster__name=cluster, name=node).first()
        if row is None:
            raise CommandError(f"no node {node!r} in cluster {cluster!r}")
        token, raw = node_token_issue(node=row)
        if revoke_others:
            for old in NodeAgentToken.objects.filter(node=row, revoked_at__isnull=True).exclude(
                pk=token.pk
            ):
                node_token_revoke(token=old)
        self.stdout.write(raw)
