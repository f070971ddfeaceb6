"""brax SAC on a MuJoCo Playground task (CartpoleBalance by default), timed like the
other runners; prints one JSON line.

Run with the peers' virtualenv, from the repository root:

    .venv-peers/bin/python -m experiments.benchmarks.peer_runners.brax_sac \\
        --env-id playground/CartpoleBalance --num-envs 128 --utd-ratio 0.0625 \\
        --learning-starts 8192 --mark-every 8192 --total-env-steps 65536 --seed 0

The run is one call of `brax.training.agents.sac.train.train` on the Playground task
(loaded with `registry.load(task, config_overrides={"impl": "jax"})`: MJX's JAX
implementation, which runs on the CPU; Playground's default, "warp", needs an NVIDIA
GPU), wrapped by Playground's own `wrap_for_brax_training`, as Playground's brax
training script does it.

How the shared flags map onto brax's arguments: num_envs, batch_size, seed as they are;
grad_updates_per_step = utd_ratio * num_envs (brax's gradient steps per step of all
envs); learning_rate = lr (actor and critics); discounting = gamma; tau;
min_replay_size = learning_starts (brax's prefill, acted by its initial stochastic
policy); max_replay_size = buffer size; normalize_observations = --normalize-obs;
network_factory = make_sac_networks(hidden_layer_sizes = --hidden, activation,
q_network_layer_norm = --critic-layer-norm) for the policy and both critics;
episode_length from the task's config; action_repeat 1; reward_scaling 1. brax fixes
the rest of SAC: alpha's Adam learning rate 3e-4, initial alpha 1 (log alpha 0), target
entropy -0.5 * |A|; the record states these (`brax_fixed`).

Timestamps: brax trains in epochs between evaluations and calls `progress_fn(env_steps,
metrics)` after each evaluation. num_evals is chosen so that an evaluation falls every
--mark-every env steps after the prefill (--learning-starts must then be a multiple of
--mark-every, and --num-envs must divide --mark-every); the timestamp is taken in
progress_fn, after that evaluation, as the jaxsac and rejax runners take theirs after
their in-run evaluations. brax's evaluation there (--eval-episodes envs, one episode
each of the task's episode_length, deterministic actions) is its own in-run evaluation
(`eval/episode_reward`, recorded as `own_eval_returns`); brax also evaluates once before
the prefill (env step 0).

jax.device_put_replicated: brax 0.14.2 calls it (to place its training state on each
local device before pmapping), and jax 0.10 removed it. This runner, and nothing else,
installs a stand-in when jax lacks it: each leaf stacked once per device along a new
leading axis, an array that brax's pmapped functions then take (one CPU device here:
a leading axis of 1), placed on a mesh of those devices under brax's pmap axis name.
The mesh changes no number; it gives the initial state the type of the states brax's
pmapped functions return, so that brax's evaluation program is not compiled once more
inside the timed steady window (jax 0.10 recompiles a jitted function for arrays
whose type carries another mesh).
"""

from __future__ import annotations

import functools
import time

from experiments.benchmarks.peer_runners import common

BRAX_ALPHA_LR = 3e-4
BRAX_INITIAL_ALPHA = 1.0
BRAX_TARGET_ENTROPY_PER_ACTION_DIM = -0.5
PMAP_AXIS = "i"
"""The axis name of brax's pmapped training functions (brax.training.agents.sac.train)."""


