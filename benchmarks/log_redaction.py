"""What masking a job's output costs a team's viewer (``scheduler.env_visibility.shown_log``).

A synthetic training log (step lines, every 500th line printing one of the job's env values, a
``--token`` argument or a URL with a password) of ``--mb`` MB, and an environment of ``--values``
values (8 to 64 characters: tokens, paths, URLs). Measured, as the median of ``--rounds``:

1. ``shown_log`` of the whole log at once, and of 1/4, 1/2 and 3/4 of it (linear: the same
   ms per MB), split into the one pass for all the values and ``redact_text``'s passes;
2. the same log read as the API serves it, in reads of ``LOG_LIMIT_MAX`` (1 MiB);
3. for comparison, one pass per value (``str.replace`` and ``re.sub``), the approach ruled
   out (its cost grows with the number of values);
4. the worst case for the values' pass: a log made of nothing but occurrences of one value;
5. compiling the values' patterns (cached per environment afterwards).

No database is needed:

    .venv/bin/python benchmarks/log_redaction.py [--mb 10] [--values 50] [--rounds 5]

Prints JSON: CPU seconds, medians.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import string
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplatform.settings")


def _environment(count: int, rng: random.Random) -> dict[str, str]:
    alphabet = string.ascii_letters + string.digits
    env = {}
    for i in range(count):
        kind = i % 3
        length = rng.randint(8, 64)
        if kind == 0:
            value = "tok_" + "".join(rng.choices(alphabet, k=length))
        elif kind == 1:
            value = "/mnt/private/" + "/".join(
                "".join(rng.choices(string.ascii_lowercase, k=6)) for _ in range(length // 8 + 1)
            )
        else:
            value = "".join(rng.choices(alphabet + "-_", k=length))
        env[f"VAR_{i}"] = value
    return env


def _log(megabytes: float, env: dict[str, str], rng: random.Random) -> str:
    values = list(env.values())
    lines, size, step = [], 0, 0
    while size < megabytes * 1024 * 1024:
        step += 1
        if step % 500 == 0:
            which = step // 500 % 3
            if which == 0:
                line = f"[env] VAR={rng.choice(values)} loaded\n"
            elif which == 1:
                line = f"argv: --wandb-token=wk{step} --data {rng.choice(values)}\n"
            else:
                line = f"fetch https://svc:pw{step}@data.example.com/shard-{step}\n"
        else:
            line = (
                f"step {step:8d}  loss {rng.random():.4f}  lr 3.0e-04  grad_norm "
                f"{rng.random() * 3:.3f}  tokens/s {rng.randint(90000, 120000)}\n"
            )
        lines.append(line)
        size += len(line)
    return "".join(lines)


def _median_s(func, rounds: int) -> float:
    """Median CPU seconds of ``func`` (CPU, not wall: the machine is shared)."""
    times = []
    for _ in range(rounds):
        start = time.process_time()
        func()
        times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=10.0)
    parser.add_argument("--values", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import django

    django.setup()
    from scheduler import env_visibility as ev
    from scheduler.selectors import LOG_LIMIT_MAX

    rng = random.Random(7)
    env = _environment(args.values, rng)
    text = _log(args.mb, env, rng)
    mb = len(text.encode()) / 1024 / 1024
    values = ev._env_values(env)  # noqa: SLF001

    ev._values_patterns.cache_clear()  # noqa: SLF001
    start = time.process_time()
    ev._values_patterns(values)  # noqa: SLF001
    compile_ms = (time.process_time() - start) * 1000

    masked = ev.shown_log(text, env=env, visible=False)
    result: dict = {
        "log_mb": round(mb, 2),
        "env_values": len(values),
        "masks_in_output": masked.count(ev.REDACTED),
        "values_left_in_output": sum(masked.count(v) for v in values),
        "compile_patterns_ms": round(compile_ms, 2),
    }

    whole = _median_s(lambda: ev.shown_log(text, env=env, visible=False), args.rounds)
    values_pass = _median_s(lambda: ev._mask_values(text, values), args.rounds)  # noqa: SLF001
    result["whole_log_s"] = round(whole, 3)
    result["values_pass_s"] = round(values_pass, 3)
    result["redact_text_passes_s"] = round(
        _median_s(lambda: ev.redact_text(text, within_lines=True), args.rounds), 3
    )
    result["member_s"] = round(
        _median_s(lambda: ev.shown_log(text, env=env, visible=True), args.rounds), 6
    )
    scaling = {}
    for fraction in (0.25, 0.5, 0.75, 1.0):
        part = text[: int(len(text) * fraction)]
        seconds = _median_s(lambda part=part: ev.shown_log(part, env=env, visible=False), 3)
        scaling[f"{fraction * mb:.1f}_mb"] = round(seconds / (fraction * mb) * 1000, 1)
    result["ms_per_mb_by_size"] = scaling

    def by_reads() -> None:
        data = text.encode()
        for offset in range(0, len(data), LOG_LIMIT_MAX):
            piece = data[offset : offset + LOG_LIMIT_MAX].decode("utf-8", errors="replace")
            ev.shown_log(piece, env=env, visible=False)

    result["in_1mib_reads_s"] = round(_median_s(by_reads, args.rounds), 3)

    def per_value_replace() -> None:
        out = text
        for value in values:
            out = out.replace(value, ev.REDACTED)

    def per_value_regex() -> None:
        out = text
        for value in values:
            out = re.sub(re.escape(value), ev.REDACTED, out)

    result["per_value_str_replace_s"] = round(_median_s(per_value_replace, args.rounds), 3)
    result["per_value_re_sub_s"] = round(_median_s(per_value_regex, args.rounds), 3)

    dense = (values[-1] + " ") * int(mb * 1024 * 1024 / (len(values[-1]) + 1))
    result["dense_occurrences_log_s"] = round(
        _median_s(lambda: ev.shown_log(dense, env=env, visible=False), args.rounds), 3
    )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
