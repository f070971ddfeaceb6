"""jaxsac on a gymnasium MuJoCo task with any critic family and body, evaluated every
--eval-every env steps by the common evaluation; prints one JSON line.

Run with jaxsac's own virtualenv (not .venv-peers), from the repository root
(learn_mujoco.py launches it with the settings of each of its agents):

    .venv/bin/python -m experiments.benchmarks.peer_runners.jaxsac_families \\
        --env-id Hopper-v5 --seed 0 --settings '{"critic": "tqc", "num_q": 5}'

--settings: SACConfig fields (JSON; lists become tuples) over the run's env, seed, env
steps and log period (= --eval-every). `jaxsac.train`'s callback, after each log period,
runs the common evaluation (`common.Curve`: 10 deterministic episodes of gymnasium's env,
reset seeds 10000-10009, the same as for sbx) with the period's actor; jaxsac's own
in-run evaluation is cut to one episode (`eval_episodes=1`, recorded as own_eval) since
its time counts as training time here. Training time = wall time - the common
evaluations' time.
"""

from __future__ import annotations

import time

from experiments.benchmarks.peer_runners import common


def main() -> None:
    args = common.curve_parser(__doc__.splitlines()[0]).parse_args()
    settings = common.check_curve_args(args)

    import gymnasium as gym
    import jax
    import numpy as np

    import jaxsac
    from jaxsac import connectors
    from jaxsac.assembly import deterministic_policy

    jaxsac.compilation.disable_cache()  # every run compiles, as the peers' runs do
    jax.devices()  # backend initialisation stays outside the clock
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in settings.items()}
    config = jaxsac.SACConfig(**{"backend": "gymnasium", **fields, "env_id": args.env_id,
                                 "seed": args.seed, "total_env_steps": args.total_env_steps,
                                 "log_every": args.eval_every, "eval_episodes": 1})
    if config.backend != "gymnasium":
        raise SystemExit("jaxsac_families: the MuJoCo tasks run on the gymnasium backend")
    space = gym.make(args.env_id)
    actions = connectors.module_actions(space.action_space)
    policy = deterministic_policy(config, space.observation_space.shape[0], actions)
    curve = common.Curve(args.env_id, args.eval_episodes)
    own: list[float] = []

    def on_period(row, state) -> bool:
        params, stats = state.learner.actor_params, state.runner  # host loop: its stats
        curve(int(np.max(row["env_steps"])),
              lambda obs: np.asarray(actions.to_env(np.asarray(policy(params, stats, obs)))))
        own.append(round(float(np.mean(row["eval_return"])), 2))
        return False

    start = time.perf_counter()
    result = jaxsac.train(config, progress=False, callback=on_period)
    jax.block_until_ready(result.state)
    wall_s = time.perf_counter() - start

    common.emit({
        "library": "jaxsac", "env_id": args.env_id, "seed": args.seed,
        "total_env_steps": args.total_env_steps, "eval_every": args.eval_every,
        "settings": settings, **curve.record(wall_s, args.total_env_steps),
        "own_eval_one_episode": own,
        "versions": common.package_versions("jaxsac", "jax", "jaxlib", "flax", "optax",
                                            "gymnasium", "mujoco", "numpy"),
        "device": str(jax.devices()[0]),
    })


if __name__ == "__main__":
    main()
