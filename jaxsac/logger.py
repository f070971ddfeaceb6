"""Run logging: a progress bar, metrics.csv, TensorBoard events and a learning-curve PNG.

Metrics arrive one log period at a time as a dict of scalars, or of arrays [seeds] when
several seeds train together; every seed gets its own CSV rows and TensorBoard tags.
Multi-agent runs add a trailing axis: per agent for `PER_AGENT_METRICS` (columns
`eval_return/agent_0`, ...), per module for the others (`qf_loss/module_0`, ...).
"""

from __future__ import annotations

import csv
import os
from typing import Any

import numpy as np
import tqdm

CURVE_METRICS = ("eval_return", "episode_return_mean")
PER_AGENT_METRICS = ("eval_return", "episode_return_mean", "episode_length_mean",
                     "num_episodes")
"""Metrics whose trailing axis (multi-agent runs) is the agent axis; other metrics with a
trailing axis have a module axis."""


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


class RunLogger:
    """Writes each period's metrics; `close()` draws the learning curves.

    log_dir: folder for metrics.csv, TensorBoard events (tb/) and curve.png; None logs
        only to the progress bar.
    """

    def __init__(self, log_dir: str | None, total_env_steps: int, num_seeds: int = 1,
                 progress: bool = True, start_env_steps: int = 0):
        self.log_dir = log_dir
        self.num_seeds = num_seeds
        self._csv_file = None
        self._csv: csv.DictWriter | None = None
        self._tb = None
        if log_dir is not None:
            os.makedirs(log_dir, exist_ok=True)
            from tensorboardX import SummaryWriter
            self._tb = SummaryWriter(os.path.join(log_dir, "tb"))
        self._bar = tqdm.tqdm(total=total_env_steps, initial=start_env_steps, unit="step",
                              disable=not progress, dynamic_ncols=True, smoothing=0.1)

    def log(self, metrics: dict[str, Any]) -> None:
        per_seed = {k: np.broadcast_to(v, (self.num_seeds,))
                    for k, v in flatten_metrics(metrics, self.num_seeds).items()}
        env_steps = int(per_seed["env_steps"][0])
        for seed in range(self.num_seeds):
            row = {"seed": seed, **{k: v[seed].item() for k, v in per_seed.items()}}
            self._write_csv(row)
            if self._tb is not None:
                prefix = f"seed{seed}/" if self.num_seeds > 1 else ""
                for name, value in row.items():
                    if name not in ("seed", "env_steps") and np.isfinite(value):
                        self._tb.add_scalar(prefix + name, value, env_steps)
        self._bar.update(env_steps - self._bar.n)
        self._bar.set_postfix(eval_return=_mean_text(metrics["eval_return"]),
                              train_return=_mean_text(metrics["episode_return_mean"]))

    def _write_csv(self, row: dict[str, Any]) -> None:
        if self.log_dir is None:
            return
        if self._csv is None:
            path = os.path.join(self.log_dir, "metrics.csv")
            self._csv_file = open(path, "a", newline="")  # noqa: SIM115 (closed in close())
            self._csv = csv.DictWriter(self._csv_file, fieldnames=list(row))
            if self._csv_file.tell() == 0:
                self._csv.writeheader()
        self._csv.writerow(row)
        self._csv_file.flush()

    def close(self) -> str | None:
        """Finish the bar and files; draw curve.png from metrics.csv. Returns its path."""
        self._bar.close()
        if self._tb is not None:
            self._tb.close()
        if self._csv_file is not None:
            self._csv_file.close()
        if self.log_dir is None:
            return None
        return plot_curves(os.path.join(self.log_dir, "metrics.csv"),
                           os.path.join(self.log_dir, "curve.png"))


def plot_curves(csv_path: str, png_path: str) -> str | None:
    """Evaluation and training returns against env steps, one line per seed (and per
    agent in multi-agent runs)."""
    if not os.path.exists(csv_path):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    fig, axes = plt.subplots(1, len(CURVE_METRICS), figsize=(11, 4), sharey=True)
    for ax, name in zip(axes, CURVE_METRICS, strict=True):
        columns = [c for c in (rows[0] if rows else ()) if c == name or c.startswith(name + "/")]
        for seed in sorted({int(r["seed"]) for r in rows}):
            mine = [r for r in rows if int(r["seed"]) == seed]
            for column in columns:
                agent = column[len(name) + 1:]
                ax.plot([int(r["env_steps"]) for r in mine], [float(r[column]) for r in mine],
                        label=f"seed {seed}" + (f" {agent}" if agent else ""), alpha=0.8)
        ax.set_xlabel("env steps")
        ax.set_title(name)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("return")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return png_path


def _mean_text(values: Any) -> str:
    """The mean of the finite values, to one decimal; "nan" when there are none (no
    episode ended in the period)."""
    finite = np.asarray(values, np.float64)
    finite = finite[np.isfinite(finite)]
    return f"{finite.mean():.1f}" if finite.size else "nan"
