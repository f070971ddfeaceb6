"""Checkpoints of a SAC run: `save`, `restore`, `latest_step`, and `open_step`, the one
path that opens a step for reading (`restore` here, `jaxsac.load_policy`).

    checkpoint.save("runs/x/checkpoints", train_state, config, step=env_steps)
    state, config = checkpoint.restore("runs/x/checkpoints")              # newest step

A checkpoint is one step folder `<directory>/<env steps>/` (jaxsac.storage: atomic,
checksummed) with these items:

    learner   LearnerState leaves: params, target critics, optimizer states, log α, ...
    runner    TrainState.runner: JAX env states, running episode sums, observation
              statistics (gymnasium runs: the observation statistics only)
    progress  the run's key (as key data), iteration counter, completed-episode stats
    buffer    ReplayState leaves (only when `config.checkpoint_buffer`)
    config    the SACConfig as JSON
    meta      JSON: format version, seed axis, env spaces, and (jaxsac.storage) each
              array's shape, dtype and checksum and each typed key's implementation

Array items are flat dicts `{"actor_params.params.MLP_0.Dense_0.kernel": array, ...}`;
`restore` puts them back into the structure of a template TrainState (given as `like`,
or built from the stored config with `jax.eval_shape`), so every NamedTuple and empty
node comes back exactly. Leaves keep a leading seed axis when several seeds were saved.
Typed PRNG keys anywhere in the state (the run's key, keys inside env states) come back
as keys of the implementation they were saved with.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

from jaxsac import connectors, envs, runs, storage
from jaxsac.assembly import assemble, example_step, host_assembly, init_state, make_buffer
from jaxsac.config import STRUCTURAL, SACConfig, fields_with
from jaxsac.networks.encoders import built_encoders
from jaxsac.observations import ObsSpec, obs_spec
from jaxsac.storage import CorruptCheckpointError

FORMAT_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)
"""Version 2 adds `json_sha256` to meta: a SHA-256 of the config and meta items (without
that field), so an edited config or env metadata (action bounds) is an error. Version 3
replaces `key_impl` (the run key's PRNG implementation) with `key_impls`, the
implementation of every typed key in the state, {item: {name: impl}}, so env states
holding typed keys can be saved. Version 4 adds `obs_entries`, the entries of a dict
observation ({key: {shape, dtype}}; None for a flat one): observations are pytrees.
Versions 1 to 3 are read as they are (their observations flat [obs_dim]), except that
a Playground task's dict observation, which they stored flattened, no longer fits the
env's (an error saying so)."""
ARRAY_ITEMS = ("learner", "runner", "progress", "buffer")
"""Orbax items holding arrays. The TrainState fields learner, runner and buffer each have
an item of their own; every other field (key, iteration, episodes) goes to progress."""

STRUCTURAL_FIELDS = fields_with(STRUCTURAL)
"""SACConfig fields a restored state must share with the requested config (the
STRUCTURAL role): they fix the arrays' shapes, or what the arrays mean (`activation`,
`normalize_obs`: the parameters were trained on normalized observations or not;
`prng_impl`: the generator the key is for; `encoder`, `critic`: the code that reads the
parameters, where two encoder names that build the same networks for the observations
("flat" and "auto" on vectors) are no difference; `actor_obs_keys`, `critic_obs_keys`:
the observation entries each network reads)."""

__all__ = ["CorruptCheckpointError", "OpenStep", "config_differences", "latest_step",
           "open_step", "restore", "save", "state_items", "template"]


def _item_of(names: list[str]) -> tuple[str, str]:
    """(item, leaf name within the item) of a TrainState leaf path."""
    if names[0] in ("learner", "runner", "buffer"):
        return names[0], ".".join(names[1:]) or "value"
    return "progress", ".".join(names)


def state_items(state: Any) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, str]],
                                     list[tuple[str, str]], Any]:
    """A TrainState (concrete or abstract) as storage items: `storage.flatten` with the
    items of ARRAY_ITEMS."""
    return storage.flatten(state, _item_of)


