"""Time the SAC learner update inside a jitted `lax.scan` and compare with matmul speed.

    .venv/bin/python -m experiments.benchmarks.bench_update [--updates 500] [--repeats 5]
                                                            [--seeds 1]

Reports updates/s, the FLOPs of one update (XLA's cost analysis of the compiled scan,
divided by the number of updates), the achieved GFLOP/s, and the machine's sustained
float32 rate on 1,000 chained 256×256×256 products in one jitted scan, measured in the
same run. Setting: batch 256, hidden 256×256, obs 3, act 1, twin Q.

`--seeds S` > 1 vmaps the update over S learner states (as `vmap` over seeds does in
training) and the chained products over a leading axis of S; times are then given per
vmapped update and per seed.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import jax
import jax.numpy as jnp

from jaxsac.config import SACConfig
from jaxsac.learner import make_learner
from jaxsac.types import Batch

OBS_DIM, ACT_DIM, BATCH = 3, 1, 256


def best_time(fn, *args, repeats: int) -> float:
    """Fastest of `repeats` calls (after one warm-up call), seconds."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return min(times)


def compiled_flops(fn, *args) -> float:
    analysis = jax.jit(fn).lower(*args).compile().cost_analysis()
    if isinstance(analysis, list):  # older jax returns one dict per device
        analysis = analysis[0]
    return float(analysis["flops"])


def matmul_rate(repeats: int, chain: int = 1000, seeds: int = 1) -> float:
    """Sustained float32 GFLOP/s of `chain` dependent 256×256×256 products, each batched
    over a leading axis of `seeds` when that is above one."""
    shape = (256, 256) if seeds == 1 else (seeds, 256, 256)
    a = jax.random.normal(jax.random.key(0), shape) / 16.0

    @jax.jit
    def chained(x):
        return jax.lax.scan(lambda c, _: (jnp.tanh(c @ a), None), x, None, length=chain)[0]

    seconds = best_time(chained, a, repeats=repeats)
    return seeds * chain * 2 * 256**3 / seconds / 1e9


def random_batch(key) -> Batch:
    k = jax.random.split(key, 4)
    return Batch(
        obs=jax.random.normal(k[0], (BATCH, OBS_DIM)),
        action=jax.random.uniform(k[1], (BATCH, ACT_DIM), minval=-1, maxval=1),
        reward=jax.random.normal(k[2], (BATCH,)),
        next_obs=jax.random.normal(k[3], (BATCH, OBS_DIM)),
        discount=jnp.full((BATCH,), 0.99),
        n_step=jnp.ones((BATCH,), jnp.int32),
        weights=jnp.ones((BATCH,)),
        indices=jnp.arange(BATCH, dtype=jnp.int32),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=500, help="updates per jitted scan")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=1,
                        help="learner states the update is vmapped over (1: no vmap)")
    args = parser.parse_args()

    def over_seeds(f):
        return f if args.seeds == 1 else jax.vmap(f)

    def seed_keys(key):
        return key if args.seeds == 1 else jax.random.split(key, args.seeds)

    learner = make_learner(SACConfig(), OBS_DIM, ACT_DIM)
    update = over_seeds(learner.update)
    state = over_seeds(learner.init)(seed_keys(jax.random.key(0)))
    batch = over_seeds(random_batch)(seed_keys(jax.random.key(1)))
    keys = jax.vmap(seed_keys)(jax.random.split(jax.random.key(2), args.updates))

    def many_updates(state, batch, keys):
        def body(s, key):
            s, metrics, _ = update(s, batch, key)
            return s, metrics["qf_loss"]
        return jax.lax.scan(body, state, keys)

    run = jax.jit(many_updates)
    start = time.perf_counter()
    jax.block_until_ready(run(state, batch, keys))
    compile_s = time.perf_counter() - start
    seconds = best_time(run, state, batch, keys, repeats=args.repeats)
    flops_per_update = compiled_flops(update, state, batch, keys[0])
    update_ms = seconds / args.updates * 1e3
    achieved = flops_per_update / (update_ms / 1e3) / 1e9
    peak = matmul_rate(args.repeats, seeds=args.seeds)
    result = {
        "machine": f"{platform.machine()}, {jax.device_count()} {jax.devices()[0].platform} "
                   f"device(s), jax {jax.__version__}",
        "seeds": args.seeds,
        "update_ms": round(update_ms, 3),
        "update_ms_per_seed": round(update_ms / args.seeds, 3),
        "updates_per_s": round(1e3 / update_ms * args.seeds, 1),
        "gflop_per_update": round(flops_per_update / args.seeds / 1e9, 4),
        "achieved_gflops": round(achieved, 1),
        "matmul_256_gflops": round(peak, 1),
        "fraction_of_matmul_rate": round(achieved / peak, 3),
        "compile_s": round(compile_s, 2),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
