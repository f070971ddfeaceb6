"""Run logging: every logger (CSV, TensorBoard, wandb offline, MLflow's file store) read
back from its own files against the run's metrics; the timing metrics; one line per log
period off a terminal; the learning curve's title, mean, spread over seeds and solved
line."""

from __future__ import annotations

import csv
import glob
import importlib.util
import json

import jax
import numpy as np
import pytest

import jaxsac
from jaxsac import logger as logger_module
from tests.support.helpers import TINY
from tests.support.log_readers import tensorboard_scalars, wandb_history

STEPS = [200, 400, 600]  # TINY's log periods (its programs are test_train.py's)


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory):
    """Two vmapped seeds logged by all four loggers; what plot_curves was asked for, and
    the seconds JAX compiled during the run, measured here."""
    log_dir = tmp_path_factory.mktemp("run")
    patch = pytest.MonkeyPatch()
    patch.setenv("WANDB_MODE", "offline")
    patch.delenv("MLFLOW_TRACKING_URI", raising=False)
    patch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    curves = []

    def spy(*args):
        curves.append(args)
        return plot_curves(*args)
    plot_curves = logger_module.plot_curves
    patch.setattr(logger_module, "plot_curves", spy)
    compiled = [0.0]

    def count(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiled[0] += duration
    jax.monitoring.register_event_duration_secs_listener(count)
    config = jaxsac.SACConfig(**TINY, log_dir=str(log_dir),
                              loggers=("csv", "tensorboard", "wandb", "mlflow"))
    try:
        result = jaxsac.train(config, num_seeds=2, progress=False)
    finally:
        jax.monitoring.unregister_event_duration_listener(count)
        patch.undo()
    return result, log_dir, curves, compiled[0]


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_csv_rows_hold_every_seed_s_metrics_and_the_timing(logged_run):
    result, log_dir, _, compiled = logged_run
    rows = read_csv(log_dir / "metrics.csv")
    assert [(int(r["seed"]), int(r["env_steps"])) for r in rows] == [
        (seed, step) for step in STEPS for seed in (0, 1)]
    logged = np.array([float(r["eval_return"]) for r in rows]).reshape(3, 2)
    np.testing.assert_allclose(logged, result.metrics["eval_return"], rtol=1e-6)
    time_s = np.array([float(r["time_s"]) for r in rows[::2]])
    fps = np.array([float(r["fps"]) for r in rows[::2]])
    # fps: the period's env steps over its seconds, which time_s counts from the start.
    np.testing.assert_allclose(fps, 200 / np.diff(time_s, prepend=0.0), rtol=1e-6)
    compile_s = np.array([float(r["compile_time_s"]) for r in rows[::2]])
    assert np.all(np.diff(compile_s) >= 0) and 0 <= compile_s[0]
    assert compile_s[-1] <= compiled + 1e-9 and compile_s[-1] <= time_s[-1]


def test_tensorboard_wandb_and_mlflow_read_back_the_run_s_metrics(logged_run):
    result, log_dir, _, _ = logged_run
    expected = {f"seed{s}/eval_return": dict(zip(STEPS, result.metrics["eval_return"][:, s],
                                                 strict=True)) for s in (0, 1)}
    tb = tensorboard_scalars(str(log_dir / "tb"))
    for tag, values in expected.items():
        assert sorted(tb[tag]) == STEPS
        np.testing.assert_allclose([tb[tag][t] for t in STEPS], [values[t] for t in STEPS],
                                   rtol=1e-6)
    assert sorted(tb["seed1/fps"]) == STEPS

    (run_file,) = glob.glob(str(log_dir / "wandb" / "offline-run-*" / "run-*.wandb"))
    history = wandb_history(run_file)
    assert [int(row["_step"]) for row in history] == STEPS
    for tag, values in expected.items():
        np.testing.assert_allclose([json.loads(row[tag]) for row in history],
                                   [values[t] for t in STEPS], rtol=1e-6)

    from mlflow.tracking import MlflowClient
    client = MlflowClient(tracking_uri=f"file://{log_dir / 'mlruns'}")
    (run,) = client.search_runs([client.get_experiment_by_name("jaxsac").experiment_id])
    assert run.data.params["env_id"] == "Pendulum-v1" and run.data.params["num_seeds"] == "2"
    for tag, values in expected.items():
        history = client.get_metric_history(run.info.run_id, tag)
        assert [m.step for m in history] == STEPS
        np.testing.assert_allclose([m.value for m in history], [values[t] for t in STEPS],
                                   rtol=1e-6)
    assert run.info.status == "FINISHED"


def test_the_curve_has_the_env_id_the_seeds_mean_and_spread_and_the_solved_line(logged_run):
    result, log_dir, curves, _ = logged_run
    csv_path, png_path, title, solved = curves[0]
    assert (title, solved) == ("Pendulum-v1", jaxsac.tuned.solved_return("Pendulum-v1"))
    assert solved == -250.0
    fig = logger_module.curve_figure(csv_path, title, solved)
    assert fig._suptitle.get_text().startswith("Pendulum-v1 (2 seeds")
    evaluation = fig.axes[0]
    mean_line, solved_line = evaluation.lines
    returns = result.metrics["eval_return"]  # [periods, seeds]
    np.testing.assert_array_equal(mean_line.get_xdata(), STEPS)
    np.testing.assert_allclose(mean_line.get_ydata(), returns.mean(1), rtol=1e-6)
    band = evaluation.collections[0].get_paths()[0].vertices[:, 1]
    np.testing.assert_allclose([band.min(), band.max()], [returns.min(), returns.max()],
                               rtol=1e-6)
    np.testing.assert_array_equal(solved_line.get_ydata(), [-250.0, -250.0])
    image = __import__("matplotlib.pyplot").pyplot.imread(png_path)
    assert image.shape[:2] == (400, 1100) and image[..., :3].std() > 0.05


def test_a_registered_logger_and_a_line_per_log_period_off_a_terminal(tmp_path, capsys):
    seen = []

    class Recorder:
        def __init__(self, log_dir, config, num_seeds):
            seen.append((log_dir, config["env_id"], num_seeds))

        def log(self, rows, env_steps):
            seen.append((env_steps, rows[0]["eval_return"], sorted(rows[0])))

        def close(self):
            seen.append("closed")

    logger_module.register_logger("recorder", Recorder)
    try:
        config = jaxsac.SACConfig(**TINY, loggers=("recorder",), log_dir=str(tmp_path))
        result = jaxsac.train(config, progress=True)
    finally:
        logger_module.LOGGERS.pop("recorder")
    names = sorted([*result.metrics, *logger_module.TIMING_METRICS])
    assert seen == [(str(tmp_path), "Pendulum-v1", 1),
                    *[(step, r, names) for step, r in zip(STEPS, result.metrics["eval_return"],
                                                          strict=True)], "closed"]
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("jaxsac:")]
    assert [line.split()[1] for line in lines] == ["200/600", "400/600", "600/600"]
    assert all(" eval_return " in line and " fps " in line for line in lines)
    assert not (tmp_path / "metrics.csv").exists()  # only the loggers named write


def test_unknown_loggers_and_missing_extras_are_named(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"SACConfig.loggers=\('csv', 'nope'\) is invalid: "
                       r"must be names from \['csv', 'mlflow', 'tensorboard', 'wandb'\]"):
        jaxsac.train(jaxsac.SACConfig(**TINY, loggers=("csv", "nope")), progress=False)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "wandb" else find_spec(name, *args))
    with pytest.raises(ImportError, match=r"pip install -e '.\[wandb\]'"):
        logger_module.RunLogger(str(tmp_path), 100, loggers=("wandb",), progress=False)
