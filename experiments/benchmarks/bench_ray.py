"""Remote env runners on Ray against the local gymnasium loop, on HalfCheetah-v5 (MuJoCo).

    .venv/bin/python -m experiments.benchmarks.bench_ray [--rounds 3] [--num-envs 2]

For 0 (the local loop), 1 and 2 remote runners over the same `--num-envs` envs (the
tuned HalfCheetah-v5: 256×256 networks, blocks of 8 iterations), in alternating
rounds, each on a local Ray of 2 CPUs:
- sampling: env steps/s of `runner.sample` alone (the stochastic policy acting, the
  envs stepping; for remote runners also the object-store broadcast of the actor
  parameters and the return of the rows), and seconds per block;
- training: env steps/s of the whole loop (one gradient step per env step, batch 256).
The per-block overhead of Ray is a remote runner's seconds per block minus the local
loop's. The bytes that cross the network per block are counted from the arrays.
Writes a JSON line per measurement and a summary of medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax
import numpy as np
import ray

import jaxsac
from experiments.benchmarks import harness
from jaxsac.host_loop import ACTING, HostLoop, host_runner
from jaxsac.schedule import Phase


def config_for(num_runners: int, num_envs: int, block_steps: int) -> jaxsac.SACConfig:
    return jaxsac.tuned("HalfCheetah-v5", num_envs=num_envs, num_env_runners=num_runners,
                        host_block_steps=block_steps, learning_starts=256 * num_envs,
                        buffer_capacity=20_000 * num_envs, eval_episodes=1)


def payload_bytes(tree) -> int:
    return sum(np.asarray(x).nbytes for x in jax.tree.leaves(jax.device_get(tree)))


def measure(num_runners: int, num_envs: int, block_steps: int, blocks: int,
            train_blocks: int) -> dict:
    config = config_for(num_runners, num_envs, block_steps)
    start = time.perf_counter()
    runner = host_runner(config)
    try:
        loop = HostLoop(config, runner)
        state = loop.init(jax.random.key(0))
        startup = time.perf_counter() - start
        warmup_iterations = config.learning_starts // num_envs
        state = loop.run(state, Phase.WARMUP, warmup_iterations)
        params, stats = state.learner.actor_params, state.runner
        iteration = warmup_iterations
        runner.sample(ACTING[Phase.LEARN], params, stats, state.key, iteration, block_steps)
        iteration += block_steps
        seconds = []
        for _ in range(blocks):
            rows, s = harness.timed(runner.sample, ACTING[Phase.LEARN], params, stats,
                                    state.key, iteration, block_steps)
            seconds.append(s)
            iteration += block_steps
        broadcast_bytes = payload_bytes((params, stats))  # before the loop donates them
        state = jax.block_until_ready(loop.run(state, Phase.FIRST_UPDATE, 1))
        state = jax.block_until_ready(loop.run(state, Phase.LEARN, block_steps))  # compiles
        state, train_s = harness.timed(loop.run, state, Phase.LEARN,
                                       train_blocks * block_steps)
    finally:
        runner.close()
    per_block = statistics.median(seconds)
    return {"num_env_runners": num_runners, "num_envs": num_envs, "block_steps": block_steps,
            "startup_s": round(startup, 2),
            "sample_env_steps_per_s": round(block_steps * num_envs / per_block, 1),
            "sample_s_per_block": round(per_block, 5),
            "train_env_steps_per_s": round(train_blocks * block_steps * num_envs / train_s, 1),
            "broadcast_bytes_per_block": broadcast_bytes,
            "rows_bytes_per_block": int(rows.nbytes)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--num-envs", type=int, default=2)
    parser.add_argument("--block-steps", type=int, default=8)
    parser.add_argument("--blocks", type=int, default=40, help="sampling blocks timed")
    parser.add_argument("--train-blocks", type=int, default=10,
                        help="training blocks timed")
    parser.add_argument("--runners", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    print(json.dumps({"machine": harness.machine(), "ray": ray.__version__}))
    results: dict[int, list[dict]] = {n: [] for n in args.runners}
    for _ in range(args.rounds):
        for num_runners in args.runners:
            record = measure(num_runners, args.num_envs, args.block_steps, args.blocks,
                             args.train_blocks)
            results[num_runners].append(record)
            print(json.dumps(record), flush=True)
    local = (statistics.median(r["sample_s_per_block"] for r in results[0])
             if 0 in results else None)
    for num_runners, records in results.items():
        summary = {key: statistics.median(r[key] for r in records)
                   for key in ("sample_env_steps_per_s", "sample_s_per_block",
                               "train_env_steps_per_s", "startup_s")}
        if local is not None and num_runners:
            summary["ray_overhead_s_per_block"] = round(summary["sample_s_per_block"] - local,
                                                        5)
        print(json.dumps({"summary": num_runners, **summary,
                          "broadcast_bytes_per_block": records[0]["broadcast_bytes_per_block"],
                          "rows_bytes_per_block": records[0]["rows_bytes_per_block"]}))
    ray.shutdown()


if __name__ == "__main__":
    main()