def _seed_axis(state: Any) -> tuple[bool, int]:
    """(has a leading seed axis, number of seeds), read off `state.iteration`."""
    shape = np.shape(state.iteration)
    if len(shape) == 0:
        return False, 1
    return True, int(shape[0])


# --- env spaces and configs ----------------------------------------------------------


@functools.lru_cache(maxsize=32)
def _spaces(env_id: str, backend: str, obs_keys: tuple[str, ...] | None,
            env_kwargs: dict[str, Any]) -> tuple[gymnasium.Space, gymnasium.Space]:
    env = envs.make(env_id, backend=backend, obs_keys=obs_keys, **env_kwargs)
    return env.observation_space, env.action_space


def _env_meta(config: SACConfig) -> dict[str, Any]:
    backend = envs.resolve_backend(config.env_id, config.backend)
    obs_space, act_space = _spaces(config.env_id, backend, config.obs_keys, config.env_kwargs)
    is_box = isinstance(obs_space, gymnasium.spaces.Box)
    return {"backend": backend, "obs_shape": list(obs_space.shape) if is_box else None,
            **obs_spec(obs_space, f"env {config.env_id!r}").metadata(),
            **connectors.module_actions(act_space, f"env {config.env_id!r}").metadata()}


def check_observations(stored: ObsSpec, current: ObsSpec, where: str) -> None:
    """A ValueError when the observations a checkpoint stored are not the env's: above
    all, a checkpoint before format 4 of a Playground task whose dict observation it
    stored flattened."""
    if stored != current:
        raise ValueError(
            f"{where} stored observations {stored.describe()}, but the env's are "
            f"{current.describe()}; checkpoints before format 4 stored a MuJoCo Playground "
            "task's dict observation flattened (its obs_keys concatenated), which is kept "
            "a dict now: such a checkpoint cannot be restored or loaded, train it again "
            "(docs/checkpoints.md, \"Format versions\")")


def config_differences(stored: SACConfig, requested: SACConfig,
                       stored_env: dict[str, Any] | None = None) -> list[str]:
    """Lines "field: stored X, requested Y" for each difference that changes the state's
    arrays (STRUCTURAL_FIELDS, the backend, obs and action shapes, the number of data
    shards (None counts as 1), gradient clipping on or off). Fields such as
    total_env_steps or learning rates may differ."""
    out = []
    stored_env = stored_env or _env_meta(stored)
    requested_env = _env_meta(requested)
    if stored_env["backend"] != requested_env["backend"]:
        out.append(f"backend: stored {stored_env['backend']!r}, requested "
                   f"{requested_env['backend']!r} (the runner state differs)")
    specs = [ObsSpec.from_metadata(env) for env in (stored_env, requested_env)]
    keys = [(c.actor_obs_keys, c.critic_obs_keys) for c in (stored, requested)]
    same_encoders = (stored.encoder == requested.encoder or specs[0] == specs[1]
                     and keys[0] == keys[1] and built_encoders(stored, specs[0])
                     == built_encoders(requested, specs[0]))
    for name in STRUCTURAL_FIELDS:
        a, b = getattr(stored, name), getattr(requested, name)
        if a != b and not (name == "encoder" and same_encoders):  # "auto" is "flat" there
            out.append(f"{name}: stored {a!r}, requested {b!r}")
    if stored.num_data_shards != requested.num_data_shards:
        out.append(f"data_shards: stored {stored.data_shards!r}, requested "
                   f"{requested.data_shards!r} (the replay buffer has one part per shard)")
    if (stored.grad_clip is None) != (requested.grad_clip is None):
        out.append(f"grad_clip: stored {stored.grad_clip!r}, requested {requested.grad_clip!r}"
                   " (on/off changes the optimizer state)")
    a, b = (env["obs_shape"] and tuple(env["obs_shape"]) for env in (stored_env, requested_env))
    if a is not None and b is not None and a != b:
        out.append(f"obs_shape: stored {a!r}, requested {b!r}")
    elif specs[0] != specs[1]:
        out.append(f"observations: stored {specs[0].describe()}, requested "
                   f"{specs[1].describe()}")
    a, b = tuple(stored_env["act_shape"]), tuple(requested_env["act_shape"])
    if a != b:
        out.append(f"act_shape: stored {a!r}, requested {b!r}")
    a, b = (env.get("act_kind", "continuous") for env in (stored_env, requested_env))
    if a != b:
        out.append(f"action space: stored {a!r}, requested {b!r}")
    return out


