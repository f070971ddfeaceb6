"""Multi-host runs: start JAX's distributed runtime from the launcher's environment.

Every host runs the same program (`python -m experiments.train --distributed ...`).
`initialize()` must run before anything else touches the devices; afterwards
`jax.devices()` lists the devices of every host, `jaxsac.sharding.make_mesh()` spreads
the data shards over all of them, and `jaxsac.train` runs one SPMD program across the
hosts (see docs/scaling.md for launch commands).

Where the settings come from, in this order:

* explicit: JAX_COORDINATOR_ADDRESS (host:port of process 0), JAX_NUM_PROCESSES and
  JAX_PROCESS_ID, set by the user or a launcher script on every host;
* otherwise JAX's own cluster detection: SLURM (srun), Open MPI (mpirun), Cloud TPU VMs
  (a TPU pod slice) and Kubernetes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import jax

EXPLICIT_VARIABLES = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")

__all__ = ["EXPLICIT_VARIABLES", "explicit_settings", "initialize"]


def _integer(environ: Mapping[str, str], name: str, minimum: int) -> int:
    text = environ[name]
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ValueError(f"{name}={text!r} is invalid: must be an integer >= {minimum}")
    return value


def explicit_settings(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """`jax.distributed.initialize` arguments from EXPLICIT_VARIABLES, or None when none
    of them is set; an error naming the missing or invalid ones otherwise."""
    environ = os.environ if environ is None else environ
    present = [name for name in EXPLICIT_VARIABLES if environ.get(name)]
    if not present:
        return None
    missing = [name for name in EXPLICIT_VARIABLES if name not in present]
    if missing:
        raise ValueError(f"distributed: {', '.join(present)} set but {', '.join(missing)} "
                         f"missing: set all of {list(EXPLICIT_VARIABLES)} on every host, or "
                         "none of them to use the cluster's own detection")
    num_processes = _integer(environ, "JAX_NUM_PROCESSES", 1)
    process_id = _integer(environ, "JAX_PROCESS_ID", 0)
    if process_id >= num_processes:
        raise ValueError(f"JAX_PROCESS_ID={process_id} is invalid: must be below "
                         f"JAX_NUM_PROCESSES={num_processes}")
    return {"coordinator_address": environ["JAX_COORDINATOR_ADDRESS"],
            "num_processes": num_processes, "process_id": process_id}


def initialize(environ: Mapping[str, str] | None = None) -> None:
    """Start the distributed runtime: with the explicit settings when they are set,
    else with JAX's cluster detection (which raises when it finds no cluster).

    Call it once per process, before any other use of jax."""
    settings = explicit_settings(environ)
    jax.distributed.initialize(**(settings or {}))
