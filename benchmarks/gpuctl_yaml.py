"""Benchmark: gpuctl reading a job array's spec of many items (``gpuctl.yamltext.load_all``, what
``gpuctl submit -f`` parses before it checks anything).

    .venv/bin/python benchmarks/gpuctl_yaml.py [--items 10000] [--repeat 5]

Prints the spec's size and the median CPU time of a parse. It reads gpuctl from the tree it lives
in: to time another tree, copy the script into it and run the two copies alternately.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuctl import yamltext  # noqa: E402


def array_spec(items: int) -> str:
    """A sweep: one template, an ``env`` override per index."""
    overrides = "\n".join(
        f"    - env: {{SEED: '{index}', LR: '0.00{index % 10}'}}" for index in range(items)
    )
    return (
        "apiVersion: gpuplatform/v1\nkind: TrainingJob\nmetadata: {name: sweep}\nspec:\n"
        "  image: x\n  command: [python, train.py]\n  workers: 1\n  gpusPerWorker: 1\n"
        f"array:\n  items:\n{overrides}\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    text = array_spec(args.items)
    cpu_s = []
    for _ in range(args.repeat):
        start = time.process_time()
        yamltext.load_all(text)
        cpu_s.append(time.process_time() - start)
    print(f"{yamltext.__file__}: {len(text):,} bytes, parse {statistics.median(cpu_s):.3f} s CPU")


if __name__ == "__main__":
    main()