# --- save and latest_step ------------------------------------------------------------


def latest_step(directory: str | os.PathLike) -> int | None:
    """Env steps of the newest complete checkpoint in `directory`; None when it has none.

    Steps whose save did not finish (a killed process) are never complete.
    """
    steps = storage.complete_steps(storage.check_directory(directory, "checkpoint.latest_step"))
    return steps[-1] if steps else None


def save(directory: str | os.PathLike, train_state: Any, config: SACConfig, step: int, *,
         run_id: str | None = None, eval_return: float | None = None) -> None:
    """Write `train_state` and `config` as checkpoint `step` of `directory`, atomically.

    Keeps the newest `config.max_to_keep` steps; leaves the replay buffer out when
    `config.checkpoint_buffer` is False. Saving a step that already exists replaces it
    (and does nothing when the stored arrays are the same bits). The folder belongs to
    one run (jaxsac.runs): the first save records it in `<directory>/run.json`, and
    every step's meta holds its run id.

    Args:
        directory: the checkpoint folder (created when missing).
        train_state: a TrainState, optionally with a leading seed axis.
        config: the run's SACConfig (stored with it).
        step: the env steps the state has reached (the step folder's name).
        run_id: the run the state belongs to (`train` passes its own); None: the run the
            folder records when the state has its key, else a new run.
        eval_return: recorded in the meta when given (the best checkpoint's return).

    Raises:
        FileExistsError: `directory` holds checkpoints of another run (another run_id,
        or with run_id None a state of another key).
    """
    directory = storage.check_directory(directory, "checkpoint.save")
    step = storage.check_step(step, "checkpoint.save")
    if not isinstance(config, SACConfig):
        raise ValueError(f"checkpoint.save: config={type(config).__name__} is invalid: must "
                         "be a SACConfig")
    for field in ("learner", "buffer", "runner", "key", "iteration"):
        if not hasattr(train_state, field):
            raise ValueError(f"checkpoint.save: train_state={type(train_state).__name__} has "
                             f"no field {field!r}: must be a jaxsac TrainState")
    items, key_impls, _, _ = state_items(train_state)
    if not config.checkpoint_buffer:
        items.pop("buffer", None)
        key_impls.pop("buffer", None)
    seed_axis, num_seeds = _seed_axis(train_state)
    key_checksum = storage.checksums({"key": items["progress"]["key"]})["key"]
    run_id = runs.claim(directory, run_id, key_checksum, "checkpoint.save")
    meta = {"format_version": FORMAT_VERSION, "env_steps": step, "seed_axis": seed_axis,
            "num_seeds": num_seeds, "buffer_saved": "buffer" in items, "run_id": run_id,
            **_env_meta(config)}
    if eval_return is not None:
        meta["eval_return"] = float(eval_return)
    storage.write_step(directory, step, items, key_impls, meta,
                       {"config": config.to_dict()}, config.max_to_keep)


# --- opening a step ------------------------------------------------------------------