def install_device_put_replicated() -> bool:
    """Gives jax a `device_put_replicated` when it has none (jax >= 0.10); True if it
    installed one."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    if hasattr(jax, "device_put_replicated"):
        return False

    def device_put_replicated(x, devices):
        mesh = jax.sharding.Mesh(np.array(devices), (PMAP_AXIS,))
        sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(PMAP_AXIS))
        return jax.tree.map(
            lambda leaf: jax.device_put(jnp.stack([jnp.asarray(leaf)] * len(devices)),
                                        sharding), x)

    jax.device_put_replicated = device_put_replicated
    return True


def num_evals_for(args) -> int:
    """brax's num_evals putting an evaluation every mark_every env steps after the
    prefill of learning_starts; errors for settings where none would."""
    if args.learning_starts % args.mark_every or args.mark_every % args.num_envs:
        raise SystemExit(f"brax_sac: --learning-starts={args.learning_starts} must be a "
                         f"multiple of --mark-every={args.mark_every}, and that of "
                         f"--num-envs={args.num_envs}, for brax's evaluations (after its "
                         "prefill, one per equal epoch) to fall on the marks")
    if args.learning_starts < 1:
        raise SystemExit("brax_sac: --learning-starts must be at least 1 (brax's prefill "
                         "must hold a batch before the first gradient step)")
    # One evaluation before the prefill, then one after each epoch of mark_every env steps.
    return (args.total_env_steps - args.learning_starts) // args.mark_every + 1


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.set_defaults(env_id="playground/CartpoleBalance")
    p.add_argument("--critic-layer-norm", action="store_true",
                   help="LayerNorm after each hidden activation of the critics "
                        "(make_sac_networks' q_network_layer_norm)")
    args = p.parse_args()
    common.check_args(args)
    if not args.env_id.startswith(common.PLAYGROUND_PREFIX):
        raise SystemExit(f"brax_sac: --env-id must be a MuJoCo Playground task "
                         f"('{common.PLAYGROUND_PREFIX}<task>'), not {args.env_id!r}")
    if args.num_seeds != 1:
        raise SystemExit("brax_sac: one seed per run (brax's SAC has no vmapped seeds)")
    if args.target_entropy_scale is not None:
        raise SystemExit("brax_sac: --target-entropy-scale is for Discrete actions; brax's "
                         "SAC fixes its target entropy at -0.5 |A|")
    num_evals = num_evals_for(args)
    grad_updates = common.gradient_steps_per_iteration(args)
    task = args.env_id[len(common.PLAYGROUND_PREFIX):]

    import jax
    from brax.training.agents.sac import networks as sac_networks
    from brax.training.agents.sac import train as sac
    from flax import linen
    from mujoco_playground import registry, wrapper

    shimmed = install_device_put_replicated()
    jax.devices()  # backend initialisation, like an import, stays outside the clock
    meter = common.CompileMeter()
    clock = common.Clock()
    own_steps: list[int] = []
    own_returns: list[float] = []
    alphas: list[float | None] = []

    def progress(env_steps: int, metrics: dict) -> None:
        clock.mark(env_steps)
        own_steps.append(int(env_steps))
        own_returns.append(round(float(metrics["eval/episode_reward"]), 2))
        alpha = metrics.get("training/alpha")
        alphas.append(None if alpha is None else round(float(alpha), 5))

    wall_origin = time.time()
    clock.start()
    env = registry.load(task, config_overrides={"impl": "jax"})
    episode_length = int(registry.get_default_config(task).episode_length)
    network_factory = functools.partial(
        sac_networks.make_sac_networks, hidden_layer_sizes=tuple(args.hidden),
        activation=getattr(linen, args.activation),
        q_network_layer_norm=args.critic_layer_norm)
    make_policy, params, _ = sac.train(
        environment=env,
        wrap_env_fn=wrapper.wrap_for_brax_training,
        num_timesteps=args.total_env_steps,
        episode_length=episode_length,
        action_repeat=1,
        num_envs=args.num_envs,
        num_eval_envs=args.eval_episodes,
        deterministic_eval=True,
        learning_rate=args.lr,
        discounting=args.gamma,
        tau=args.tau,
        seed=args.seed,
        batch_size=args.batch_size,
        grad_updates_per_step=grad_updates,
        min_replay_size=args.learning_starts,
        max_replay_size=args.buffer_size,
        normalize_observations=args.normalize_obs,
        reward_scaling=1.0,
        num_evals=num_evals,
        network_factory=network_factory,
        progress_fn=progress,
    )
    jax.block_until_ready(params)
    clock.stop()

    policy = make_policy(params, deterministic=True)
    key = jax.random.PRNGKey(0)  # unused by the deterministic action
    returns = [common.evaluate_playground(lambda obs: policy(obs, key)[0], args.env_id,
                                          args.eval_episodes)]
    trained = [(s, r) for s, r in zip(own_steps, own_returns, strict=True) if s > 0]

    versions = common.package_versions("brax", "playground", "mujoco", "mujoco-mjx", "jax",
                                       "jaxlib", "flax", "optax", "numpy")
    record = common.summarize(
        "brax", args, clock, meter, returns, versions,
        extra={
            "own_eval_env_steps": [s for s, _ in trained],
            "own_eval_returns": [[r for _, r in trained]],
            "own_final_eval_return": [trained[-1][1]],
            "own_eval_before_training": [own_returns[0]] if own_steps[0] == 0 else None,
            "own_eval_alpha": [a for s, a in zip(own_steps, alphas, strict=True) if s > 0],
            "brax_fixed": {
                "alpha_lr": BRAX_ALPHA_LR, "initial_alpha": BRAX_INITIAL_ALPHA,
                "target_entropy": BRAX_TARGET_ENTROPY_PER_ACTION_DIM * env.action_size,
                "warm_up_actions": "the initial policy's samples",
            },
            "brax_args": {"num_evals": num_evals, "grad_updates_per_step": grad_updates,
                          "episode_length": episode_length, "num_eval_envs":
                          args.eval_episodes, "deterministic_eval": True,
                          "q_network_layer_norm": args.critic_layer_norm,
                          "normalize_observations": args.normalize_obs},
            "device_put_replicated_shim": shimmed,
            "device": str(jax.devices()[0]),
        },
        wall_clock_origin=wall_origin)
    common.emit(record)


if __name__ == "__main__":
    main()
