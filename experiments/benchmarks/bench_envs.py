"""Env timings: JAX Pendulum-v1 env steps/s vmapped over many envs, and the gymnasium
runner's host overhead per step over the bare gymnasium vector env.

    .venv/bin/python -m experiments.benchmarks.bench_envs [--num-envs 1 64 4096]

JAX: a jitted `lax.scan` of `--scan-length` steps of the autoreset env (`AutoReset`,
the 200-step time limit included) vmapped over E envs, with fixed random actions; and
the same scan through `make_jax_runner(...).step` with uniform random actions (action
draw, module-to-env rescaling, episode bookkeeping and the `Step` records). Env steps/s
counts E per iteration. Gymnasium: seconds per call of `SyncVectorEnv.step` on numpy
actions (bare) against `GymRunner.step_packed` (rescaling, bookkeeping, packing the rows
for one host-to-device transfer per block), for Pendulum-v1 and E envs, best of `--repeats`.
"""

from __future__ import annotations

import argparse

import gymnasium
import jax
import numpy as np

import jaxsac.envs as envs
from experiments.benchmarks import harness
from jaxsac.runners import GymRunner, make_jax_runner, random_act_fn

ENV_ID = "Pendulum-v1"


def jax_env_steps_per_second(num_envs: int, scan_length: int, repeats: int) -> float:
    env = envs.AutoReset(envs.make(ENV_ID, backend="jax"))
    step = jax.vmap(env.step)
    actions = jax.random.uniform(jax.random.key(1), (scan_length, num_envs, 1), minval=-2,
                                 maxval=2)
    keys = jax.random.split(jax.random.key(2), num_envs)

    @jax.jit
    def rollout(state):
        def body(state, action):
            state, obs, reward, _, _ = step(state, action, keys)
            return state, reward.sum() + obs.sum()
        return jax.lax.scan(body, state, actions)

    state, _ = jax.vmap(env.reset)(keys)
    seconds = harness.best_time(rollout, state, repeats=repeats)
    return num_envs * scan_length / seconds


def jax_runner_steps_per_second(num_envs: int, scan_length: int, repeats: int) -> float:
    runner = make_jax_runner(envs.make(ENV_ID, backend="jax"), num_envs)
    act = random_act_fn(runner.actions)

    @jax.jit
    def rollout(rstate, key):
        def body(rstate, key):
            rstate, step, episodes = runner.step(rstate, act, key)
            return rstate, step.reward.sum() + episodes.episode_return.sum()
        return jax.lax.scan(body, rstate, jax.random.split(key, scan_length))

    rstate = runner.init(jax.random.key(0))
    seconds = harness.best_time(rollout, rstate, jax.random.key(3), repeats=repeats)
    return num_envs * scan_length / seconds


def gym_seconds_per_call(num_envs: int, calls: int, repeats: int) -> tuple[float, float]:
    """(bare SyncVectorEnv.step, GymRunner.step_packed) seconds per call (step_packed: module
    actions rescaled, the envs stepped, episode bookkeeping, the rows packed)."""
    rng = np.random.default_rng(0)
    module_actions = rng.uniform(-1, 1, (calls, num_envs, 1)).astype(np.float32)
    env_actions = 2.0 * module_actions

    bare = gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make(ENV_ID)] * num_envs)
    bare.reset(seed=0)

    def run_bare():
        for action in env_actions:
            bare.step(action)

    runner = GymRunner(ENV_ID, num_envs, seed=0)
    def run_runner():
        for action in module_actions:
            runner.step_packed(action)

    bare_s = harness.best_time(run_bare, repeats=repeats) / calls
    runner_s = harness.best_time(run_runner, repeats=repeats) / calls
    bare.close()
    runner.close()
    return bare_s, runner_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 64, 4096])
    parser.add_argument("--scan-length", type=int, default=1000)
    parser.add_argument("--gym-num-envs", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--gym-calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    print(f"{harness.machine_line(harness.machine())}; gymnasium {gymnasium.__version__}")
    print(f"\nJAX {ENV_ID}, scan of {args.scan_length} steps")
    print(f"{'envs':>6} {'env steps/s (env)':>20} {'env steps/s (runner)':>22}")
    for num_envs in args.num_envs:
        env_rate = jax_env_steps_per_second(num_envs, args.scan_length, args.repeats)
        runner_rate = jax_runner_steps_per_second(num_envs, args.scan_length, args.repeats)
        print(f"{num_envs:>6} {env_rate:>20,.0f} {runner_rate:>22,.0f}")

    print(f"\ngymnasium {ENV_ID}, SyncVectorEnv, {args.gym_calls} calls")
    print(f"{'envs':>6} {'bare us/call':>14} {'GymRunner us/call':>19} {'overhead us':>13}")
    for num_envs in args.gym_num_envs:
        bare_s, runner_s = gym_seconds_per_call(num_envs, args.gym_calls, args.repeats)
        print(f"{num_envs:>6} {bare_s * 1e6:>14.1f} {runner_s * 1e6:>19.1f} "
              f"{(runner_s - bare_s) * 1e6:>13.1f}")


if __name__ == "__main__":
    main()
