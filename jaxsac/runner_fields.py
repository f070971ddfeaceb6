"""The checks across SACConfig's runner fields (`check_runner_fields`, called by
SACConfig's validation): remote env runners, their envs, their timeout and address."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxsac import checks


def check_runner_fields(c: Any) -> None:
    """Raise the ValueError of jaxsac.checks for the first runner setting of the SACConfig
    `c` that its other fields rule out."""
    owner = "SACConfig"
    if c.ray_address is not None and (not isinstance(c.ray_address, str) or not c.ray_address):
        checks.fail(owner, "ray_address", c.ray_address, 'None, "auto" or a Ray address')
    default_timeout = next(f.default for f in dataclasses.fields(c)
                           if f.name == "sample_timeout_s")
    if c.num_env_runners == 0 and c.sample_timeout_s != default_timeout:
        checks.fail(owner, "sample_timeout_s", c.sample_timeout_s,
                    f"{default_timeout} (the default) without remote runners "
                    "(num_env_runners=0): it times out remote runners' blocks; the envs of "
                    "this process are stepped in it, where a step cannot be timed out")
    per_runner = c.num_envs_per_env_runner
    if per_runner is None:
        if c.num_env_runners and c.num_envs % c.num_env_runners:
            checks.fail(owner, "num_envs", c.num_envs, f"a multiple of num_env_runners="
                        f"{c.num_env_runners} (each remote runner steps an equal share)")
        return
    checks.check_int(owner, "num_envs_per_env_runner", per_runner, 1)
    if c.num_env_runners == 0:
        checks.fail(owner, "num_envs_per_env_runner", per_runner,
                    "None without remote runners (num_env_runners=0)")
    if per_runner * c.num_env_runners != c.num_envs:
        checks.fail(owner, "num_envs_per_env_runner", per_runner,
                    f"num_envs / num_env_runners = {c.num_envs} / {c.num_env_runners} "
                    "(num_envs counts every runner's envs)")
