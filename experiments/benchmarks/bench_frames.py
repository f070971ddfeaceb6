"""Replay memory of image observations: bytes per stored env step when each frame is
stored once and stacks are built at sample time (`frame_stack`), against a buffer that
stores the stacks themselves (what a frame-stacking wrapper in front of the buffer gives).

    .venv/bin/python -m experiments.benchmarks.bench_frames [--capacity 20000]

Each buffer is allocated for real (uint8 frames, float32 actions, uniform or prioritized
sampling), one step added, and the bytes of its arrays summed over `capacity` rows:
whole state / capacity, the per-env rows and the priority trees included. The stacked
buffer keeps obs [H, W, C·k] per row with frame_stack 1; both hold next observations in
the following row (an episode buffer stores each env step once).
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp

from experiments.benchmarks import harness
from jaxsac import memory, replay
from jaxsac.types import Step

NUM_ENVS, BATCH_SIZE, ACT_DIM = 8, 256, 6
WORKLOADS = (
    ("DMC from pixels, 84 x 84 RGB", (84, 84, 3), 3),
    ("Atari, 84 x 84 gray", (84, 84, 1), 4),
)
"""(name, one frame's shape, stack depth k): DrQ's and the Atari preprocessing's."""


def example_step(frame_shape: tuple[int, ...]) -> Step:
    """One unbatched step with a uint8 image observation."""
    return Step(obs=jnp.zeros(frame_shape, jnp.uint8), action=jnp.zeros((ACT_DIM,)),
                reward=jnp.float32(0.0), next_obs=jnp.zeros(frame_shape, jnp.uint8),
                terminated=jnp.bool_(False), truncated=jnp.bool_(False))


def bytes_per_step(frame_shape: tuple[int, ...], frame_stack: int, capacity: int,
                   prioritized: bool) -> float:
    """Bytes of an allocated buffer's state (one batch of steps added) / capacity."""
    buf = replay.episode_buffer(capacity, NUM_ENVS, BATCH_SIZE, prioritized=prioritized,
                                frame_stack=frame_stack)
    step = example_step(frame_shape)
    state = buf.init(step)
    state = jax.jit(buf.add)(state, jax.tree.map(lambda x: jnp.stack([x] * NUM_ENVS), step))
    return memory.tree_bytes(jax.block_until_ready(state)) / capacity


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=20_000)
    args = parser.parse_args(argv)
    print(f"{harness.machine_line(harness.machine())}; capacity {args.capacity:,}, "
          f"{NUM_ENVS} envs, action dim {ACT_DIM}")
    rows = []
    for name, (h, w, c), k in WORKLOADS:
        for prioritized in (False, True):
            once = bytes_per_step((h, w, c), k, args.capacity, prioritized)
            stacked = bytes_per_step((h, w, c * k), 1, args.capacity, prioritized)
            sampling = "prioritized" if prioritized else "uniform"
            rows.append([name, str(k), sampling, harness.number(once), harness.number(stacked),
                         harness.times(stacked / once)])
    print("\n".join(harness.markdown_table(
        ["observation", "k", "sampling", "frames once (bytes/step)",
         "stacks stored (bytes/step)", "saving"], rows, "llrrrr")))


if __name__ == "__main__":
    main()
