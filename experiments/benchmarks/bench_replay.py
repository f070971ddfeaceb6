"""Replay buffer timings: add, uniform sample, prioritized sample + update, bytes per step.

    .venv/bin/python -m experiments.benchmarks.bench_replay [--capacities 10000 100000 1000000]

Setting: obs dim 17, act dim 6, batch 256, 8 envs, n_step (1, 3), episodes of 1 to 400
steps; each buffer is filled past its capacity (so the rings have wrapped) before timing.
"Per call" times a jitted call from Python (dispatch included), with the state donated to
`add` and `update_priorities`; "in scan" is the cost per iteration of a jitted
`lax.scan` of 200 of them (the training loop's setting, no dispatch). Each number is the
best of `--repeats` runs (the least disturbed by other load on the machine). An `add` that
copied the buffer would grow with capacity.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp

from experiments.benchmarks import harness
from jaxsac import replay
from jaxsac.types import Batch, Step

OBS_DIM, ACT_DIM, NUM_ENVS, BATCH_SIZE, N_STEP = 17, 6, 8, 256, (1, 3)
SCAN_LENGTH = 200
clock = time.perf_counter  # --clock process: CPU time of this process instead


def random_step(key: jax.Array) -> Step:
    keys = jax.random.split(key, 5)
    done = jax.random.uniform(keys[3], (NUM_ENVS,)) < 1 / 200
    terminated = done & (jax.random.uniform(keys[4], (NUM_ENVS,)) < 0.5)
    return Step(
        obs=jax.random.normal(keys[0], (NUM_ENVS, OBS_DIM)),
        action=jax.random.uniform(keys[1], (NUM_ENVS, ACT_DIM), minval=-1, maxval=1),
        reward=jax.random.normal(keys[2], (NUM_ENVS,)),
        terminated=terminated,
        truncated=done & ~terminated,
        next_obs=jax.random.normal(keys[0], (NUM_ENVS, OBS_DIM)),
    )


def filled_state(buf: replay.ReplayBuffer, capacity: int) -> replay.ReplayState:
    example = jax.tree.map(lambda x: x[0], random_step(jax.random.key(0)))
    adds = capacity // NUM_ENVS + 100

    @jax.jit
    def fill(state):
        def body(state, i):
            return buf.add(state, random_step(jax.random.fold_in(jax.random.key(1), i))), None
        return jax.lax.scan(body, state, jnp.arange(adds))[0]

    return jax.block_until_ready(fill(buf.init(example)))


def per_call_seconds(call, state, repeats: int, iters: int):
    """Seconds per call of `state, _ = call(state, i)` (best of `repeats`), and the state."""
    state, _ = call(state, 0)  # compile and warm up
    jax.block_until_ready(state)
    times = []
    for r in range(repeats):
        begin = clock()
        for i in range(iters):
            state, out = call(state, r * iters + i + 1)
        jax.block_until_ready((state, out))
        times.append((clock() - begin) / iters)
    return min(times), state


def scan_seconds(body, state, repeats: int):
    """Seconds per iteration of a jitted lax.scan of SCAN_LENGTH `body` calls (best of)."""
    run = jax.jit(lambda state, offset: jax.lax.scan(
        body, state, offset + jnp.arange(SCAN_LENGTH))[0], donate_argnums=0)
    state = jax.block_until_ready(run(state, 0))
    times = []
    for r in range(repeats):
        begin = clock()
        state = jax.block_until_ready(run(state, (r + 1) * SCAN_LENGTH))
        times.append((clock() - begin) / SCAN_LENGTH)
    return min(times), state


def consume(batch: Batch) -> jax.Array:
    """An int32 zero that depends on every field, so XLA cannot drop any of the sampling."""
    total = sum(jnp.sum(x.astype(jnp.float32)) for x in batch)
    return (total == jnp.inf).astype(jnp.int32)


def bytes_per_step(state: replay.ReplayState, capacity: int) -> float:
    return sum(x.nbytes for x in jax.tree.leaves(state)) / capacity


def bench_buffer(capacity: int, prioritized: bool, repeats: int,
                 iters: int) -> dict[str, float]:
    key, td_key = jax.random.key(2), jax.random.key(4)
    keys = lambda i: jax.random.fold_in(key, i)  # noqa: E731
    td_error = lambda i: jnp.abs(  # noqa: E731
        jax.random.normal(jax.random.fold_in(td_key, i), (BATCH_SIZE,)))
    buf = replay.episode_buffer(capacity, NUM_ENVS, BATCH_SIZE, n_step=N_STEP, gamma=0.99,
                                prioritized=prioritized)
    state = filled_state(buf, capacity)
    kind = "prioritized" if prioritized else "uniform"
    results = {f"bytes_per_step_{kind}": bytes_per_step(state, capacity)}
    step = random_step(jax.random.key(3))

    add = jax.jit(buf.add, donate_argnums=0)
    results[f"add_{kind}"], state = per_call_seconds(
        lambda s, i: (add(s, step), None), state, repeats, iters)
    sample = jax.jit(lambda s, i: buf.sample(s, keys(i)))
    results[f"sample_{kind}"], state = per_call_seconds(
        lambda s, i: (s, sample(s, i)), state, repeats, iters)
    results[f"add_{kind}_scan"], state = scan_seconds(
        lambda s, i: (buf.add(s, step), None), state, repeats)

    def sample_in_scan(s, i):
        return s.replace(num_valid=s.num_valid + consume(buf.sample(s, keys(i)))), None

    results[f"sample_{kind}_scan"], state = scan_seconds(sample_in_scan, state, repeats)
    if not prioritized:
        return results

    update = jax.jit(buf.update_priorities, donate_argnums=0)
    indices = sample(state, 0).indices
    td = jax.block_until_ready(td_error(0))
    results["update"], state = per_call_seconds(
        lambda s, i: (update(s, indices, td), None), state, repeats, iters)
    results["update_scan"], state = scan_seconds(
        lambda s, i: (buf.update_priorities(s, indices, td_error(i)), None), state, repeats)

    def sample_and_update(s, i):
        batch = buf.sample(s, keys(i))
        s = buf.update_priorities(s, batch.indices, td_error(i))
        return s.replace(num_valid=s.num_valid + consume(batch)), batch.reward

    fused = jax.jit(sample_and_update, donate_argnums=0)
    results["sample_update"], state = per_call_seconds(fused, state, repeats, iters)
    results["sample_update_scan"], state = scan_seconds(
        lambda s, i: (sample_and_update(s, i)[0], None), state, repeats)
    return results


def bench_capacity(capacity: int, repeats: int, iters: int) -> dict[str, float]:
    return {**bench_buffer(capacity, False, repeats, iters),
            **bench_buffer(capacity, True, repeats, iters)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacities", type=int, nargs="+", default=[10**4, 10**5, 10**6])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--clock", choices=["wall", "process"], default="wall",
                        help="process: count this process's CPU time (steadier when other "
                             "jobs share the cores; includes all of XLA's threads)")
    args = parser.parse_args()
    global clock
    clock = time.process_time if args.clock == "process" else time.perf_counter

    print(f"{harness.machine_line(harness.machine())}, load average "
          f"{harness.load_average()[0]:.1f} at start")
    print(f"obs dim {OBS_DIM}, act dim {ACT_DIM}, {NUM_ENVS} envs, batch {BATCH_SIZE}, "
          f"n_step {N_STEP}; microseconds ({args.clock} clock), best of {args.repeats}")
    rows = [
        ("add (uniform)", "add_uniform"),
        ("add (prioritized)", "add_prioritized"),
        ("uniform sample", "sample_uniform"),
        ("prioritized sample", "sample_prioritized"),
        ("prioritized update", "update"),
        ("prioritized sample+update", "sample_update"),
    ]
    scan_rows = [
        ("add (uniform)", "add_uniform_scan"),
        ("add (prioritized)", "add_prioritized_scan"),
        ("uniform sample", "sample_uniform_scan"),
        ("prioritized sample", "sample_prioritized_scan"),
        ("prioritized update", "update_scan"),
        ("prioritized sample+update", "sample_update_scan"),
    ]
    results = {c: bench_capacity(c, args.repeats, args.iters) for c in args.capacities}
    header = f"{'':32}" + "".join(f"{c:>12,}" for c in args.capacities)
    for title, table in (("per call (donated)", rows), ("in lax.scan, per iteration", scan_rows)):
        print(f"\n{title}\n{header}")
        for label, name in table:
            print(f"{label:32}" + "".join(f"{results[c][name] * 1e6:12.1f}"
                                          for c in args.capacities))
    print("\nbytes per stored step (whole state / capacity)")
    print(header)
    for kind in ("uniform", "prioritized"):
        print(f"{kind:32}" + "".join(f"{results[c]['bytes_per_step_' + kind]:12.1f}"
                                     for c in args.capacities))
    print(f"(one obs + one action + reward + flags = {4 * OBS_DIM + 4 * ACT_DIM + 4 + 1} bytes)")
    for c in args.capacities:
        per_call = results[c]["sample_update"] / results[c]["sample_uniform"]
        in_scan = results[c]["sample_update_scan"] / results[c]["sample_uniform_scan"]
        print(f"capacity {c:,}: prioritized sample+update / uniform sample = "
              f"{per_call:.2f}x per call, {in_scan:.2f}x in scan")
    print(f"load average {harness.load_average()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
