"""sbx (SB3 + JAX) SAC on gymnasium's Pendulum-v1; prints one JSON line.

Run with the peers' virtualenv, from the repository root:

    .venv-peers/bin/python -m experiments.benchmarks.peer_runners.sbx_sac --seed 0

sbx keeps SB3's collection loop and numpy replay buffer and jits the policy and the
gradient steps; its compilation happens at the first gradient step (env step
learning_starts + 1), inside the first learning period.
"""

from __future__ import annotations

from experiments.benchmarks.peer_runners import common


def main() -> None:
    args = common.parser(__doc__.splitlines()[0]).parse_args()
    common.check_args(args)
    if args.num_seeds != 1:
        raise SystemExit("sbx trains one seed per process: --num-seeds must be 1")

    import jax
    from sbx import SAC

    jax.devices()  # backend initialisation, like an import, stays outside the clock
    meter = common.CompileMeter()
    versions = common.package_versions("sbx-rl", "stable-baselines3", "jax", "jaxlib",
                                       "flax", "optax", "tfp-nightly", "gymnasium", "numpy")
    record = common.run_sb3_api(SAC, "sbx", args, versions, meter=meter,
                                extra={"device": str(jax.devices()[0])})
    common.emit(record)


if __name__ == "__main__":
    main()
