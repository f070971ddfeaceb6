"""Data-parallel training over a device mesh: the number of data shards and their placement.

A run has a *logical* number of data shards S (`SACConfig.data_shards`; by default the
size of the mesh's "data" axis). Shard s owns the envs s·E/S .. (s+1)·E/S − 1 and a
replay buffer of its own (capacity C/S, those envs' rows). Each gradient step draws
B/S samples from every shard, shard s with key `fold_in(key, s)`, and concatenates
them, shard by shard, into the global batch of B; the one learner update runs on it.
The computation is defined by S alone: where the shards live only changes which device
computes what. So a 1-device run with `data_shards=4` and a 4-device run compute the
same global batches (their parameters agree to float32 rounding: the gradient sums are
reduced in a different order), and a checkpoint of S shards restores onto any device
count that divides S.

Placement (`Placement.constrain`): the shard axis of the buffer and the env axis of the
runner state go on the mesh's "data" axis with `NamedSharding`; learner parameters and
optimizer states are replicated. jit's SPMD partitioner then keeps env steps, buffer
adds and sampling on the device that holds the shard, and, because the batch axis is
sharded while the parameters are replicated, computes each device's part of the losses
locally and all-reduces the gradients (see docs/scaling.md).

With S = 1 no shard axis exists and nothing is placed: the program is the same as
without this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxsac import envs
from jaxsac.config import SACConfig, settings_type
from jaxsac.field_roles import RUN

DATA_AXIS = "data"
"""Name of the mesh axis the data shards are spread over."""

ShardingSettings = settings_type("ShardingSettings", (RUN,),
                                 extra=("env_id", "num_envs", "batch_size"))
"""What sharding reads of a config (`ShardingSettings.of(config)`): data_shards, seed
and prng_impl, and the env id, env count and batch that must split over the devices.
The functions below take these settings or a whole SACConfig."""

__all__ = ["DATA_AXIS", "Placement", "ShardingSettings", "check_mesh", "data_shards",
           "default_mesh", "make_mesh", "placement", "resolve"]


# --- meshes and the number of shards --------------------------------------------------


def make_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A one-axis mesh ("data") over `devices` (default: `jax.devices()`, the devices of
    every process of a multi-host run)."""
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("make_mesh: devices=[] is invalid: must name at least one device")
    return Mesh(devices, (DATA_AXIS,))


def default_mesh(settings: ShardingSettings | SACConfig) -> Mesh:
    """The mesh a run gets when it names none: every device when the run splits evenly
    over them (num_envs, batch_size and any data_shards divisible by the device count; a
    single-agent env), else the first local device, so a config that cannot be split
    still runs unchanged on a machine with several devices. A multi-host run always
    gets every device (and `resolve` says what does not divide)."""
    config = ShardingSettings.of(settings)
    devices = jax.devices()
    count = len(devices)
    splits = (not envs.is_multi_agent(config.env_id)
              and all(value % count == 0 for value in (config.num_envs, config.batch_size))
              and (config.data_shards is None or config.data_shards % count == 0))
    if splits or jax.process_count() > 1:
        return make_mesh(devices)
    return make_mesh(jax.local_devices()[:1])


def check_mesh(mesh: Any, caller: str, settings: ShardingSettings | SACConfig) -> Mesh:
    """`mesh` itself, or `default_mesh(settings)` when None; an error naming it otherwise."""
    if mesh is None:
        return default_mesh(settings)
    if not isinstance(mesh, Mesh) or DATA_AXIS not in mesh.shape:
        raise ValueError(f"{caller}: mesh={mesh!r} is invalid: must be a jax.sharding.Mesh "
                         f"with a {DATA_AXIS!r} axis (e.g. jaxsac.sharding.make_mesh())")
    return mesh


def data_axis_size(mesh: Mesh) -> int:
    return int(mesh.shape[DATA_AXIS])


def resolve(config: SACConfig, mesh: Mesh, caller: str) -> SACConfig:
    """`config` with its `data_shards` for `mesh` (see `data_shards`)."""
    return config.replace(data_shards=data_shards(config, mesh, caller))


def data_shards(settings: ShardingSettings | SACConfig, mesh: Mesh, caller: str) -> int | None:
    """The run's `data_shards` on `mesh`: set from the mesh when it is None (left None on
    a one-device mesh, where it means 1), checked against the mesh: each device must hold
    a whole number of shards, and its random numbers must be partitionable."""
    config = ShardingSettings.of(settings)
    shards = config.data_shards
    devices = data_axis_size(mesh)
    if shards is None and devices > 1:
        for name in ("num_envs", "batch_size"):
            if getattr(config, name) % devices:
                raise ValueError(
                    f"{caller}: SACConfig.{name}={getattr(config, name)} is invalid: the mesh's "
                    f"{DATA_AXIS!r} axis has {devices} devices, so data_shards defaults to "
                    f"{devices} and {name} must be a multiple of {devices} (or pass a smaller "
                    "mesh)")
        shards = devices
    if config.prng_impl == "philox4x32" and mesh.size > 1:
        raise ValueError(
            f"{caller}: SACConfig.prng_impl='philox4x32' is invalid on a mesh of {mesh.size} "
            "devices: XLA cannot partition philox draws over devices; use 'threefry2x32' "
            "(the default) or a one-device mesh")
    if (shards or 1) % devices:
        raise ValueError(
            f"{caller}: SACConfig.data_shards={shards} is invalid for a mesh whose "
            f"{DATA_AXIS!r} axis has {devices} devices: must be a multiple of {devices}")
    return shards


# --- placement on the mesh ------------------------------------------------------------


class Placement(NamedTuple):
    """Where a TrainState's arrays live on `mesh` (see the module docstring)."""

    mesh: Mesh

    def spread(self, tree: Any) -> Any:
        """Every leaf's leading axis (shards or envs) on the data axis."""
        sharding = NamedSharding(self.mesh, PartitionSpec(DATA_AXIS))
        return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, sharding), tree)

    def replicate(self, tree: Any) -> Any:
        sharding = NamedSharding(self.mesh, PartitionSpec())
        return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, sharding), tree)

    def constrain(self, state: Any) -> Any:
        """The TrainState with its learner replicated, its buffer's shard axis and its
        runner's env axis on the data axis, and its observation statistics replicated.
        Inside `vmap` (seeds) the vmapped axis stays unsharded."""
        runner = state.runner
        if runner is not None:
            obs_norm = self.replicate(runner.obs_norm)
            runner = self.spread(runner.replace(obs_norm=None)).replace(obs_norm=obs_norm)
        return state.replace(learner=self.replicate(state.learner),
                             buffer=self.spread(state.buffer), runner=runner)


def placement(mesh: Mesh) -> Placement | None:
    """The placement on `mesh`, or None on a single device (nothing to place)."""
    return None if mesh.devices.size == 1 else Placement(mesh)
