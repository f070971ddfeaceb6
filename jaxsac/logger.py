"""Run logging: progress, metrics through loggers (CSV, TensorBoard, wandb, MLflow) and a
learning-curve PNG.

Metrics arrive one log period at a time as a dict of scalars, or of arrays [seeds] when
several seeds train together; every seed gets its own CSV rows and its own tags
(`seed<i>/<name>`) elsewhere. Multi-agent runs add a trailing axis: per agent for
`PER_AGENT_METRICS` (columns `eval_return/agent_0`, ...), per module for the others
(`qf_loss/module_0`, ...). Each period also logs `TIMING_METRICS`, measured on the host.

A logger follows `Logger` and is chosen by name in `SACConfig.loggers`; "csv" and
"tensorboard" are built in, "wandb" and "mlflow" need their extras (`pip install -e
'.[wandb]'`, `'.[mlflow]'`), and `register_logger(name, factory)` adds one. Loggers
write only when the run has a log_dir.
"""

from __future__ import annotations

import csv
import importlib
import importlib.util
import math
import os
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any, Protocol

import jax
import numpy as np
import tqdm

from jaxsac import checks

CURVE_METRICS = ("eval_return", "episode_return_mean")
PER_AGENT_METRICS = ("eval_return", "episode_return_mean", "episode_length_mean",
                     "num_episodes")
"""Metrics whose trailing axis (multi-agent runs) is the agent axis; other metrics with a
trailing axis have a module axis."""
TIMING_METRICS = ("fps", "time_s", "compile_time_s")
"""fps: env steps (of one seed; the progress bar's count) per wall-clock second over the
period; time_s: seconds since the run's first period started; compile_time_s: seconds
XLA spent compiling in this process since then (JAX's backend-compile events)."""


class Logger(Protocol):
    """Where a run's metrics go, one call per log period.

    log(rows, env_steps): rows[i] is seed i's {metric: float} (finite or NaN: no
        episode ended, no gradient step yet) at `env_steps` env steps.
    close(): flush and release what it holds (the run ended or failed).
    """

    def log(self, rows: list[dict[str, float]], env_steps: int) -> None: ...

    def close(self) -> None: ...


LoggerFactory = Callable[[str, dict[str, Any], int], Logger]
"""(log_dir, the run's config as a dict, num_seeds) -> Logger."""


def flatten_metrics(metrics: dict[str, Any], num_seeds: int) -> dict[str, np.ndarray]:
    """Scalar columns: each metric's trailing agent or module axis becomes one column per
    entry (`name/agent_i`, `name/module_i`). Values stay [seeds] when num_seeds > 1."""
    flat = {}
    for name, value in metrics.items():
        value = np.asarray(value)
        if value.ndim <= (1 if num_seeds > 1 else 0):
            flat[name] = value
            continue
        label = "agent" if name in PER_AGENT_METRICS else "module"
        for i in range(value.shape[-1]):
            flat[f"{name}/{label}_{i}"] = value[..., i]
    return flat


def tagged(rows: list[dict[str, float]]) -> dict[str, float]:
    """One seed's rows as they are; several seeds' as `seed<i>/<name>`, all finite
    values but env_steps (the step of the tags)."""
    prefix = (lambda i: f"seed{i}/") if len(rows) > 1 else (lambda i: "")
    return {prefix(i) + name: value for i, row in enumerate(rows)
            for name, value in row.items() if name != "env_steps" and math.isfinite(value)}


