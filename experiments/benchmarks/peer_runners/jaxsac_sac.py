"""jaxsac SAC (Pendulum-v1 by default, --env-id), timed like the peers; prints one JSON line.

Run with jaxsac's own virtualenv (not .venv-peers), from the repository root:

    .venv/bin/python -m experiments.benchmarks.peer_runners.jaxsac_sac --backend jax --seed 0

--api train (the default for one seed): `jaxsac.train(config, progress=False)` is timed
as a user calls it. The timestamps at every log period's end come from `train`'s
callback, which runs on the host after each chunk's metrics were fetched (the warm-up
periods form one chunk, then one period per chunk), so it adds no synchronisation that
the loop does not already do.

--api make_train (the default for --num-seeds > 1; JAX backend only): the whole run as
one program, `jax.jit(jax.vmap(jaxsac.make_train(config, period_callback=...)))(split(
key(seed), n))`, as rejax's runner does it. The timestamps come from the period
callback, which the program calls at each log period's end after its evaluation, the
same kind of timestamp the rejax runner takes in its evaluation callback.
"""

from __future__ import annotations

import time

from experiments.benchmarks.peer_runners import common


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("jax", "gymnasium"), required=True)
    p.add_argument("--api", choices=("train", "make_train"), default=None,
                   help="default: train for one seed, make_train for --num-seeds > 1")
    p.add_argument("--target-update-every", type=int, default=1,
                   help="gradient steps between Polyak target updates")
    args = p.parse_args()
    common.check_args(args)
    api = args.api or ("train" if args.num_seeds == 1 else "make_train")
    if api == "make_train" and args.backend != "jax":
        raise SystemExit("--api make_train needs --backend jax")

    import jax
    import numpy as np

    import jaxsac

    jax.devices()  # backend initialisation, like an import, stays outside the clock
    meter = common.CompileMeter()
    clock = common.Clock()

    # Timestamps at the end of each log period, for either API.
    def mark(row, state=None):
        clock.mark(int(np.max(row["env_steps"])))

    wall_origin = time.time()
    clock.start()
    config = jaxsac.SACConfig(
        env_id=args.env_id, backend=args.backend, seed=args.seed, num_envs=args.num_envs,
        total_env_steps=args.total_env_steps, learning_starts=args.learning_starts,
        buffer_capacity=args.buffer_size, batch_size=args.batch_size,
        hidden_sizes=tuple(args.hidden), activation=args.activation,
        actor_lr=args.lr, critic_lr=args.lr, alpha_lr=args.lr, initial_alpha=1.0,
        target_entropy="auto", target_entropy_scale=args.target_entropy_scale,
        gamma=args.gamma, tau=args.tau, utd_ratio=args.utd_ratio,
        target_network_update_freq=args.target_update_every,
        log_every=args.mark_every, eval_episodes=args.eval_episodes)
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
    # or the argmax for Discrete actions) on gymnasium's env.
    import gymnasium as gym

    from jaxsac import connectors
    from jaxsac.program import deterministic_policy

    env = gym.make(args.env_id)
    obs_dim = env.observation_space.shape[0]
    actions = connectors.module_actions(env.action_space)
    policy = deterministic_policy(config, obs_dim, actions)
    to_env = actions.to_env
    no_stats = connectors.init_obs_norm(obs_dim)  # normalize_obs is off
    act = lambda params, obs: to_env(np.asarray(policy(params, no_stats, obs)))  # noqa: E731
    params = state.learner.actor_params
    seed_axis = api == "make_train" or args.num_seeds > 1
    per_seed = ([params] if not seed_axis else
                [jax.tree.map(lambda x, i=i: x[i], params) for i in range(args.num_seeds)])
    returns = [common.evaluate(lambda obs, p=p: np.asarray(act(p, obs)), args.env_id,
                               args.eval_episodes)
               for p in per_seed]

    versions = common.package_versions("jaxsac", "jax", "jaxlib", "flax", "optax",
                                       "gymnasium", "numpy")
    record = common.summarize(
        f"jaxsac-{args.backend}", args, clock, meter, returns, versions,
        extra={"api": api, **common.own_evaluations(args, own),
               "target_network_update_freq": args.target_update_every,
               "device": str(jax.devices()[0])},
        wall_clock_origin=wall_origin)
    common.emit(record)


if __name__ == "__main__":
    main()
