"""`train`: a whole run on any backend, with progress, logs, checkpoints and a callback.

    result = jaxsac.train(config)                        # TrainResult(state, metrics, ...)
    result = jaxsac.train(config, callback=fn)           # fn(row, state) -> True stops

JAX envs run the JAX loop (jaxsac.jax_loop) one log period per call: identical to one
`make_train` call for the same key. Gymnasium envs run the host loop (jaxsac.host_loop).
Between periods the host logs the period's row, checks it for non-finite values,
calls the callback and writes the checkpoints due. Before anything is built, the run's
folders are checked (jaxsac.runs): a new run never writes into another run's files.
"""

from __future__ import annotations

import logging
import os
import warnings
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from jaxsac import checkpoint, checks, compilation, memory, runs, sharding, tuned
from jaxsac.assembly import Assembly, TrainState, run_keys, validate
from jaxsac.config import SACConfig
from jaxsac.envs import EnvDataError, EnvFailureError
from jaxsac.host_loop import HostLoop, host_runner, stack_rows
from jaxsac.jax_loop import kept_jax_loop
from jaxsac.learner import LearnerState
from jaxsac.logger import RunLogger
from jaxsac.schedule import Schedule, num_periods

Callback = Callable[[dict[str, np.ndarray], TrainState], Any]
"""callback(row, state) after each log period: `row` is the period's metrics (numpy
scalars, or [seeds] per metric for several seeds; multi-agent metrics add an agent or
module axis) and `state` the TrainState at the period's end. `state` is valid during
the call only: the gymnasium loop donates its arrays to the next period, so copy what
you keep (`jax.tree.map(jnp.copy, ...)`). A truthy return stops the run after that
period; the state is checkpointed first when checkpoint_dir is set."""


class TrainResult(NamedTuple):
    """What `train` returns.

    state: the final TrainState (leading seed axis when several seeds were trained).
    metrics: dict of numpy arrays, leading axis = log periods ([periods, seeds] for seeds).
    config: the SACConfig of the run.
    log_dir: where metrics.csv, TensorBoard events and curve.png went (or None).
    env_restarts: gymnasium envs rebuilt after a fault during this call (0 for JAX envs).
    run_id: the run's id (jaxsac.runs), recorded in its log_dir and checkpoint_dir.
    resumed_from: the checkpoint step (env steps) a resumed run continued from, or None.
    """

    state: TrainState
    metrics: dict[str, np.ndarray]
    config: SACConfig
    log_dir: str | None
    env_restarts: int = 0
    run_id: str | None = None
    resumed_from: int | None = None


class Loop(Protocol):
    """What `train` needs from a loop (jaxsac.jax_loop.JaxLoop, jaxsac.host_loop.HostLoop).

    donates_state: run_chunk donates its input state to the device (it is unusable
        afterwards).
    env_restarts: envs rebuilt after a fault so far.
    assembly: the run's pieces.
    """

    donates_state: bool
    env_restarts: int
    assembly: Assembly

    def init(self, keys: jax.Array) -> TrainState: ...

    def state_shapes(self, keys: jax.Array) -> TrainState:
        """`init(keys)`'s jax.ShapeDtypeStructs, nothing allocated."""

    def run_chunk(self, state: TrainState, start: int, stop: int
                  ) -> tuple[TrainState, dict[str, Any]]: ...


