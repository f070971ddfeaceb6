"""Env runners: step `num_envs` envs once per call and give the `Step`s for the buffer.

* `make_jax_runner(env, num_envs)` (jax_runner): pure functions for JAX envs, vmapped
  over the envs, so a whole training run can be one `lax.scan`.
* `GymRunner(env_id, num_envs)` (gym_runner): a host loop over a gymnasium vector env,
  with fault tolerance.
* `EnvRunner(gym_runner, acting)` (env_runner): a GymRunner and the policy acting in
  it, sampling blocks of iterations.
* `RayEnvRunners(factory, num_runners, envs_per_runner, acting)` (ray_runner): EnvRunners
  in Ray actors, sampled synchronously and replaced when they fail (Ray is imported on
  first use).

Both give the same NEXT_STEP stream (see jax_runner's docstring). `HostRunner`
(host_runner) is the contract of the host runners, which the gymnasium loop relies on.
"""

from jaxsac.runners.env_runner import EnvRunner
from jaxsac.runners.gym_runner import VECTORIZATIONS, GymRunner, PackedRows
from jaxsac.runners.host_runner import HostRunner
from jaxsac.runners.jax_runner import ActFn, JaxRunner, RunnerState, make_jax_runner, random_act_fn
from jaxsac.runners.ray_runner import RAY_EXTRA, RayEnvRunners, check_ray_installed

__all__ = ["RAY_EXTRA", "VECTORIZATIONS", "ActFn", "EnvRunner", "GymRunner", "HostRunner",
           "JaxRunner",
           "PackedRows", "RayEnvRunners", "RunnerState", "check_ray_installed",
           "make_jax_runner", "random_act_fn"]
