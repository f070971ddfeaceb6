"""Env runners: step `num_envs` envs once per call and give the `Step`s for the buffer.

* `make_jax_runner(env, num_envs)` (jax_runner): pure functions for JAX envs, vmapped
  over the envs, so a whole training run can be one `lax.scan`.
* `GymRunner(env_id, num_envs)` (gym_runner): a host loop over a gymnasium vector env,
  with fault tolerance.

Both give the same NEXT_STEP stream (see jax_runner's docstring).
"""

from jaxsac.runners.gym_runner import VECTORIZATIONS, GymRunner
from jaxsac.runners.jax_runner import ActFn, JaxRunner, RunnerState, make_jax_runner, random_act_fn

__all__ = ["VECTORIZATIONS", "ActFn", "GymRunner", "JaxRunner", "RunnerState",
           "make_jax_runner", "random_act_fn"]