def train(config: SACConfig, num_seeds: int = 1, progress: bool = True,
          mesh: jax.sharding.Mesh | None = None,
          callback: Callback | None = None) -> TrainResult:
    """Train `config` on any backend, with progress, logs, checkpoints and a callback.

    JAX envs run the jitted program one log period per call (identical to one
    `make_train` call for the same key); `num_seeds > 1` trains seeds
    `split(key(config.seed), num_seeds)` vmapped in one program. Gymnasium envs run a
    host loop (one seed) with the buffer on the device. Logs go to `config.log_dir`,
    checkpoints to `config.checkpoint_dir` (resumed from with `config.resume`); a new
    run refuses folders holding a previous run's files (jaxsac.runs). A resumed run
    says "resumed run R from step N" (printed with `progress`, logged to the "jaxsac"
    logger).

    Args:
        config: the run's settings.
        num_seeds: seeds trained together (JAX envs only; 1 for gymnasium envs).
        progress: show progress: a bar on a terminal, else (a batch job's log) one line
            per log period; False: nothing is printed.
        mesh: as for `make_train` for JAX envs; the gymnasium loop runs on one device,
            and a mesh of several devices or `data_shards > 1` is an error there.
        callback: `fn(period_metrics, state) -> stop` after each log period (see
            `Callback`).

    Returns:
        TrainResult: the final TrainState (leaves [num_seeds, ...] for several seeds)
        and the metrics rows, {name: [log periods, (num_seeds,) ...]}.

    Raises:
        ValueError: a config or argument no run can honour, naming it, before training.
        FileExistsError: a new run's log_dir or checkpoint_dir holds a previous run's
            files, or a resumed run's log_dir another run's logs.
        FileNotFoundError: resume=True, but checkpoint_dir holds no checkpoint.
    """
    checks.check_int("train", "num_seeds", num_seeds, 1)
    if callback is not None and not callable(callback):
        checks.fail("train", "callback", callback, "callable (row, state) -> stop")
    compilation.enable_default_cache()
    backend = validate(config)
    run = runs.check_run(config, "train")
    if backend == "jax":
        mesh = sharding.check_mesh(mesh, "train", config)
        config = sharding.resolve(config, mesh, "train")
        loop = kept_jax_loop(config, num_seeds, mesh)
        return run_log_periods(config, loop, run_keys(config, num_seeds), num_seeds,
                               progress, callback, run)
    if num_seeds != 1:
        raise ValueError(f"train: num_seeds={num_seeds} needs a JAX env; {config.env_id!r} "
                         "runs on gymnasium, one seed per process")
    _check_one_device(config, mesh)
    runner = host_runner(config)
    try:
        return run_log_periods(config, HostLoop(config, runner), jax.random.key(config.seed),
                               1, progress, callback, run)
    finally:
        runner.close()


def _check_one_device(config: SACConfig, mesh: jax.sharding.Mesh | None) -> None:
    """The gymnasium loop runs on one device with one data shard; errors otherwise."""
    if mesh is not None and sharding.check_mesh(mesh, "train", config).devices.size > 1:
        raise ValueError(f"train: mesh of {mesh.devices.size} devices is invalid for "
                         f"{config.env_id!r} on the gymnasium backend: the host loop runs on "
                         "one device; pass mesh=None or a one-device mesh")
    if config.num_data_shards > 1:
        raise ValueError(f"SACConfig.data_shards={config.data_shards} is invalid for "
                         f"{config.env_id!r} on the gymnasium backend: must be 1 or None (the "
                         "host loop runs one shard)")


