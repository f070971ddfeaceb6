"""A fresh process with several CPU devices for the sharding tests (run as a script).

The parent sets XLA_FLAGS=--xla_force_host_platform_device_count=N and JAX_PLATFORMS=cpu
in this process's environment, so jax starts with N devices.

    python tests/support/sharding_child.py make_train CONFIG_JSON NUM_SEEDS
        make_train(config), vmapped over the seeds when NUM_SEEDS > 1, once on a mesh of
        all devices and once on a mesh of the first device only (the same data_shards).
    python tests/support/sharding_child.py train CONFIG_JSON NUM_SEEDS
        jaxsac.train(config, num_seeds) on both meshes in turn.

The last stdout line is JSON: {"devices", "max_param_difference", "max_param_change",
"grad_steps", "shardings": {name: {"spec", "replicated", "shard_shapes"}}, "errors"}.
"""

from __future__ import annotations

import json
import sys


def learner_arrays(state):
    import jax

    learner = state.learner
    return jax.tree.leaves((learner.actor_params, learner.critic_params, learner.log_alpha))


def describe(x) -> dict:
    spec = getattr(x.sharding, "spec", None)
    return {"spec": None if spec is None else list(spec),
            "replicated": bool(x.sharding.is_fully_replicated),
            "shard_shapes": [list(s.data.shape) for s in x.addressable_shards]}


def shardings(state) -> dict:
    import jax

    return {"buffer.obs": describe(state.buffer.obs),
            "buffer.write_slot": describe(state.buffer.write_slot),
            "runner.obs": describe(state.runner.obs),
            "runner.env_state": describe(jax.tree.leaves(state.runner.env_state)[0]),
            "runner.obs_norm": describe(jax.tree.leaves(state.runner.obs_norm)[0]),
            "learner.actor": describe(jax.tree.leaves(state.learner.actor_params)[0]),
            "learner.critic_opt_state": describe(
                jax.tree.leaves(state.learner.critic_opt_state)[-1])}


def over_seeds(f, keys):
    import jax

    return jax.vmap(f) if keys.shape else f


def run(mode: str, config, keys, mesh):
    """(final TrainState, grad_steps per log period) of `mode` on `mesh`."""
    import jax

    import jaxsac

    if mode == "make_train":
        state, metrics = jax.jit(over_seeds(jaxsac.make_train(config, mesh=mesh), keys))(keys)
        return state, metrics["grad_steps"]
    result = jaxsac.train(config, num_seeds=keys.shape[0] if keys.shape else 1,
                          progress=False, mesh=mesh)
    return result.state, result.metrics["grad_steps"]


def initial_state(config, keys):
    import jax

    from jaxsac.assembly import assemble, init_state
    from jaxsac.learner import Hyperparams

    assembly = assemble(config)
    init = lambda key: init_state(assembly, key, Hyperparams.from_config(config))
    return jax.jit(over_seeds(init, keys))(keys)


def errors(config) -> list[str]:
    """The messages of the mesh checks for settings a mesh of all devices rejects."""
    import jaxsac
    from jaxsac import sharding

    out = []
    for bad in (config.replace(data_shards=None, num_envs=2, batch_size=32),
                config.replace(data_shards=2, num_envs=2, batch_size=32),
                config.replace(prng_impl="philox4x32")):
        try:
            jaxsac.make_train(bad, mesh=sharding.make_mesh())
        except ValueError as e:
            out.append(str(e))
    return out


def main(argv: list[str]) -> None:
    import jax
    import numpy as np

    import jaxsac
    from jaxsac import sharding
    from jaxsac.assembly import run_keys

    mode, config_json, *rest = argv
    if mode not in ("make_train", "train"):
        raise SystemExit(f"sharding_child: unknown mode {mode!r}; modes: make_train, train")
    config = jaxsac.SACConfig.from_json(config_json)
    keys = run_keys(config, int(rest[0]) if rest else 1)
    many, one = sharding.make_mesh(), sharding.make_mesh(jax.devices()[:1])
    spread, spread_steps = run(mode, config, keys, many)
    single, single_steps = run(mode, config, keys, one)
    initial = initial_state(config, keys)

    def max_difference(a, b):
        return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
                   for x, y in zip(learner_arrays(a), learner_arrays(b), strict=True))

    print(json.dumps({
        "devices": len(jax.devices()),
        "max_param_difference": max_difference(spread, single),
        "max_param_change": max_difference(spread, initial),
        "grad_steps": [np.asarray(spread_steps).tolist(), np.asarray(single_steps).tolist()],
        "shardings": shardings(spread),
        "single_device_shardings": shardings(single),
        "errors": errors(config),
        # Devices of the default mesh: this config, one whose envs do not divide, and a
        # multi-agent one.
        "default_mesh_devices": [
            sharding.default_mesh(c).devices.size
            for c in (config, config.replace(data_shards=None, num_envs=2, batch_size=32),
                      jaxsac.tuned("MultiAgentPendulum-v1"))],
    }), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
