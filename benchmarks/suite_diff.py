"""Two policies of the suite side by side: what changed on each case, and which goals moved.

    .venv/bin/python benchmarks/suite_diff.py RESULTS.json [MORE.json ...] --variant NAME
        [--base gpuplatform] [--before OLD.json ...] [--wall]

Reads what `benchmarks/suite.py --out` writes (the medians over the seeds); give the suite's and
the held-out run's files together to see all 22 cases. Each case gets one row: average wait, base
-> variant (the change), preemptions per job, lost work and p99 JCT with the baseline each goal
compares with, and the goals each side meets. Under the table, the counts a rule is judged by
(docs/policy.md, "What each rule is worth"): on how many cases the average wait is higher and
lower by more than 1 %, preemptions and lost work fewer and more, and the goals gained and lost.

`--variant` (a `--variant` of the suite run, or any policy in it) is compared with `--base` of the
same run. With `--before OLD.json ...`, the base is `--base` of those files instead (an earlier
run: main before a change), and `--variant` defaults to `gpuplatform`. Each side's goals are
judged against its own run's baselines. Wall time is left out of the goals unless `--wall` is
given: it compares only within one run (docs/benchmarks.md, "Suite").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from suite import GOALS  # noqa: E402

# A change of the average wait smaller than this is "the same" in the counts (as in docs/policy.md).
SAME_WITHIN = 0.01

Medians = dict[str, dict[str, dict[str, float]]]  # case -> policy -> column -> median
# The columns the table and the goals read.
COLUMNS_READ = ("avg_wait_s", "p99_jct_s", "preemptions_per_job", "lost_work_pct", "wall_s")


def load(paths: list[Path], ap: argparse.ArgumentParser) -> Medians:
    """The medians of every file, by case; a case in two files is refused (which to trust?)."""
    out: Medians = {}
    for path in paths:
        try:
            medians = json.loads(path.read_text())["medians"]
        except OSError as exc:
            ap.error(f"{path}: {exc.strerror or exc}")
        except (ValueError, KeyError, TypeError):
            ap.error(
                f"{path}: not a suite result (no medians; benchmarks/suite.py --out writes one)"
            )
        if not isinstance(medians, dict) or not all(
            isinstance(policies, dict) and all(isinstance(row, dict) for row in policies.values())
            for policies in medians.values()
        ):
            ap.error(f"{path}: not a suite result (medians are not case -> policy -> columns)")
        for case, policies in medians.items():
            if case in out:
                ap.error(f"{path}: case {case} is also in another file")
            for policy, row in policies.items():
                missing = sorted(c for c in COLUMNS_READ if not isinstance(row.get(c), int | float))
                if missing:
                    ap.error(f"{path}: {case} {policy}: no number for {', '.join(missing)}")
            out[case] = policies
    return out


def counted_goals(wall: bool) -> list[tuple[str, Any]]:
    """The suite's goals this comparison counts: the wall-time one only with ``--wall``."""
    return [(name, holds) for name, holds in GOALS if wall or not name.startswith("wall")]


def goals_met(row: dict[str, float], policies: dict[str, dict[str, float]], wall: bool) -> set[str]:
    """The counted goals ``row`` meets against the baselines of its own run."""
    return {name for name, holds in counted_goals(wall) if holds(row, policies)}


