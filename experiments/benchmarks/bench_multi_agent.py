"""Env steps/s of multi-agent training with 1, 2 and 8 independent modules.

    .venv/bin/python -m experiments.benchmarks.bench_multi_agent [--agents 1 2 8] [--periods 2]

MultiAgentPendulum-v1, one env copy, one module per agent (vmapped over a module axis),
batch 256, 256×256 networks, one gradient step per env step of each agent, learning
starts 1,000. Each log period is 1,000 env steps of every agent. Reported: the compile
time of the steady period program, env steps/s per agent and in total (all agents),
and the load average before and after.
"""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp

import jaxsac
from experiments.benchmarks import harness
from jaxsac.assembly import assemble, init_state
from jaxsac.jax_loop import run_period
from jaxsac.learner import Hyperparams


def bench_config(num_agents: int) -> jaxsac.SACConfig:
    return harness.pendulum_config(env_id="MultiAgentPendulum-v1", num_agents=num_agents,
                                   policy_mapping="independent")


def bench(num_agents: int, periods: int) -> dict:
    config = bench_config(num_agents)
    assembly = assemble(config)
    state = jax.jit(lambda k: init_state(assembly, k, Hyperparams.from_config(config)))(
        jax.random.key(0))
    state, _ = jax.jit(lambda s: run_period(assembly, s, 0))(state)  # warm-up period
    steady = jax.jit(lambda s, p: run_period(assembly, s, p), donate_argnums=0)
    per_period, first = harness.time_steady_periods(
        lambda s, p: steady(s, jnp.int32(p)), state, periods)
    per_agent = config.log_every / per_period
    return {"agents": num_agents, "env_steps_per_s_per_agent": round(per_agent, 1),
            "env_steps_per_s_total": round(per_agent * num_agents, 1),
            "compile_s": round(first - per_period, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[1, 2, 8])
    parser.add_argument("--periods", type=int, default=2)
    args = parser.parse_args()
    print(f"# {harness.machine_line(harness.machine())}")
    for num_agents in args.agents:
        load_before = harness.load_average()[0]
        result = bench(num_agents, args.periods)
        result["load_avg_1min"] = [load_before, harness.load_average()[0]]
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