class CsvLogger:
    """metrics.csv in log_dir: one row per seed and period, a `seed` column first."""

    def __init__(self, log_dir: str, config: dict[str, Any], num_seeds: int):
        self.path = os.path.join(log_dir, "metrics.csv")
        self._file = None
        self._writer: csv.DictWriter | None = None

    def log(self, rows: list[dict[str, float]], env_steps: int) -> None:
        for seed, row in enumerate(rows):
            row = {"seed": seed, **row}
            if self._writer is None:
                self._file = open(self.path, "a", newline="")  # noqa: SIM115 (closed in close())
                self._writer = csv.DictWriter(self._file, fieldnames=list(row))
                if self._file.tell() == 0:
                    self._writer.writeheader()
            self._writer.writerow(row)
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class TensorBoardLogger:
    """TensorBoard events in log_dir/tb (tensorboardX)."""

    def __init__(self, log_dir: str, config: dict[str, Any], num_seeds: int):
        from tensorboardX import SummaryWriter
        self._writer = SummaryWriter(os.path.join(log_dir, "tb"))

    def log(self, rows: list[dict[str, float]], env_steps: int) -> None:
        for name, value in tagged(rows).items():
            self._writer.add_scalar(name, value, env_steps)

    def close(self) -> None:
        self._writer.close()


def _optional(module: str, extra: str) -> Any:
    """The optional library `module`, or ImportError naming the extra that installs it."""
    if importlib.util.find_spec(module) is None:
        raise ImportError(f"SACConfig.loggers names {extra!r}, which needs {module}: "
                          f"pip install -e '.[{extra}]'")
    return importlib.import_module(module)


class WandbLogger:
    """A Weights & Biases run (files under log_dir/wandb): the config as its config, the
    env id as its name; project $WANDB_PROJECT, else "jaxsac"; WANDB_MODE=offline
    keeps it on disk."""

    def __init__(self, log_dir: str, config: dict[str, Any], num_seeds: int):
        wandb = _optional("wandb", "wandb")
        self._run = wandb.init(project=os.environ.get("WANDB_PROJECT", "jaxsac"), dir=log_dir,
                               config={**config, "num_seeds": num_seeds},
                               name=config.get("env_id"), reinit="create_new",
                               settings=wandb.Settings(console="off", silent=True))

    def log(self, rows: list[dict[str, float]], env_steps: int) -> None:
        self._run.log(tagged(rows), step=env_steps)

    def close(self) -> None:
        self._run.finish()


class MlflowLogger:
    """An MLflow run in experiment "jaxsac" (the config as its params, the env id as its
    name) at $MLFLOW_TRACKING_URI, else in a file store under log_dir/mlruns."""

    def __init__(self, log_dir: str, config: dict[str, Any], num_seeds: int):
        mlflow = _optional("mlflow", "mlflow")
        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if uri is None:  # MLflow keeps its file store working only on request
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            uri = "file://" + os.path.abspath(os.path.join(log_dir, "mlruns"))
        self._entities = importlib.import_module("mlflow.entities")
        self._client = mlflow.tracking.MlflowClient(tracking_uri=uri)
        experiment = self._client.get_experiment_by_name("jaxsac")
        experiment_id = (experiment.experiment_id if experiment is not None
                         else self._client.create_experiment("jaxsac"))
        self._run_id = self._client.create_run(experiment_id,
                                               run_name=config.get("env_id")).info.run_id
        params = {**config, "num_seeds": num_seeds}
        self._client.log_batch(self._run_id, params=[
            self._entities.Param(name, str(value)) for name, value in sorted(params.items())])

    def log(self, rows: list[dict[str, float]], env_steps: int) -> None:
        now = int(time.time() * 1000)
        self._client.log_batch(self._run_id, metrics=[
            self._entities.Metric(name, value, now, env_steps)
            for name, value in tagged(rows).items()])

    def close(self) -> None:
        self._client.set_terminated(self._run_id)


LOGGERS: dict[str, LoggerFactory] = {"csv": CsvLogger, "tensorboard": TensorBoardLogger,
                                     "wandb": WandbLogger, "mlflow": MlflowLogger}


def register_logger(name: str, factory: LoggerFactory) -> None:
    """Add a logger `SACConfig.loggers` can name: `factory(log_dir, config dict,
    num_seeds)` -> a `Logger`, built when a run with a log_dir starts."""
    if not isinstance(name, str) or not name:
        checks.fail("register_logger", "name", name, "a non-empty string")
    if not callable(factory):
        checks.fail("register_logger", "factory", factory,
                    "callable (log_dir, config, num_seeds) -> Logger")
    LOGGERS[name] = factory