def compare(
    before: Medians, after: Medians, base: str, variant: str, wall: bool
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Per case, ``base`` in ``before`` against ``variant`` in ``after`` (cases in both), and
    the counts over all of them."""
    rows: list[dict[str, Any]] = []
    counts: dict[str, Any] = {
        "wait_higher": [],
        "wait_lower": [],
        "preemptions": [0, 0],
        "lost": [0, 0],
        "gained": [],
        "lost_goals": [],
    }
    for case, policies in after.items():
        if case not in before:
            continue
        old, new = before[case][base], policies[variant]
        change = new["avg_wait_s"] / old["avg_wait_s"] - 1 if old["avg_wait_s"] else 0.0
        if change > SAME_WITHIN:
            counts["wait_higher"].append(case)
        elif change < -SAME_WITHIN:
            counts["wait_lower"].append(case)
        for key, column in (("preemptions", "preemptions_per_job"), ("lost", "lost_work_pct")):
            counts[key][0] += new[column] < old[column]
            counts[key][1] += new[column] > old[column]
        met_before = goals_met(old, before[case], wall)
        met_after = goals_met(new, policies, wall)
        counts["gained"] += [f"{case}: {g}" for g in sorted(met_after - met_before)]
        counts["lost_goals"] += [f"{case}: {g}" for g in sorted(met_before - met_after)]
        rows.append(
            {
                "case": case,
                "old": old,
                "new": new,
                "change": change,
                "baselines": {p: policies[p] for p in ("tiresias", "fifo-backfill")},
                "met": (len(met_before), len(met_after)),
            }
        )
    return rows, counts


def markdown(rows: list[dict[str, Any]], counts: dict[str, Any], goals: int) -> str:
    """The table and the counts under it."""
    lines = [
        "| case | avg wait s (`tiresias` / `fifo-backfill`) | preemptions/job (`tiresias`) "
        f"| lost % | p99 JCT s (`fifo-backfill`) | goals met of {goals} |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        old, new = r["old"], r["new"]
        tiresias, fifo = r["baselines"]["tiresias"], r["baselines"]["fifo-backfill"]
        lines.append(
            f"| {r['case']} | {old['avg_wait_s']:,.0f} -> {new['avg_wait_s']:,.0f} "
            f"({100 * r['change']:+.1f} %) ({tiresias['avg_wait_s']:,.0f} / "
            f"{fifo['avg_wait_s']:,.0f}) "
            f"| {old['preemptions_per_job']:.2f} -> {new['preemptions_per_job']:.2f} "
            f"({tiresias['preemptions_per_job']:.2f}) "
            f"| {old['lost_work_pct']:.2f} -> {new['lost_work_pct']:.2f} "
            f"| {old['p99_jct_s']:,.0f} -> {new['p99_jct_s']:,.0f} ({fifo['p99_jct_s']:,.0f}) "
            f"| {r['met'][0]} -> {r['met'][1]} |"
        )
    higher, lower = counts["wait_higher"], counts["wait_lower"]
    lines += [
        "",
        f"{len(rows)} cases. Average wait higher by more than 1 % on {len(higher)}"
        f"{' (' + ', '.join(higher) + ')' if higher else ''}, lower on {len(lower)}"
        f"{' (' + ', '.join(lower) + ')' if lower else ''}.",
        f"Preemptions per job fewer on {counts['preemptions'][0]}, more on "
        f"{counts['preemptions'][1]}; lost work less on {counts['lost'][0]}, more on "
        f"{counts['lost'][1]}.",
        f"Goals gained: {'; '.join(counts['gained']) or 'none'}. "
        f"Goals lost: {'; '.join(counts['lost_goals']) or 'none'}.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the comparison; exit 2 on a file or policy it cannot read."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("results", nargs="+", type=Path, help="suite.py --out files of one run")
    ap.add_argument("--variant", help="the policy compared (default: gpuplatform with --before)")
    ap.add_argument("--base", default="gpuplatform", help="the policy compared with")
    ap.add_argument("--before", nargs="+", type=Path, help="an earlier run's files, for the base")
    ap.add_argument("--wall", action="store_true", help="count the wall-time goal too")
    args = ap.parse_args(argv)
    after = load(args.results, ap)
    before = load(args.before, ap) if args.before else after
    variant = args.variant or ("gpuplatform" if args.before else None)
    if variant is None:
        ap.error("--variant: name the policy to compare (or give --before)")
    if not args.before and variant == args.base:
        ap.error(f"--variant {variant}: the same policy as --base")
    for runs in (before, after):
        for case, policies in runs.items():
            if not all(b in policies for b in ("tiresias", "fifo-backfill")):
                ap.error(f"{case}: the goals compare with tiresias and fifo-backfill; run both")
    for name, runs, flag in ((args.base, before, "--base"), (variant, after, "--variant")):
        missing = sorted(case for case, policies in runs.items() if name not in policies)
        if len(missing) == len(runs):
            known = sorted({p for policies in runs.values() for p in policies})
            ap.error(f"{flag} {name}: no such policy in the results (they have {', '.join(known)})")
        if missing:
            ap.error(f"{flag} {name}: not in the results of {', '.join(missing)}")
    rows, counts = compare(before, after, args.base, variant, args.wall)
    if not rows:
        ap.error("no case is in both runs")
    print(markdown(rows, counts, len(counted_goals(args.wall))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
