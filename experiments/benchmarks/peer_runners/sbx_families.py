"""sbx's SAC, TQC or CrossQ on a gymnasium MuJoCo task, evaluated every --eval-every env
steps by the common evaluation; prints one JSON line.

Run with the peers' virtualenv, from the repository root (learn_mujoco.py launches it
with the settings of each of its agents):

    .venv-peers/bin/python -m experiments.benchmarks.peer_runners.sbx_families \\
        --algo crossq --env-id Hopper-v5 --seed 0 --settings '{"learning_starts": 5000}'

--settings: keyword arguments of the algorithm's class (JSON), over sbx's own defaults;
"policy" names the policy ("MlpPolicy" by default, "SimbaPolicy" for SimBa networks).
The classes do not take the same arguments (CrossQ has no tau, TQC has
top_quantiles_to_drop_per_net): each gets only what it is given. One env, sbx's
train_freq 1 and gradient_steps 1 unless the settings say otherwise.

The common evaluation (`common.Curve`: 10 deterministic episodes of gymnasium's env,
reset seeds 10000-10009, as for jaxsac) runs from SB3's callback at every --eval-every
env steps (SB3 calls it after the env step, before that step's gradient step) and, for
the last point, after `learn` returns (after the last gradient step). Training time =
wall time - the common evaluations' time.
"""

from __future__ import annotations

import time

from experiments.benchmarks.peer_runners import common

ALGOS = ("sac", "tqc", "crossq")


def main() -> None:
    p = common.curve_parser(__doc__.splitlines()[0])
    p.add_argument("--algo", choices=ALGOS, required=True)
    args = p.parse_args()
    settings = common.check_curve_args(args)

    import jax
    import sbx
    from stable_baselines3.common.callbacks import BaseCallback

    jax.devices()  # backend initialisation stays outside the clock
    algo = {"sac": sbx.SAC, "tqc": sbx.TQC, "crossq": sbx.CrossQ}[args.algo]
    kwargs = dict(settings)
    policy_name = kwargs.pop("policy", "MlpPolicy")
    curve = common.Curve(args.env_id, args.eval_episodes)

    class Evaluations(BaseCallback):
        def _on_step(self) -> bool:
            steps = self.num_timesteps
            if steps % args.eval_every == 0 and steps < args.total_env_steps:
                curve(steps, lambda obs: self.model.predict(obs, deterministic=True)[0])
            return True

    start = time.perf_counter()
    model = algo(policy_name, args.env_id, seed=args.seed, verbose=0, **kwargs)
    model.learn(total_timesteps=args.total_env_steps, callback=Evaluations())
    curve(args.total_env_steps, lambda obs: model.predict(obs, deterministic=True)[0])
    wall_s = time.perf_counter() - start  # with every evaluation, which record() takes out
    common.emit({
        "library": "sbx", "algo": args.algo, "env_id": args.env_id, "seed": args.seed,
        "total_env_steps": args.total_env_steps, "eval_every": args.eval_every,
        "settings": settings, **curve.record(wall_s, args.total_env_steps),
        "versions": common.package_versions("sbx-rl", "stable-baselines3", "jax", "jaxlib",
                                            "flax", "optax", "gymnasium", "mujoco", "numpy"),
        "device": str(jax.devices()[0]),
    })


if __name__ == "__main__":
    main()
