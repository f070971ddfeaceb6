"""Env steps/s of whole training iterations (env step, add, sample, update, priorities).

    .venv/bin/python -m experiments.benchmarks.bench_train [--periods 3] [--seeds 1 8]

Pendulum-v1, batch 256, 256×256 networks, one gradient step per env step, learning
starts 1,000. Each log period is 1,000 env steps. Reported: the compile time of the
steady-state period program, and env steps/s over the steady periods after it (the JAX
path with 1 seed and with seeds vmapped; the gymnasium host loop).
"""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp

from experiments.benchmarks import harness
from jaxsac.assembly import assemble, init_state
from jaxsac.host_loop import HostLoop, host_runner
from jaxsac.jax_loop import run_period
from jaxsac.learner import Hyperparams


def bench_jax(num_seeds: int, periods: int) -> dict:
    config = harness.pendulum_config(backend="jax")
    assembly = assemble(config)
    def vm(f, in_axes=0):
        return jax.vmap(f, in_axes=in_axes) if num_seeds > 1 else f

    init = jax.jit(vm(lambda k: init_state(assembly, k, Hyperparams.from_config(config))))
    keys = jax.random.split(jax.random.key(0), num_seeds) if num_seeds > 1 else jax.random.key(0)
    state = init(keys)
    state, _ = jax.jit(vm(lambda s: run_period(assembly, s, 0)))(state)  # warm-up period
    steady = jax.jit(vm(lambda s, p: run_period(assembly, s, p), in_axes=(0, None)),
                     donate_argnums=0)
    per_period, first = harness.time_steady_periods(
        lambda s, p: steady(s, jnp.int32(p)), state, periods)
    return {"path": "jax", "seeds": num_seeds,
            "env_steps_per_s": round(num_seeds * config.log_every / per_period, 1),
            "env_steps_per_s_per_seed": round(config.log_every / per_period, 1),
            "compile_s": round(first - per_period, 2)}


def bench_gymnasium(periods: int) -> dict:
    config = harness.pendulum_config(backend="gymnasium")
    runner = host_runner(config)
    try:
        loop = HostLoop(config, runner)
        state = loop.init(jax.random.key(0))
        state, _ = loop.run_period(state, 0)
        per_period, first = harness.time_steady_periods(loop.run_period, state, periods)
    finally:
        runner.close()
    return {"path": "gymnasium", "seeds": 1,
            "env_steps_per_s": round(config.log_every / per_period, 1),
            "env_steps_per_s_per_seed": round(config.log_every / per_period, 1),
            "compile_s": round(first - per_period, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--periods", type=int, default=3, help="steady periods timed")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--skip-gymnasium", action="store_true")
    args = parser.parse_args()
    results = [bench_jax(n, args.periods) for n in args.seeds]
    if not args.skip_gymnasium:
        results.append(bench_gymnasium(args.periods))
    print(json.dumps({"machine": harness.machine(), "results": results}, indent=2))


if __name__ == "__main__":
    main()
