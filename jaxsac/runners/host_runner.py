"""The contract of a runner whose envs live on the host (`HostRunner`): what the
gymnasium loop (jaxsac.host_loop.HostLoop) asks of it, and all it asks.

`EnvRunner` (envs in this process) and `RayEnvRunners` (envs in Ray actors) are its
implementations; another way to collect host steps plugs in as a third, handed to
`HostLoop(config, runner)`.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from jaxsac.runners.gym_runner import PackedRows


@runtime_checkable
class HostRunner(Protocol):
    """E envs stepped on the host, one iteration at a time, in blocks.

    rows: the packing of one env step into a float32 row (`PackedRows`: obs_dim, the
        action adapter, width, and the jittable `unpack` the loop applies on the device).
    num_envs: E. raw_obs: [E, obs_dim] float32, the envs' current observations packed
    (`rows.obs_spec.pack`: a Box's flattened, a Dict's entries concatenated).
    num_env_restarts, num_env_runner_restarts: faults recovered from so far (counters
        for the metrics row).
    """

    @property
    def rows(self) -> PackedRows: ...

    @property
    def num_envs(self) -> int: ...

    @property
    def raw_obs(self) -> np.ndarray: ...

    @property
    def num_env_restarts(self) -> int: ...

    @property
    def num_env_runner_restarts(self) -> int: ...

    def sample(self, acting: str, actor_params: Any, obs_stats: Any, root: Any,
               iteration: int, size: int) -> np.ndarray:
        """Rows [size, E, rows.width] of iterations iteration ... iteration + size - 1,
        acting with the acting function named `acting` ("policy" or "random",
        jaxsac.host_loop.acting_functions) with these parameters and statistics."""

    def resume_from(self, obs: np.ndarray) -> None:
        """Restart the envs with NEXT_STEP reset rows from `obs` [E, obs_dim] (packed; a resumed
        run's last next observations) before the next block."""

    def close(self) -> None:
        """Release the envs (and processes)."""
