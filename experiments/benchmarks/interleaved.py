"""A/B timing on a noisy machine: variants alternate in one process, in a random order
each round, so drift and other tenants' load hit them alike.

    .venv/bin/python -m experiments.benchmarks.interleaved [--rounds 25] [--iterations 300]

It times whole training iterations (`run_iterations` of LEARN iterations, the settings
of `profile_iteration`) under each `SACConfig.prng_impl`. Reported per variant:
milliseconds per iteration, the minimum, 10th and 25th percentiles and the median over
the rounds (the low quantiles are the least disturbed by load). The timing is
`harness.interleaved_ms`, which `compare_rejax` uses for jaxsac against rejax.
"""

from __future__ import annotations

import argparse
import json

import jax

from experiments.benchmarks import harness, peer_tasks
from jaxsac.config import PRNG_IMPLS
from jaxsac.jax_loop import run_iterations

PEERS_BUFFER = peer_tasks.TASKS["pendulum"].buffer_size  # holds the comparison's whole run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--iterations", type=int, default=300, help="iterations per call")
    args = parser.parse_args()

    calls = {}
    for impl in PRNG_IMPLS:
        config = harness.pendulum_config(buffer_capacity=PEERS_BUFFER, prng_impl=impl)
        assembly, state = harness.state_after(config, 2)
        segment = jax.jit(lambda s, p=assembly: run_iterations(p, s, s.iteration,
                                                               args.iterations)[0])
        calls[impl] = lambda f=segment, s=state: f(s)
    ms = harness.interleaved_ms(calls, args.rounds, args.iterations)
    print(json.dumps({"machine": harness.machine(), "load_average": harness.load_average(),
                      "rounds": args.rounds, "iterations_per_call": args.iterations,
                      "ms_per_iteration": harness.quantiles(ms)}, indent=2))


if __name__ == "__main__":
    main()
