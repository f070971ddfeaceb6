"""One process of a multi-host run on the CPU (run as a script, not collected by pytest).

    python tests/multihost_child.py CONFIG_JSON

The parent starts one such process per host with JAX_COORDINATOR_ADDRESS,
JAX_NUM_PROCESSES, JAX_PROCESS_ID and the forced device count in its environment. Each
starts the distributed runtime (CPU collectives over gloo), then runs
jaxsac.train(config) on the mesh of all processes' devices. The last stdout line is
JSON: {"process", "devices", "local_devices", "env_steps", "grad_steps"}.
"""

from __future__ import annotations

import json
import sys


def main(config_json: str) -> None:
    import jax
    import numpy as np

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    import jaxsac

    jaxsac.distributed.initialize()
    result = jaxsac.train(jaxsac.SACConfig.from_json(config_json), progress=False)
    print(json.dumps({"process": jax.process_index(), "devices": len(jax.devices()),
                      "local_devices": len(jax.local_devices()),
                      "env_steps": np.asarray(result.metrics["env_steps"]).tolist(),
                      "grad_steps": np.asarray(result.metrics["grad_steps"]).tolist()}),
          flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
