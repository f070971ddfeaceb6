"""Time the SAC learner update inside a jitted `lax.scan` and compare with matmul speed.

    .venv/bin/python -m experiments.benchmarks.bench_update [--updates 500] [--repeats 5]
        [--rounds 3] [--seeds 1] [--batch-size 256] [--obs-dim 3] [--layer-norm]

Reports updates/s, the FLOPs of one update (XLA's cost analysis of the compiled scan,
divided by the number of updates), the achieved GFLOP/s, and the machine's sustained
float32 rate on 1,000 chained 256×256×256 products in one jitted scan, measured in the
same run. Each of `--rounds` rounds times the update and then the chained products
(each the best of `--repeats` calls), so that both figures of a round see the same load
on a shared machine; the fraction of the matmul rate is taken per round, and the
figures reported are the medians over the rounds, with the per-round fractions beside
them. Setting: batch 256, hidden 256×256, obs 3, act 1, twin Q (Pendulum-v1's
sizes). `--batch-size 512 --obs-dim 5 --layer-norm` gives MuJoCo Playground's
CartpoleBalance in Playground's brax SAC settings (LayerNorm critics).

`--seeds S` > 1 vmaps the update over S learner states (as `vmap` over seeds does in
training) and the chained products over a leading axis of S; times are then given per
vmapped update and per seed.
"""

from __future__ import annotations

import argparse
import json
import statistics

import jax
import jax.numpy as jnp

from experiments.benchmarks import harness
from jaxsac.config import SACConfig
from jaxsac.learner import make_learner


def matmul_rate(repeats: int, chain: int = 1000, seeds: int = 1) -> float:
    """Sustained float32 GFLOP/s of `chain` dependent 256×256×256 products, each batched
    over a leading axis of `seeds` when that is above one."""
    shape = (256, 256) if seeds == 1 else (seeds, 256, 256)
    a = jax.random.normal(jax.random.key(0), shape) / 16.0

    @jax.jit
    def chained(x):
        return jax.lax.scan(lambda c, _: (jnp.tanh(c @ a), None), x, None, length=chain)[0]

    seconds = harness.best_time(chained, a, repeats=repeats)
    return seeds * chain * 2 * 256**3 / seconds / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=500, help="updates per jitted scan")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternated rounds of the update's and the matmuls' timings")
    parser.add_argument("--seeds", type=int, default=1,
                        help="learner states the update is vmapped over (1: no vmap)")
    parser.add_argument("--batch-size", type=int, default=harness.BATCH)
    parser.add_argument("--obs-dim", type=int, default=harness.OBS_DIM)
    parser.add_argument("--layer-norm", action="store_true",
                        help="LayerNorm critics (SACConfig.critic_layer_norm)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: at least 1 round is needed")

    def over_seeds(f):
        return f if args.seeds == 1 else jax.vmap(f)

    def seed_keys(key):
        return key if args.seeds == 1 else jax.random.split(key, args.seeds)

    config = SACConfig(batch_size=args.batch_size, critic_layer_norm=args.layer_norm)
    learner = make_learner(config, args.obs_dim, harness.ACT_DIM)
    update = over_seeds(learner.update)
    state = over_seeds(learner.init)(seed_keys(jax.random.key(0)))
    batch = over_seeds(lambda key: harness.random_batch(key, args.batch_size, args.obs_dim))(
        seed_keys(jax.random.key(1)))
    keys = jax.vmap(seed_keys)(jax.random.split(jax.random.key(2), args.updates))

    def many_updates(state, batch, keys):
        def body(s, key):
            s, metrics, _ = update(s, batch, key)
            return s, metrics["qf_loss"]
        return jax.lax.scan(body, state, keys)

    run = jax.jit(many_updates)
    _, compile_s = harness.timed(run, state, batch, keys)  # the first call compiles
    flops_per_update = harness.compiled_flops(update, state, batch, keys[0])
    rounds = []  # (ms per update, matmul GFLOP/s), timed one after the other
    for _ in range(args.rounds):
        seconds = harness.best_time(run, state, batch, keys, repeats=args.repeats)
        rounds.append((seconds / args.updates * 1e3,
                       matmul_rate(args.repeats, seeds=args.seeds)))
    fractions = [flops_per_update / (ms / 1e3) / 1e9 / rate for ms, rate in rounds]
    update_ms = statistics.median(ms for ms, _ in rounds)
    achieved = flops_per_update / (update_ms / 1e3) / 1e9
    peak = statistics.median(rate for _, rate in rounds)
    result = {
        "machine": harness.machine(),
        "seeds": args.seeds,
        "batch_size": args.batch_size,
        "obs_dim": args.obs_dim,
        "layer_norm": args.layer_norm,
        "update_ms": round(update_ms, 3),
        "update_ms_per_seed": round(update_ms / args.seeds, 3),
        "updates_per_s": round(1e3 / update_ms * args.seeds, 1),
        "gflop_per_update": round(flops_per_update / args.seeds / 1e9, 4),
        "achieved_gflops": round(achieved, 1),
        "matmul_256_gflops": round(peak, 1),
        "fraction_of_matmul_rate": round(statistics.median(fractions), 3),
        "fraction_per_round": [round(f, 3) for f in fractions],
        "compile_s": round(compile_s, 2),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