def check_loggers(names: tuple[str, ...]) -> None:
    """ValueError naming SACConfig.loggers when one is not a known logger."""
    unknown = [name for name in names if name not in LOGGERS]
    if unknown:
        checks.fail("SACConfig", "loggers", names, f"names from {sorted(LOGGERS)} (unknown: "
                    f"{unknown}; add one with jaxsac.logger.register_logger)")


_COMPILE_SECONDS = [0.0]
"""Seconds of XLA compilation in this process so far (JAX's monitoring events)."""


def _count_compilation(event: str, duration: float, **kwargs: Any) -> None:
    if event == "/jax/core/compile/backend_compile_duration":
        _COMPILE_SECONDS[0] += duration


jax.monitoring.register_event_duration_secs_listener(_count_compilation)


class RunLogger:
    """Writes each period's metrics to the loggers; `close()` draws the learning curves.

    log_dir: folder for the loggers' files and curve.png; None logs only progress.
    progress: a progress bar on a terminal; elsewhere (a batch job's log file) one line
        per log period; False: nothing printed.
    loggers: names in LOGGERS. config: the run's config as a dict (for wandb and MLflow).
    title: the curve's title (the env id); solved_return: a dashed line on the return
        curves (the tuned example's bar), None: none.
    """

    def __init__(self, log_dir: str | None, total_env_steps: int, num_seeds: int = 1,
                 progress: bool = True, start_env_steps: int = 0, *,
                 loggers: tuple[str, ...] = ("csv", "tensorboard"),
                 config: dict[str, Any] | None = None, title: str | None = None,
                 solved_return: float | None = None):
        check_loggers(loggers)
        self.log_dir = log_dir
        self.num_seeds = num_seeds
        self.title, self.solved_return = title, solved_return
        self.loggers: list[Logger] = []
        if log_dir is not None:
            os.makedirs(log_dir, exist_ok=True)
            self.loggers = [LOGGERS[name](log_dir, config or {}, num_seeds) for name in loggers]
        self._total = total_env_steps
        self._lines = progress and not sys.stderr.isatty()
        self._bar = tqdm.tqdm(total=total_env_steps, initial=start_env_steps, unit="step",
                              disable=not progress or self._lines, dynamic_ncols=True,
                              smoothing=0.1)
        self._start = self._last = time.monotonic()
        self._last_steps = start_env_steps
        self._compile_start = _COMPILE_SECONDS[0]

    def timing(self, env_steps: int) -> dict[str, float]:
        """TIMING_METRICS at the end of a period at `env_steps`."""
        now = time.monotonic()
        fps = (env_steps - self._last_steps) / max(now - self._last, 1e-9)
        self._last, self._last_steps = now, env_steps
        return {"fps": fps, "time_s": now - self._start,
                "compile_time_s": _COMPILE_SECONDS[0] - self._compile_start}

    def log(self, metrics: dict[str, Any]) -> None:
        per_seed = {k: np.broadcast_to(v, (self.num_seeds,))
                    for k, v in flatten_metrics(metrics, self.num_seeds).items()}
        env_steps = int(per_seed["env_steps"][0])
        timing = self.timing(env_steps)
        rows = [{**{k: v[seed].item() for k, v in per_seed.items()}, **timing}
                for seed in range(self.num_seeds)]
        for logger in self.loggers:
            logger.log(rows, env_steps)
        evaluation = _mean_text(metrics["eval_return"])
        training = _mean_text(metrics["episode_return_mean"])
        if self._lines:
            print(f"jaxsac: {env_steps}/{self._total} env steps  eval_return {evaluation}  "
                  f"train_return {training}  fps {timing['fps']:.0f}  "
                  f"time {timing['time_s']:.1f}s", flush=True)
        self._bar.update(env_steps - self._bar.n)
        self._bar.set_postfix(eval_return=evaluation, train_return=training)

    def close(self) -> str | None:
        """Finish the bar and the loggers; draw curve.png from metrics.csv (when the
        "csv" logger wrote it). Returns its path."""
        self._bar.close()
        for logger in self.loggers:
            logger.close()
        if self.log_dir is None:
            return None
        return plot_curves(os.path.join(self.log_dir, "metrics.csv"),
                           os.path.join(self.log_dir, "curve.png"), self.title,
                           self.solved_return)


