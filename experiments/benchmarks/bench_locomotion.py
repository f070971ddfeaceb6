"""Env steps per second of a MuJoCo Playground locomotion task through jaxsac's adapter.

    .venv/bin/python -m experiments.benchmarks.bench_locomotion \
        [--task T1JoystickFlatTerrain] [--num-envs 8 32] [--scan-length 50] \
        [--domain-randomization]

A jitted `lax.scan` of `--scan-length` iterations of `AutoReset.step_batch` (the one
the JAX runner calls: the task's 1,000-step time limit, resets only in iterations where
some env needs one) over E envs, with fixed uniform random actions in [-1, 1]; env
steps/s counts E per iteration, the best of `--repeats` calls after a warm-up one.
Compilation (lowering included) is timed apart. MJX's JAX implementation on the
default JAX backend; the load average before and after is printed beside the figures
(the machine may be shared).
"""

from __future__ import annotations

import argparse

import jax

import jaxsac.envs as envs
from experiments.benchmarks import harness


def make_rollout(task: str, num_envs: int, scan_length: int,
                 domain_randomization: bool) -> tuple[object, tuple]:
    """(the jitted rollout, its arguments): `scan_length` autoreset steps of `num_envs`
    envs of `task` from their first reset."""
    env = envs.AutoReset(envs.make("playground/" + task,
                                   domain_randomization=domain_randomization))
    keys = jax.random.split(jax.random.key(0), num_envs)
    actions = jax.random.uniform(jax.random.key(1), (scan_length, num_envs,
                                                     env.action_space.shape[0]),
                                 minval=-1.0, maxval=1.0)

    @jax.jit
    def rollout(state, actions):
        def body(state, action):
            state, obs, reward, terminated, truncated = env.step_batch(state, action, keys)
            return state, reward.sum() + obs.sum() + terminated.sum() + truncated.sum()
        return jax.lax.scan(body, state, actions)[1]

    state, _ = jax.jit(jax.vmap(env.reset))(keys)
    return rollout, (state, actions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="T1JoystickFlatTerrain")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--scan-length", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--domain-randomization", action="store_true")
    args = parser.parse_args()

    print(harness.machine_line(harness.machine()))
    print(f"playground/{args.task}, scan of {args.scan_length} autoreset steps"
          + (", domain randomization" if args.domain_randomization else ""))
    print(f"{'envs':>6} {'env steps/s':>12} {'ms / iteration':>15} {'compile s':>10} "
          f"{'load before':>18} {'load after':>18}")
    for num_envs in args.num_envs:
        load_before = harness.load_average()
        rollout, rollout_args = make_rollout(args.task, num_envs, args.scan_length,
                                             args.domain_randomization)
        compiled, compile_s = harness.compile_timed(rollout, *rollout_args)
        seconds = harness.best_time(compiled, *rollout_args, repeats=args.repeats)
        print(f"{num_envs:>6} {num_envs * args.scan_length / seconds:>12,.0f} "
              f"{seconds / args.scan_length * 1e3:>15.1f} {compile_s:>10.1f} "
              f"{str(load_before):>18} {str(harness.load_average()):>18}")


if __name__ == "__main__":
    main()
