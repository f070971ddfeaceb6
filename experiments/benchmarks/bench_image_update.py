"""Gradient updates from pixels: jaxsac's image update against stable-baselines3's SAC
`CnnPolicy` at the same batch and image size, alternated in one run.

    .venv/bin/python -m experiments.benchmarks.bench_image_update [--rounds 5]
        [--size 84] [--channels 9] [--batch 256] [--updates 4]

Observations [size, size, channels] uint8 (3 stacked RGB frames by default), Box
actions of 1, batch 256. jaxsac: the learner's update (critics, actor and α, one step)
with its defaults on an image, DrQ's encoder (four 32-channel 3x3 convolutions, the first
of stride 2, 50 features, LayerNorm, tanh) and random shifts of 4 pixels, 256x256
networks; as "separate" (each network its own encoder, the default) and "critic" (the
actor reads the critics' encoder, the tuned pixel examples' setting); and with
NatureCNN's sizes (32, 64 and 64 channels, kernels 8, 4 and 3, strides 4, 2 and 1, 512
features; LayerNorm and tanh after them, as jaxsac's), separate encoders as SB3's: the
networks of SB3's update (jaxsac's also shifts the images). `--updates` updates in one
jitted `lax.scan` per call, from a fixed batch. stable-baselines3: its
default `CnnPolicy` (peer_runners/sb3_image_update.py, in the peers' virtualenv:
NatureCNN, 512 features, the replay sample included), one process per round. Each
round times every variant once, in a random order. Reported: ms per update and updates
per second, minimum and median over the rounds, with XLA's FLOPs of one jaxsac update.
The default encoders differ (each library's own), so the FLOPs are given beside.
"""

from __future__ import annotations

import argparse
import json
import random
import sys

import jax

from experiments.benchmarks import harness
from jaxsac.config import SACConfig
from jaxsac.learner import make_learner
from jaxsac.observations import ObsSpec


def jaxsac_call(changes: dict, shape: tuple[int, int, int], batch_size: int, updates: int):
    """(a call that runs `updates` jitted updates from one state, FLOPs of one update)."""
    config = SACConfig(batch_size=batch_size, **changes)
    learner = make_learner(config, ObsSpec.image(shape), 1)
    state = learner.init(jax.random.key(0))
    batch = harness.image_batch(jax.random.key(1), batch_size, shape)
    keys = jax.random.split(jax.random.key(2), updates)

    call = harness.compiled_updates(learner, state, batch, keys)[0]
    flops = harness.compiled_flops(lambda s, k: learner.update(s, batch, k)[0], state, keys[0])
    return call, flops


def sb3_round(args: argparse.Namespace) -> tuple[float, dict]:
    """ms per update of one timed SB3 call, in a fresh process of the peers' virtualenv."""
    record = harness.child_record(
        args.peers_python, "experiments.benchmarks.peer_runners.sb3_image_update",
        ["--size", args.size, "--channels", args.channels, "--batch", args.batch,
         "--updates", args.updates])
    return record["ms_per_update"][0], record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size", type=int, default=84)
    parser.add_argument("--channels", type=int, default=9)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--updates", type=int, default=4, help="updates per timed call")
    parser.add_argument("--peers-python", default=str(harness.ROOT / ".venv-peers/bin/python"))
    args = parser.parse_args(argv)
    shape = (args.size, args.size, args.channels)
    load_before = harness.load_average()
    calls, flops = {}, {}
    for name, changes in harness.IMAGE_UPDATES.items():
        calls[name], flops[name] = jaxsac_call(changes, shape, args.batch, args.updates)
        harness.timed(calls[name])  # warm-up
    ms = {name: [] for name in [*calls, "sb3 CnnPolicy"]}
    order, rng, sb3_record = list(ms), random.Random(0), {}
    for _ in range(args.rounds):
        rng.shuffle(order)
        for name in order:
            if name in calls:
                ms[name].append(harness.timed(calls[name])[1] / args.updates * 1e3)
            else:
                value, sb3_record = sb3_round(args)
                ms[name].append(value)
    report = {**harness.provenance(harness.command_line(
                  ".venv/bin/python -m experiments.benchmarks.bench_image_update",
                  sys.argv[1:] if argv is None else argv), load_before),
              "shape": shape, "batch": args.batch, "ms_per_update": harness.quantiles(ms),
              "jaxsac_gflops_per_update": {k: round(v / 1e9, 1) for k, v in flops.items()},
              "sb3": {k: v for k, v in sb3_record.items() if k != "ms_per_update"}}
    rows = [[name, harness.number(q["min"]), harness.number(q["median"]),
             harness.number(1e3 / q["median"], 2),
             harness.number(report["jaxsac_gflops_per_update"].get(name), 1)]
            for name, q in report["ms_per_update"].items()]
    print(json.dumps(report, indent=1))
    print("\n".join(harness.markdown_table(
        ["update", "ms min", "ms median", "updates/s (median)", "GFLOP per update (XLA)"],
        rows, "lrrrr")))


if __name__ == "__main__":
    main()