_STATE_BYTES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""{loop: {num_seeds: (bytes of the state, of its replay buffer)}}: a loop kept between
`train` calls is measured (traced) once."""


def check_state_fits(loop: Loop, keys: jax.Array, num_seeds: int) -> None:
    """MemoryError naming the bytes and the settings to change when the state of
    `num_seeds` seeds would not fit in the devices' free memory (from its shapes alone:
    nothing is allocated)."""
    assembly = loop.assembly
    measured = _STATE_BYTES.setdefault(loop, {})
    if num_seeds not in measured:
        shapes = loop.state_shapes(keys)
        measured[num_seeds] = (memory.tree_bytes(shapes), memory.tree_bytes(shapes.buffer))
    total, buffer = measured[num_seeds]
    config = assembly.module_config
    devices = (list(assembly.placement.mesh.devices.flat) if assembly.placement is not None
               else jax.local_devices()[:1])
    memory.check_fits(
        "train", total, devices,
        f"{buffer / memory.GIB:.2f} GiB of it the replay buffer of buffer_capacity="
        f"{config.buffer_capacity} env steps, for {num_seeds} seed(s)",
        "lower buffer_capacity, or num_seeds; checkpoint_buffer and data_shards do not "
        "change it")


def run_log_periods(config: SACConfig, loop: Loop, keys: jax.Array, num_seeds: int,
                    progress: bool, callback: Callback | None = None,
                    run: runs.Run | None = None) -> TrainResult:
    """The log periods of a run from the host, one `loop.run_chunk` call each: resume,
    log, checkpoint, callback, and a stop on non-finite values (the last finite state is
    saved). `run`: the run `runs.check_run` found (checked here when None)."""
    checkpoints = CheckpointSchedule(config, run)
    run = checkpoints.run
    check_state_fits(loop, keys, num_seeds)
    state = checkpoints.resume(loop.init(keys))
    start = checkpoints.env_steps(state) // config.log_every
    first = jax.process_index() == 0  # on several hosts only the first one logs
    if run.resume_step is not None:
        _report(f"jaxsac: resumed run {run.run_id} from step {run.resume_step} of "
                f"{config.checkpoint_dir}", progress and first)
    runs.start_logs(config, run)
    logger = RunLogger(config.log_dir if first else None, config.total_env_steps, num_seeds,
                       progress and first, start_env_steps=start * config.log_every,
                       loggers=config.loggers, config=config.to_dict(), title=config.env_id,
                       solved_return=tuned.solved_return(config.env_id))
    rows = []
    periods = num_periods(Schedule.of(config))
    try:
        for period in range(start, periods):
            # The host loop donates its state to the device: keep a copy to save should
            # this period end in NaNs.
            previous = (jax.tree.map(jnp.copy, state) if loop.donates_state
                        and checkpoints.directory else state)
            try:
                new_state, period_rows = loop.run_chunk(state, period, period + 1)
            except (EnvFailureError, EnvDataError) as e:  # an env's fault: keep the run
                checkpoints.save(previous)
                raise type(e)(
                    f"{e}; the state at the start of log period {period} (env steps "
                    f"{period * config.log_every}) was saved{checkpoints.where()}") from e
            row = jax.tree.map(lambda x: x[0], jax.device_get(period_rows))
            if not all_finite(row, new_state.learner):
                checkpoints.save(previous)
                raise FloatingPointError(
                    f"non-finite losses or parameters in log period {period} (env steps "
                    f"{period * config.log_every}..{(period + 1) * config.log_every}); the "
                    f"last finite state was saved" + checkpoints.where())
            rows.append(row)
            logger.log(row)
            state = new_state
            try:
                stop = bool(callback is not None and callback(row, state))
            except Exception as e:  # the user's code: keep the run it was given
                checkpoints.save(state)
                e.add_note(f"jaxsac.train: the callback raised after log period {period}; "
                           f"the state it was given (env steps "
                           f"{(period + 1) * config.log_every}) was saved"
                           f"{checkpoints.where()}")
                raise
            checkpoints.maybe_save(state, last=stop or period + 1 == periods)
            checkpoints.maybe_save_best(state, row)
            if stop:
                break
    finally:
        logger.close()
    return TrainResult(state, stack_rows(rows), config, config.log_dir, loop.env_restarts,
                       run.run_id, run.resume_step)


def _report(message: str, show: bool) -> None:
    """`message` to the "jaxsac" logger, and printed when `show`."""
    logging.getLogger("jaxsac").info(message)
    if show:
        print(message, flush=True)


def all_finite(row: dict[str, Any], learner_state: LearnerState) -> bool:
    """Finite losses (they are NaN only before the first gradient step) and parameters."""
    learned = np.asarray(row["grad_steps"]) > 0
    losses_ok = all(not np.any(learned & ~np.isfinite(np.asarray(row[name])))
                    for name in ("qf_loss", "policy_loss", "alpha_loss"))
    params = (learner_state.actor_params, learner_state.critic_params, learner_state.log_alpha)
    return losses_ok and bool(_all_finite(params))


@jax.jit
def _all_finite(tree: Any) -> jax.Array:
    """Whether every element of every leaf is finite: one program for the whole tree (a
    check per leaf would compile one per leaf shape)."""
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


class CheckpointSchedule:
    """`train`'s use of jaxsac.checkpoint: resume, periodic and final saves, and the
    best evaluation's checkpoint (`keep_best`), all as checkpoints of `run` (checked
    with `runs.check_run` when None)."""

    def __init__(self, config: SACConfig, run: runs.Run | None = None):
        self.config = config
        self.directory = config.checkpoint_dir
        self.run = run or runs.check_run(config, "train")
        self._last_saved = -1
        self._best_return = -np.inf

    def where(self) -> str:
        return f" to {self.directory}" if self.directory else " (no checkpoint_dir set)"

    def resume(self, state: TrainState) -> TrainState:
        """The newest checkpoint's state when `config.resume` (else `state`), with the
        requested config's hyperparameters, as in an uninterrupted run."""
        if not (self.config.resume and self.directory):
            return state
        step = self.run.resume_step
        self._check_resumable(step)
        restored, _ = checkpoint.restore(self.directory, step, config=self.config, like=state)
        restored = restored.replace(
            learner=restored.learner.replace(hparams=state.learner.hparams))
        self._last_saved = self.env_steps(restored)
        if self.config.keep_best and runs.step_runs(self._best_dir()):
            with checkpoint.open_step(self._best_dir(), None, "train") as best:
                self._best_return = best.meta.get("eval_return", -np.inf)
        return restored

    def _check_resumable(self, step: int) -> None:
        """Errors for a resume that cannot stop at exactly total_env_steps."""
        where = f"train: the newest checkpoint in {self.directory} is at {step} env steps"
        total, every = self.config.total_env_steps, self.config.log_every
        if step > total:
            raise ValueError(f"{where}, beyond total_env_steps={total}: ask for at least "
                             f"{step} env steps to continue it, or use another checkpoint_dir")
        if step % every:
            raise ValueError(f"{where}, which is not a whole number of log periods of "
                             f"log_every={every}: resume with a log_every that divides {step} "
                             f"(and total_env_steps)")
        if step == total:
            warnings.warn(f"{where}, which is total_env_steps already: nothing to train",
                          stacklevel=4)

    def env_steps(self, state: TrainState) -> int:
        return int(np.max(jax.device_get(state.iteration))) * self.config.num_envs

    def maybe_save(self, state: TrainState, last: bool) -> None:
        every = self.config.checkpoint_every
        steps = self.env_steps(state)
        if last or (every and steps // every > max(self._last_saved, 0) // every):
            self.save(state)

    def save(self, state: TrainState) -> None:
        if not self.directory:
            return
        steps = self.env_steps(state)
        if steps == self._last_saved:
            return
        checkpoint.save(self.directory, state, self.config, steps, run_id=self.run.run_id)
        self._last_saved = steps

    def _best_dir(self) -> str:
        return os.path.join(self.directory, runs.BEST)

    def maybe_save_best(self, state: TrainState, row: dict[str, Any]) -> None:
        """With keep_best: `state` as the best checkpoint (one step, without the replay
        buffer) when the row's evaluation return (mean over seeds and agents, NaN
        dropped) beats the best so far."""
        returns = np.asarray(row["eval_return"], np.float64)
        returns = returns[np.isfinite(returns)]
        if not (self.config.keep_best and returns.size) or returns.mean() <= self._best_return:
            return
        self._best_return = float(returns.mean())
        checkpoint.save(self._best_dir(), state,
                        self.config.replace(max_to_keep=1, checkpoint_buffer=False),
                        self.env_steps(state), run_id=self.run.run_id,
                        eval_return=self._best_return)
