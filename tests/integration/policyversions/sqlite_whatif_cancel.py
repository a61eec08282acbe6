"""Run by ``test_whatif_on_sqlite.py`` in a process of its own, over the file SQLite database
``DATABASE_URL`` names (the embedded demo's engine: WAL, the replay in a thread of the server):
an admin cancels a what-if run right after its history's export began reading, from another
connection. Prints the run's status, text and error, as JSON, once its thread has ended.
``WHATIF_MAX_RUNTIME_SECONDS`` in the environment bounds the run as it does the server's."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db.backends.signals import connection_created  # noqa: E402

HISTORY_DAYS = 24  # about 120 finished jobs a day: more than the export reads at once (2,000)
WAIT_S = 120

export_began = threading.Event()
cancelled = threading.Event()


def cancel_right_after_the_export_began(execute, sql, params, many, context):
    result = execute(sql, params, many, context)
    if '"last_release"' in sql and not export_began.is_set():
        # The export's one statement is open (its rows are being read): the admin cancels now.
        export_began.set()
        cancelled.wait(WAIT_S)
    return result


def on_connection(sender, connection, **kwargs):  # the signal names its argument
    if threading.current_thread().name.startswith("whatif-"):
        connection.execute_wrappers.append(cancel_right_after_the_export_began)


def main() -> None:
    call_command("migrate", verbosity=0)
    from demo.seed import seed
    from policyversions.whatif_runs import whatif_run_cancel, whatif_run_start

    seed(jobs=0, history_days=HISTORY_DAYS)
    admin = get_user_model().objects.get(username="admin")
    connection_created.connect(on_connection)
    run = whatif_run_start(
        user=admin, window_days=HISTORY_DAYS, candidates={"a": {"queue_aging_s": 60}}
    )
    if not export_began.wait(WAIT_S):
        sys.exit("the export never began")
    whatif_run_cancel(user=admin, run_id=run.pk)
    cancelled.set()
    for thread in threading.enumerate():
        if thread.name.startswith("whatif-"):
            thread.join(WAIT_S)
    run.refresh_from_db()
    print(json.dumps({"status": run.status, "text": run.progress_text, "error": run.error}))


if __name__ == "__main__":
    main()
