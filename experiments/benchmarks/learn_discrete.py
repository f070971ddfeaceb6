"""Discrete SAC learning curves: the tuned CartPole-v1 and Acrobot-v1, 5 seeds vmapped.

    .venv/bin/python -m experiments.benchmarks.learn_discrete
    .venv/bin/python -m experiments.benchmarks.learn_discrete --env-id CartPole-v1 \
        --target-entropy-scale 0.98

Prints, for every log period, each seed's deterministic evaluation return (10 episodes),
α and the policy's entropy, and the wall time of the whole program (compile included).
"""

from __future__ import annotations

import argparse

from experiments.benchmarks import harness


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", nargs="+", default=["CartPole-v1", "Acrobot-v1"])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--root-key", type=int, default=0,
                        help="the seeds' keys are split(key(root_key), seeds)")
    parser.add_argument("--target-entropy-scale", type=float, default=None,
                        help="override the tuned example's target_entropy_scale")
    args = parser.parse_args(argv)
    overrides = ({} if args.target_entropy_scale is None
                 else {"target_entropy_scale": args.target_entropy_scale})
    for env_id in args.env_id:
        curve = harness.learning_curve(env_id, args.seeds, args.root_key, **overrides)
        print(f"{env_id} {overrides or 'tuned'}: {curve['seconds']:.0f} s")
        harness.print_curve(curve)


if __name__ == "__main__":
    main()
