"""rejax SAC on its own (gymnax) JAX env (Pendulum-v1 by default), fully jitted; prints
one JSON line.

Run with the peers' virtualenv, from the repository root:

    .venv-peers/bin/python -m experiments.benchmarks.peer_runners.rejax_sac --seed 0

The whole run is one `jax.jit(algo.train)` call (`jax.vmap`ped over keys for
--num-seeds > 1), as rejax's README does it. rejax evaluates inside the program every
`eval_freq` env steps; that callback is replaced by the one jaxsac runs at the end of
each log period (10 deterministic episodes of the JAX env), plus a host timestamp
(`jax.debug.callback`) at the same env-step marks the other runners use. The program
cannot stop early: --stop-at-return leaves the run as it is.

Discrete actions (CartPole-v1) get rejax's discrete SAC, chosen by rejax from the
action space; --target-entropy-scale sets its `target_entropy_ratio` (target entropy =
ratio * log|A|).
"""

from __future__ import annotations

import time

from experiments.benchmarks.peer_runners import common


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    args = p.parse_args()
    common.check_args(args)

    import jax
    import jax.numpy as jnp
    import numpy as np
    from rejax import SAC
    from rejax.evaluate import evaluate as rejax_evaluate

    jax.devices()  # backend initialisation, like an import, stays outside the clock
    meter = common.CompileMeter()
    clock = common.Clock()

    def deterministic_action(algo, params, obs):
        """The argmax of the logits (Discrete), or tanh(mean) rescaled to the action
        range (Box); rejax's own `act` samples."""
        dist = algo.actor.apply(params, obs, method="_action_dist")
        if algo.discrete:
            return jnp.argmax(dist.logits, axis=-1)
        return algo.actor.action_loc + jnp.tanh(dist.loc) * algo.actor.action_scale

    def eval_callback(algo, ts, rng):
        def act(obs, _rng):
            return jnp.squeeze(deterministic_action(algo, ts.actor_ts.params, obs[None]), 0)

        lengths, returns = rejax_evaluate(act, rng, algo.env, algo.env_params,
                                          args.eval_episodes,
                                          algo.env_params.max_steps_in_episode)
        # The returns are an operand so the timestamp waits for the evaluation too.
        jax.debug.callback(lambda step, _: clock.mark(int(step)), ts.global_step, returns,
                           ordered=True)
        return lengths, returns

    wall_origin = time.time()
    clock.start()
    entropy_ratio = {} if args.target_entropy_scale is None else {
        "target_entropy_ratio": args.target_entropy_scale}  # used for Discrete actions only
    algo = SAC.create(
        env=args.env_id,
        num_envs=args.num_envs,
        total_timesteps=args.total_env_steps,
        eval_freq=args.mark_every,
        skip_initial_evaluation=True,
        learning_rate=args.lr,  # one Adam for actor, critics and alpha, as in rejax
        gamma=args.gamma,
        polyak=1.0 - args.tau,  # rejax: target <- polyak * target + (1 - polyak) * online
        target_update_freq=1,  # env steps: once per iteration, after its gradient steps
        buffer_size=args.buffer_size,
        fill_buffer=args.learning_starts,
        batch_size=args.batch_size,
        num_epochs=common.gradient_steps_per_iteration(args),
        hidden_layer_sizes=tuple(args.hidden),
        agent_kwargs={"activation": args.activation},
        normalize_observations=args.normalize_obs,
        **entropy_ratio,
    )
    algo = algo.replace(eval_callback=eval_callback)
    if args.num_seeds == 1:
        train = jax.jit(algo.train)
        keys = jax.random.PRNGKey(args.seed)
    else:
        train = jax.jit(jax.vmap(algo.train))
        keys = jax.random.split(jax.random.PRNGKey(args.seed), args.num_seeds)
    ts, (_, own_returns) = train(keys)
    jax.block_until_ready(ts)
    clock.stop()

    act = jax.jit(lambda params, obs: deterministic_action(algo, params, obs))
    params = ts.actor_ts.params
    per_seed = ([params] if args.num_seeds == 1 else
                [jax.tree.map(lambda x, i=i: x[i], params) for i in range(args.num_seeds)])
    returns = [common.evaluate(lambda obs, p=p: np.asarray(act(p, obs)), args.env_id,
                               args.eval_episodes)
               for p in per_seed]
    own = np.asarray(own_returns).mean(axis=-1)  # [(seeds,) periods, episodes] -> mean

    versions = common.package_versions("rejax", "gymnax", "jax", "jaxlib", "flax", "optax",
                                       "distrax", "gymnasium", "numpy")
    record = common.summarize(
        "rejax", args, clock, meter, returns, versions,
        extra={**common.own_evaluations(args, own), "device": str(jax.devices()[0])},
        wall_clock_origin=wall_origin)
    common.emit(record)


if __name__ == "__main__":
    main()