def _read_columns(csv_path: str) -> tuple[list[dict[str, str]], list[int]]:
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    return rows, sorted({int(r["seed"]) for r in rows})


def plot_curves(csv_path: str, png_path: str, title: str | None = None,
                solved_return: float | None = None) -> str | None:
    """curve.png from metrics.csv (`curve_figure`); None when there is no CSV."""
    if not os.path.exists(csv_path):
        return None
    import matplotlib.pyplot as plt

    fig = curve_figure(csv_path, title, solved_return)
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return png_path


def curve_figure(csv_path: str, title: str | None = None,
                 solved_return: float | None = None) -> Any:
    """A matplotlib Figure of the evaluation and training returns against env steps (one
    line per agent in multi-agent runs): one seed's line, or the mean over seeds with the
    band between the lowest and the highest seed. `title` (the env id) heads the figure;
    `solved_return` is drawn as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, seeds = _read_columns(csv_path)
    fig, axes = plt.subplots(1, len(CURVE_METRICS), figsize=(11, 4), sharey=True)
    for ax, name in zip(axes, CURVE_METRICS, strict=True):
        columns = [c for c in (rows[0] if rows else ()) if c == name or c.startswith(name + "/")]
        for column in columns:
            steps, values = _by_seed(rows, seeds, column)
            agent = column[len(name) + 1:]
            if len(seeds) == 1:
                ax.plot(steps, values[0], label=agent or "seed " + str(seeds[0]), alpha=0.8)
                continue
            with warnings.catch_warnings():  # a period where no seed ended an episode
                warnings.simplefilter("ignore", RuntimeWarning)
                mean, low, high = (np.nanmean(values, 0), np.nanmin(values, 0),
                                   np.nanmax(values, 0))
            line, = ax.plot(steps, mean, alpha=0.9,
                            label=f"mean of {len(seeds)} seeds" + (f" {agent}" if agent else ""))
            ax.fill_between(steps, low, high, alpha=0.2, color=line.get_color(), linewidth=0)
        if solved_return is not None:
            ax.axhline(solved_return, color="black", linestyle="--", linewidth=1,
                       label=f"solved ({solved_return:g})")
        ax.set_xlabel("env steps")
        ax.set_title(name)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("return")
    axes[0].legend(fontsize=7)
    if title:
        fig.suptitle(title + (f" ({len(seeds)} seeds; band: lowest to highest)"
                              if len(seeds) > 1 else ""))
    fig.tight_layout()
    return fig


def _by_seed(rows: list[dict[str, str]], seeds: list[int], column: str
             ) -> tuple[np.ndarray, np.ndarray]:
    """(env steps [T], values [seeds, T]) of `column`: the steps every seed logged."""
    per_seed = [{int(r["env_steps"]): float(r[column]) for r in rows if int(r["seed"]) == s}
                for s in seeds]
    steps = sorted(set.intersection(*(set(p) for p in per_seed)))
    return np.asarray(steps), np.asarray([[p[t] for t in steps] for p in per_seed])


def _mean_text(values: Any) -> str:
    """The mean of the finite values, to one decimal; "nan" when there are none (no
    episode ended in the period)."""
    finite = np.asarray(values, np.float64)
    finite = finite[np.isfinite(finite)]
    return f"{finite.mean():.1f}" if finite.size else "nan"
