"""What-if candidates become whole policies: a run kept from before, whose candidates are
engine configurations alone, gets them as ``{"engine_config": ..., "team_weights": {},
"priority_classes": {}}`` (what applying them always meant: that configuration, the weights and
classes in force)."""

from django.db import migrations

PARTS = ("engine_config", "team_weights", "priority_classes")


def _as_policy(candidate):
    if isinstance(candidate, dict) and candidate and set(candidate) <= set(PARTS):
        return candidate
    return {"engine_config": candidate, "team_weights": {}, "priority_classes": {}}


def forwards(apps, schema_editor):
    WhatIfRun = apps.get_model("policyversions", "WhatIfRun")
    for run in WhatIfRun.objects.only("pk", "candidates").iterator():
        wrapped = {name: _as_policy(c) for name, c in run.candidates.items()}
        if wrapped != run.candidates:
            WhatIfRun.objects.filter(pk=run.pk).update(candidates=wrapped)


def backwards(apps, schema_editor):
    WhatIfRun = apps.get_model("policyversions", "WhatIfRun")
    for run in WhatIfRun.objects.only("pk", "candidates").iterator():
        # Only the engine configuration survives going back: the older code replayed nothing else.
        bare = {name: c.get("engine_config") or {} for name, c in run.candidates.items()}
        WhatIfRun.objects.filter(pk=run.pk).update(candidates=bare)


class Migration(migrations.Migration):
    dependencies = [("policyversions", "0002_whatif_runs")]

    operations = [migrations.RunPython(forwards, backwards)]
