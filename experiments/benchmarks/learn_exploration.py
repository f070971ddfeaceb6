"""Exploration noise on MountainCarContinuous-v0: white against colored, 5 seeds vmapped.

    .venv/bin/python -m experiments.benchmarks.learn_exploration
    .venv/bin/python -m experiments.benchmarks.learn_exploration --exponents 0 1 2 \
        --set total_env_steps=50000 learn_alpha=false

The tuned MountainCarContinuous-v0 example with each `action_noise_exponent` (0 white,
1 pink, 2 red). Prints, for every log period, each seed's deterministic evaluation
return (10 episodes), α and the policy's entropy, and the wall time of the whole
program (compile included). The task counts as solved at a return of 90.
"""

from __future__ import annotations

import argparse

import numpy as np

from experiments.benchmarks import harness

SOLVED = 90.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exponents", type=float, nargs="+", default=[0.0, 1.0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--root-key", type=int, default=0,
                        help="the seeds' keys are split(key(root_key), seeds)")
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=JSON",
                        help="override fields of the tuned example, e.g. learn_alpha=false")
    args = parser.parse_args(argv)
    overrides = harness.field_overrides(args.set)
    for beta in args.exponents:
        curve = harness.learning_curve("MountainCarContinuous-v0", args.seeds, args.root_key,
                               action_noise_exponent=beta, **overrides)
        solved = curve["eval_return"] >= SOLVED
        first = [int(curve["env_steps"][0, np.argmax(s)]) if s.any() else None
                 for s in solved]
        print(f"action_noise_exponent={beta} {overrides}: {curve['seconds']:.0f} s; first "
              f"evaluation >= {SOLVED:g} at env steps {first}")
        harness.print_curve(curve)


if __name__ == "__main__":
    main()
