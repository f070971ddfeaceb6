"""A/B timing on a noisy machine: variants alternate in one process, in a random order
each round, so drift and other tenants' load hit them alike.

    .venv/bin/python -m experiments.benchmarks.interleaved [--rounds 25] [--iterations 300]

Run as a script, it times whole training iterations (`run_iterations` of LEARN iterations,
the settings of `profile_iteration`) under each `SACConfig.prng_impl`. Reported per
variant: milliseconds per iteration, the minimum, 10th and 25th percentiles and the
median over the rounds (the low quantiles are the least disturbed by load).
`compare_rejax` uses the same timing for jaxsac against rejax.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np


def interleaved_ms(calls: dict[str, Callable[[], Any]], rounds: int, per_call: int,
                   seed: int = 0) -> dict[str, list[float]]:
    """Milliseconds per unit of work of each call in each round (one warm-up call each
    first); `per_call`: units of work (iterations, updates) one call does."""
    for call in calls.values():
        jax.block_until_ready(call())
    order, rng = list(calls), random.Random(seed)
    ms: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            start = time.perf_counter()
            jax.block_until_ready(calls[name]())
            ms[name].append((time.perf_counter() - start) / per_call * 1e3)
    return ms


def quantiles(ms: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    return {name: {q: round(float(np.quantile(v, p)), 3)
                   for q, p in (("min", 0.0), ("q10", 0.1), ("q25", 0.25), ("median", 0.5))}
            for name, v in ms.items()}


def machine() -> dict[str, Any]:
    return {"machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
            "jax": jax.__version__, "load_average": os.getloadavg()}


def main() -> None:
    from experiments.benchmarks.profile_iteration import config_for, state_after
    from jaxsac.config import PRNG_IMPLS
    from jaxsac.jax_loop import run_iterations

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--iterations", type=int, default=300, help="iterations per call")
    args = parser.parse_args()

    calls = {}
    for impl in PRNG_IMPLS:
        assembly, state = state_after(config_for(prng_impl=impl), 2)
        segment = jax.jit(lambda s, p=assembly: run_iterations(p, s, s.iteration,
                                                           args.iterations)[0])
        calls[impl] = lambda f=segment, s=state: f(s)
    ms = interleaved_ms(calls, args.rounds, args.iterations)
    print(json.dumps({**machine(), "rounds": args.rounds, "iterations_per_call": args.iterations,
                      "ms_per_iteration": quantiles(ms)}, indent=2))


if __name__ == "__main__":
    main()
