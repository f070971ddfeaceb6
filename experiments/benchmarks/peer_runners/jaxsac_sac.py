"""jaxsac SAC (Pendulum-v1 by default, --env-id), timed like the peers; prints one JSON line.

Run with jaxsac's own virtualenv (not .venv-peers), from the repository root:

    .venv/bin/python -m experiments.benchmarks.peer_runners.jaxsac_sac --backend jax --seed 0

--api train (the default for one seed): `jaxsac.train(config, progress=False)` is timed
as a user calls it. The timestamps at every log period's end come from `train`'s
callback, which runs on the host after each period's metrics were fetched (one period
per call of the loop), so it adds no synchronisation that the loop does not already do;
with --stop-at-return the callback also stops the run once the period's evaluation
reaches that return.

--api make_train (the default for --num-seeds > 1; JAX backend only): the whole run as
one program, `jax.jit(jax.vmap(jaxsac.make_train(config, period_callback=...)))(split(
key(seed), n))`, as rejax's runner does it. The timestamps come from the period
callback, which the program calls at each log period's end after its evaluation, the
same kind of timestamp the rejax runner takes in its evaluation callback.

MuJoCo Playground tasks (--env-id playground/<task>, JAX backend) take the common final
evaluation of those tasks (`common.evaluate_playground`) instead of gymnasium's; the
flags --normalize-obs, --critic-layer-norm, --target-entropy, --alpha-lr and --n-step set
what the comparisons with brax's SAC need, and their defaults leave the other tasks as they
were.

--tuned trains jaxsac's tuned example of --env-id (`jaxsac.tuned`) instead of the shared
settings, with the run's seed, env steps, log period and evaluation episodes.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from experiments.benchmarks.peer_runners import common


def build_config(args: argparse.Namespace) -> Any:
    """The run's config: the shared settings of the comparison, or with --tuned jaxsac's
    tuned config of the env with the comparison's seed, env steps, log period and
    evaluation episodes."""
    import jaxsac

    protocol = dict(backend=args.backend, seed=args.seed,
                    total_env_steps=args.total_env_steps, log_every=args.mark_every,
                    eval_episodes=args.eval_episodes)
    if args.tuned:
        return jaxsac.tuned(args.env_id, **protocol)
    return jaxsac.SACConfig(
        env_id=args.env_id, num_envs=args.num_envs, learning_starts=args.learning_starts,
        buffer_capacity=args.buffer_size, batch_size=args.batch_size,
        hidden_sizes=tuple(args.hidden), activation=args.activation,
        actor_lr=args.lr, critic_lr=args.lr,
        alpha_lr=args.lr if args.alpha_lr is None else args.alpha_lr, initial_alpha=1.0,
        target_entropy="auto" if args.target_entropy is None else args.target_entropy,
        target_entropy_scale=args.target_entropy_scale,
        gamma=args.gamma, tau=args.tau, utd_ratio=args.utd_ratio, n_step=args.n_step,
        target_network_update_freq=args.target_update_every,
        normalize_obs=args.normalize_obs, critic_layer_norm=args.critic_layer_norm,
        **protocol)


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("jax", "gymnasium"), required=True)
    p.add_argument("--tuned", action="store_true",
                   help="jaxsac's tuned config of --env-id (jaxsac.tuned); of the shared "
                        "settings only the seed, the env steps, the log period (--mark-every) "
                        "and the evaluation episodes apply")
    p.add_argument("--api", choices=("train", "make_train"), default=None,
                   help="default: train for one seed, make_train for --num-seeds > 1")
    p.add_argument("--target-update-every", type=int, default=1,
                   help="gradient steps between Polyak target updates")
    p.add_argument("--critic-layer-norm", action="store_true",
                   help="LayerNorm after each hidden activation of the critics")
    p.add_argument("--target-entropy", type=float, default=None,
                   help="target entropy (default: jaxsac's 'auto')")
    p.add_argument("--alpha-lr", type=float, default=None,
                   help="Adam learning rate of log alpha (default: --lr)")
    p.add_argument("--n-step", type=int, default=1,
                   help="n of the n-step returns (default 1, as every peer)")
    args = p.parse_args()
    common.check_args(args)
    api = args.api or ("train" if args.num_seeds == 1 else "make_train")
    if api == "make_train" and args.backend != "jax":
        raise SystemExit("--api make_train needs --backend jax")

    import jax
    import numpy as np

    import jaxsac

    jaxsac.compilation.disable_cache()  # every run compiles, as the peers' runs do
    if args.env_id.startswith(common.PLAYGROUND_PREFIX):
        import mujoco_playground  # noqa: F401  (an import, outside the clock as for brax)
    jax.devices()  # backend initialisation, like an import, stays outside the clock
    meter = common.CompileMeter()
    clock = common.Clock()

    # Timestamps at the end of each log period, for either API; `train` stops once every
    # seed's evaluation reaches --stop-at-return.
    def mark(row, state=None):
        clock.mark(int(np.max(row["env_steps"])))
        return (args.stop_at_return is not None
                and bool(np.min(row["eval_return"]) >= args.stop_at_return))

    wall_origin = time.time()
    clock.start()
    config = build_config(args)
    if api == "train":
        result = jaxsac.train(config, num_seeds=args.num_seeds, progress=False, callback=mark)
        state, metrics = result.state, result.metrics
        jax.block_until_ready(state)
        own = np.asarray(metrics["eval_return"]).T  # [periods(, seeds)] -> [(seeds,) periods]
    else:
        train_fn = jax.jit(jax.vmap(jaxsac.make_train(config, period_callback=mark)))
        keys = jax.random.split(jax.random.key(args.seed), args.num_seeds)  # as train's
        state, metrics = train_fn(keys)
        jax.block_until_ready(state)
        own = np.asarray(metrics["eval_return"])  # [seeds, periods]
    clock.stop()

    # Common final evaluation: the deterministic action (tanh(mu) rescaled to the Box,
    # or the argmax for Discrete actions), with the run's observation statistics, on
    # gymnasium's env or, for a Playground task, on the raw Playground env.
    from jaxsac import connectors, envs
    from jaxsac.assembly import deterministic_policy

    playground = args.env_id.startswith(common.PLAYGROUND_PREFIX)
    if playground:
        space = envs.make(args.env_id, args.backend)
    else:
        import gymnasium as gym

        space = gym.make(args.env_id)
    obs_dim = space.observation_space.shape[0]
    actions = connectors.module_actions(space.action_space)
    policy = deterministic_policy(config, obs_dim, actions)
    to_env = actions.to_env
    # The statistics the run normalized with (Assembly.obs_stats: the JAX runner's, or
    # the host loop's state.runner itself); the identity when normalize_obs is off.
    stats = state.runner.obs_norm if args.backend == "jax" else state.runner
    params = state.learner.actor_params
    seed_axis = api == "make_train" or args.num_seeds > 1
    pick = lambda tree, i: jax.tree.map(lambda x: x[i], tree)  # noqa: E731
    per_seed = ([(params, stats)] if not seed_axis else
                [(pick(params, i), pick(stats, i)) for i in range(args.num_seeds)])
    if playground:
        returns = [common.evaluate_playground(
            lambda obs, p=p, s=s: to_env(policy(p, s, obs)), args.env_id, args.eval_episodes)
            for p, s in per_seed]
    else:
        returns = [common.evaluate(
            lambda obs, p=p, s=s: np.asarray(to_env(np.asarray(policy(p, s, obs)))),
            args.env_id, args.eval_episodes)
            for p, s in per_seed]

    versions = common.package_versions(
        "jaxsac", "jax", "jaxlib", "flax", "optax", "gymnasium", "numpy",
        *(("playground", "mujoco", "mujoco-mjx") if playground else ()))
    record = common.summarize(
        f"jaxsac-{args.backend}", args, clock, meter, returns, versions,
        extra={"api": api, **common.own_evaluations(args, own),
               "tuned": args.tuned,
               "target_network_update_freq": config.target_network_update_freq,
               "normalize_obs": config.normalize_obs,
               "critic_layer_norm": config.critic_layer_norm,
               "alpha_lr": config.alpha_lr, "target_entropy": config.target_entropy,
               "n_step": config.n_step,
               "device": str(jax.devices()[0])},
        wall_clock_origin=wall_origin)
    common.emit(record)


if __name__ == "__main__":
    main()