def _parse(stored: dict[str, Any]) -> tuple[SACConfig, dict[str, Any]]:
    """(config, meta) of the stored config and meta items, checked: a readable format
    version, and (version 2 on) the SHA-256 taken at save time. The meta of versions 1
    and 2 gains `key_impls` from their `key_impl`."""
    config, meta = stored["config"], stored["meta"]
    version = meta.get("format_version") if isinstance(meta, dict) else None
    if version not in READABLE_VERSIONS:
        raise ValueError(f"format_version {version!r}; this jaxsac reads "
                         f"{list(READABLE_VERSIONS)}")
    if version >= 2 and meta.get("json_sha256") != storage.json_sha256(stored):
        raise ValueError("the config or meta item was changed after the save (their "
                         "SHA-256 differs from the one taken at save time)")
    if version < 3:
        meta = {**meta, "key_impls": ({"progress": {"key": meta["key_impl"]}}
                                      if meta["key_impl"] is not None else {})}
    return SACConfig.from_dict(config), meta


@dataclasses.dataclass(frozen=True)
class OpenStep:
    """One checkpoint step open for reading (see `open_step`).

    step: its env steps. config: the stored SACConfig. meta: the stored metadata (env
    spaces: obs_shape, obs_dim, obs_entries (format 4), obs_image (an image Box's
    shape, else None or absent), backend, and act_dim, act_shape,
    act_low, act_high for a Box or act_kind, act_dim, act_start for a Discrete space;
    seed_axis, num_seeds; arrays, checksums, key_impls).
    """

    directory: str
    step: int
    config: SACConfig
    meta: dict[str, Any]
    manager: Any

    @property
    def where(self) -> str:
        return f"checkpoint step {self.step} in {self.directory}"

    def read(self, targets: dict[str, dict[str, Any]], partial: bool = False
             ) -> dict[str, dict[str, Any]]:
        """The arrays `targets` ({item: {name: stored leaf or abstract one}}, only some
        of each item's when `partial`), checked against their checksums."""
        return storage.read_arrays(self.manager, self.directory, self.step, self.meta,
                                   targets, partial)

    def check_shapes(self, items: dict[str, dict[str, Any]], wanted: list[str],
                     subset: bool, what: str) -> None:
        """ValueError listing each array of `items` whose presence, shape or dtype
        differs from the stored one (only the arrays of `items` when `subset`)."""
        differences = storage.shape_differences(items, self.meta["arrays"], wanted, subset)
        if differences:
            raise ValueError(f"{self.where} {what} (name: shape, dtype):\n  "
                             + "\n  ".join(differences))


@contextlib.contextmanager
def open_step(directory: str | os.PathLike, step: int | None, owner: str
              ) -> Iterator[OpenStep]:
    """Open checkpoint `step` (the newest when None) of `directory` for reading: the step
    resolved, its config and meta read and checked (errors name `owner`). `directory`
    may be a checkpoint folder, a step folder or a run folder (`runs.locate`); without a
    step, a folder holding the steps of several runs is an error."""
    directory, step = runs.locate(directory, step, owner)
    if step is None:
        runs.check_one_run(directory, owner)
    step = storage.resolve_step(directory, step, owner)
    manager = storage.reader(directory)
    try:
        config, meta = storage.read_json(manager, directory, step, ("config", "meta"), _parse)
        opened = OpenStep(directory, step, config, meta, manager)
        if meta["format_version"] == 1:
            warnings.warn(f"{opened.where} is a format-1 checkpoint: its config and env "
                          "metadata carry no checksum, so an edit to them goes unnoticed; "
                          "save it again with checkpoint.save (after restore) to write "
                          f"format {FORMAT_VERSION}", stacklevel=4)
        yield opened
    finally:
        manager.close()


# --- templates -----------------------------------------------------------------------


def _init_fn(config: SACConfig, meta: dict[str, Any]) -> Callable[[jax.Array], Any]:
    """key -> a fresh TrainState shaped like the stored one (one seed)."""
    stored = ObsSpec.from_metadata(meta)
    if meta["backend"] == "jax":
        assembly = assemble(config)
        check_observations(stored, assembly.obs_spec, f"the checkpoint of {config.env_id!r}")
    else:
        assembly = host_assembly(config, stored, connectors.actions_from_metadata(meta))
    with_runner = "runner" in meta["arrays"]

    def init(key):
        state = init_state(assembly, key)
        return state if with_runner else state.replace(runner=None)

    return init


