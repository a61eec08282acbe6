"""``benchmarks/compiled_engine.py`` compiles a copy of the engine in which the rule mixins are
mypyc traits. The copy must be the engine: every class it marks is found, and run as plain Python
(the decorator does nothing then) the copy decides a snapshot exactly as this tree does. The
compiled build itself is measured, not tested here (it needs a C compiler and ~35 s)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from scheduler.policy import decide
from scheduler.policy.codec import decisions_to_dict, snapshot_to_dict

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

import compiled_engine  # noqa: E402
import policy_cycle  # noqa: E402

_DECIDE_IN_COPY = """
import json, sys
from scheduler.policy import decide, engine
from scheduler.policy.codec import decisions_to_dict, snapshot_from_dict
print(engine.__file__)
print(json.dumps(decisions_to_dict(decide(snapshot_from_dict(json.load(sys.stdin))))))
"""


def test_the_copy_marks_every_mixin_and_decides_as_this_tree(tmp_path):
    copy = tmp_path / "engine"
    compiled_engine.prepare(copy)
    policy = copy / "scheduler" / "policy"
    for module, cls in compiled_engine.TRAITS.items():
        assert f"@trait\nclass {cls}" in (policy / f"{module}.py").read_text()
    snapshot = policy_cycle.build(**policy_cycle.SIZES["small"])
    out = subprocess.run(
        [sys.executable, "-c", _DECIDE_IN_COPY],
        cwd=copy,
        input=json.dumps(snapshot_to_dict(snapshot)),
        capture_output=True,
        text=True,
        check=True,
    )
    engine_file, decisions = out.stdout.splitlines()
    assert Path(engine_file).is_relative_to(copy)
    in_copy = json.loads(decisions)
    here = decisions_to_dict(decide(snapshot))
    assert in_copy["start"], "the small snapshot starts jobs"
    assert in_copy == json.loads(json.dumps(here))
