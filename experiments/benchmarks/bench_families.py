"""Milliseconds per gradient update of each critic family and network body, at
HalfCheetah's sizes on this machine.

    .venv/bin/python -m experiments.benchmarks.bench_families [--updates 50] [--rounds 15]
        [--only ensemble,crossq]

Each variant is the learner's update (critics, actor and α, one step) at batch 256 with
256x256 networks (BRO and SimbaV2: width 256, two blocks), observations of 17 entries
and Box actions of 6 (HalfCheetah-v5's sizes), `--updates` updates in one jitted
`lax.scan` per call. The variants alternate in a random order each round in one process
(`harness.interleaved_ms`), so a shared machine's load hits them alike; reported per
variant: ms per update, minimum, 10th and 25th percentiles and median over the rounds,
with the compile seconds, the machine and its load average.
"""

from __future__ import annotations

import argparse
import json

import jax

from experiments.benchmarks import harness
from jaxsac.config import SACConfig
from jaxsac.learner import make_learner

OBS_DIM, ACT_DIM = 17, 6
"""HalfCheetah-v5's observation and action sizes."""

CATEGORICAL = dict(critic="categorical", v_min=-100.0, v_max=1000.0)
VARIANTS = {
    "ensemble (mlp)": {},
    "tqc": dict(critic="tqc"),
    "categorical (c51)": CATEGORICAL,
    "categorical (hl_gauss)": dict(CATEGORICAL, categorical_target="hl_gauss"),
    "crossq": dict(critic="crossq"),
    "crossq + BRN actor": dict(critic="crossq", actor_batch_renorm=True),
    "ensemble (bro)": dict(network="bro"),
    "ensemble (simbav2)": dict(network="simbav2"),
    "categorical (simbav2)": dict(CATEGORICAL, network="simbav2"),
}
"""The SACConfig changes of each variant (on top of batch 256, 256x256 networks)."""


def update_call(changes: dict, updates: int):
    """(a call that runs `updates` jitted updates from the same state, its compile s)."""
    config = SACConfig(batch_size=harness.BATCH, hidden_sizes=(256, 256), **changes)
    learner = make_learner(config, OBS_DIM, ACT_DIM)
    state = learner.init(jax.random.key(0))
    batch = harness.random_batch(jax.random.key(1), harness.BATCH, OBS_DIM, ACT_DIM)
    keys = jax.random.split(jax.random.key(2), updates)
    return harness.compiled_updates(learner, state, batch, keys)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=50, help="updates per timed call")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--only", default=None,
                        help="comma-separated variant names (default: every variant)")
    args = parser.parse_args()
    names = list(VARIANTS) if args.only is None else args.only.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"--only {args.only!r}: unknown variant {unknown[0]!r}; one of "
                     f"{list(VARIANTS)}")
    load_before = harness.load_average()
    calls, compile_s = {}, {}
    for name in names:
        calls[name], compile_s[name] = update_call(VARIANTS[name], args.updates)
    ms = harness.interleaved_ms(calls, args.rounds, args.updates)
    report = {"machine": harness.machine(), "load_average_before": load_before,
              "load_average_after": harness.load_average(), "rounds": args.rounds,
              "updates_per_call": args.updates, "obs_dim": OBS_DIM, "act_dim": ACT_DIM,
              "ms_per_update": harness.quantiles(ms),
              "compile_s": {k: round(v, 1) for k, v in compile_s.items()}}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