def template(config: SACConfig, meta: dict[str, Any]) -> Any:
    """An abstract TrainState (`jax.eval_shape`) like the stored one, seed axis included."""
    init = _init_fn(config, meta)
    key = jax.random.key(0)
    if meta["seed_axis"]:
        init, key = jax.vmap(init), jax.random.split(key, meta["num_seeds"])
    return jax.eval_shape(init, key)


def _empty_buffer(config: SACConfig, meta: dict[str, Any]) -> Any:
    """A fresh ReplayState for the stored shapes (with the seed axis, if any)."""
    buffer = make_buffer(config, config.gamma)
    example = example_step(ObsSpec.from_metadata(meta), connectors.actions_from_metadata(meta))
    empty = jax.jit(lambda: buffer.init(example))()
    if meta["seed_axis"]:
        empty = jax.tree.map(lambda x: jnp.broadcast_to(x, (meta["num_seeds"], *x.shape)),
                             empty)
    return empty


# --- restore -------------------------------------------------------------------------


def restore(directory: str | os.PathLike, step: int | None = None, *,
            config: SACConfig | None = None, like: Any = None) -> tuple[Any, SACConfig]:
    """Read checkpoint `step` (env steps; the newest when None) of `directory`.

    Args:
        directory: the checkpoint folder.
        step: env steps of the checkpoint; None: the newest.
        config: the config the caller wants to continue with; when it differs from the
            stored one in a way that changes the arrays (see `config_differences`) this
            raises ValueError listing every difference. Other fields may differ.
        like: a TrainState to restore into (same structure and shapes, e.g. a fresh
            state; with a leading seed axis for several seeds). Without it the template
            is built from the stored config (and seed axis).

    Returns:
        (TrainState, the stored SACConfig). A checkpoint saved without its replay buffer
        gives the template's (empty) buffer, with a warning.

    Raises:
        FileNotFoundError: the step does not exist. CorruptCheckpointError: it cannot be
        read back bit for bit. ValueError: it does not fit `config` or `like`.
    """
    with open_step(directory, step, "checkpoint.restore") as opened:
        stored_config, meta = opened.config, opened.meta
        if config is not None:
            differences = config_differences(stored_config, config, meta)
            if differences:
                raise ValueError(f"{opened.where} does not match the requested config:\n  "
                                 + "\n  ".join(differences))
        if like is not None:
            seed_axis, num_seeds = _seed_axis(like)
            if (seed_axis, num_seeds) != (meta["seed_axis"], meta["num_seeds"]):
                raise ValueError(
                    f"{opened.where} does not match the requested state: num_seeds: stored "
                    f"{meta['num_seeds'] if meta['seed_axis'] else 'no seed axis'}, requested "
                    f"{num_seeds if seed_axis else 'no seed axis'}")
        state_template = template(stored_config, meta) if like is None else like
        items, template_impls, order, treedef = state_items(state_template)
        wanted = [item for item in ARRAY_ITEMS if item != "buffer" or meta["buffer_saved"]]
        opened.check_shapes(items, wanted, False, "does not match the requested state")
        restored = opened.read({item: items.get(item, {}) for item in wanted})
    if not meta["buffer_saved"] and items.get("buffer"):
        warnings.warn(f"{opened.where} was saved without its replay buffer "
                      "(checkpoint_buffer=False): the restored state has an empty buffer",
                      stacklevel=2)
        concrete = like is not None and all(
            isinstance(x, jax.Array) for x in jax.tree.leaves(like.buffer))
        buffer = like.buffer if concrete else _empty_buffer(stored_config, meta)
        restored["buffer"] = state_items(state_template.replace(buffer=buffer))[0]["buffer"]
    key_impls = {**meta["key_impls"]}
    if not meta["buffer_saved"] and "buffer" in template_impls:
        key_impls["buffer"] = template_impls["buffer"]
    return storage.unflatten(treedef, order, restored, key_impls), stored_config
