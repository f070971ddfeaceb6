"""Env steps/s of data-parallel training on 1, 2 and 4 devices, the same computation.

    .venv/bin/python -m experiments.benchmarks.bench_scaling [--devices 1 2 4] [--periods 3]
    .venv/bin/python -m experiments.benchmarks.bench_scaling --platform gpu --devices 1

Pendulum-v1, 256×256 networks, global batch 256, 4 envs (one per shard beyond 4), one
gradient step per env step, 4 data shards (`--shards`) on every device count (so every
run computes the same global batches; each device holds shards / devices of them).
Each device count runs in its own process; on the CPU the devices are forced host
devices (XLA_FLAGS=--xla_force_host_platform_device_count=N), which share the cores.
Reported per device count: compile time of the steady period program, env steps/s
(= gradient steps/s) over the timed periods, and the collectives XLA put into that
program with the bytes each moves (from the compiled HLO).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import defaultdict

from experiments.benchmarks import harness

BYTES = {"f32": 4, "s32": 4, "u32": 4, "f16": 2, "bf16": 2, "s8": 1, "u8": 1, "pred": 1,
         "f64": 8, "s64": 8, "u64": 8}
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
SHAPE = re.compile(r"\b(" + "|".join(BYTES) + r")\[([\d,]*)\]")


def bench_config(num_shards: int):
    return harness.pendulum_config(num_envs=max(4, num_shards), data_shards=num_shards)


def collectives(hlo: str) -> dict[str, dict[str, int]]:
    """{kind: {"ops": count, "bytes": result bytes summed}} of the compiled program's
    collective ops, each op counted once (ops inside loops run once per loop step)."""
    found: dict[str, dict[str, int]] = defaultdict(lambda: {"ops": 0, "bytes": 0})
    for line in hlo.splitlines():
        for kind in COLLECTIVES:
            match = re.search(rf"=\s*(.*?)\s{kind}(-start)?\(", line)
            if match:
                size = sum(BYTES[t] * _count(dims) for t, dims in SHAPE.findall(match.group(1)))
                found[kind]["ops"] += 1
                found[kind]["bytes"] += size
    return dict(found)


def _count(dims: str) -> int:
    n = 1
    for d in filter(None, dims.split(",")):
        n *= int(d)
    return n


def child(periods: int, num_shards: int) -> dict:
    import jax
    import jax.numpy as jnp

    from jaxsac import sharding
    from jaxsac.assembly import assemble, init_state
    from jaxsac.jax_loop import run_period, run_periods
    from jaxsac.learner import Hyperparams

    config = bench_config(num_shards)
    mesh = sharding.make_mesh()
    assembly = assemble(config, placement=sharding.placement(mesh))
    hparams = Hyperparams.from_config(config)
    state = jax.jit(lambda k: init_state(assembly, k, hparams))(jax.random.key(0))
    state, _ = jax.jit(lambda s: run_periods(assembly, s, 0, 1))(state)  # warm-up, first updates
    steady = jax.jit(lambda s, p: run_period(assembly, s, p), donate_argnums=0)
    compiled, compile_s = harness.compile_timed(steady, state, jnp.int32(1))
    seconds = []
    for period in range(1, 2 + periods):  # the first call is not timed
        (state, row), s = harness.timed(compiled, state, jnp.int32(period))
        seconds.append(s)
    best = min(seconds[1:])
    return {"devices": len(jax.devices()), "platform": jax.devices()[0].platform,
            "compile_s": round(compile_s, 1), "period_s": [round(s, 3) for s in seconds[1:]],
            "env_steps_per_s": round(config.log_every / best),
            "grad_steps": int(row["grad_steps"]), "collectives": collectives(compiled.as_text())}


def run_devices(devices: int, periods: int, num_shards: int, platform_name: str) -> dict:
    env = {**os.environ}
    if platform_name == "cpu":
        env["JAX_PLATFORMS"] = "cpu"
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    else:  # the first `devices` accelerators
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(devices))
    return harness.child_record(sys.executable, "experiments.benchmarks.bench_scaling",
                                ["--child", "--periods", periods, "--shards", num_shards], env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--periods", type=int, default=3)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--platform", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.periods, args.shards)), flush=True)
        return
    # JAX starts in the children only, each with its own devices
    print(f"# {harness.machine_line(harness.machine(devices=False))}, load average "
          f"{harness.load_average()[0]:.2f} at start", flush=True)
    for devices in args.devices:
        out = run_devices(devices, args.periods, args.shards, args.platform)
        print(json.dumps(out), flush=True)
    print(f"# load average {harness.load_average()[0]:.2f} at the end", flush=True)


if __name__ == "__main__":
    main()
