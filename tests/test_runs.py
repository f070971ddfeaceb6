"""Runs kept apart (jaxsac.runs): a new run refuses another run's folders, checkpoint
folders record their run, resume says what it does, load_policy finds a run's
checkpoints from its run or step folder, and keep_best keeps the best evaluation's
checkpoint. The runs are tiny (tests.support.helpers.TINY), so they share their
compiled programs with tests/test_train.py."""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxsac
from jaxsac import checkpoint, runs
from tests.support.helpers import TINY


def steps_in(directory: Path) -> list[int]:
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def csv_steps(log_dir: Path) -> list[int]:
    with open(log_dir / "metrics.csv", newline="") as f:
        return [int(row["env_steps"]) for row in csv.DictReader(f)]


def folder_state(directory: Path) -> dict[str, bytes]:
    """Every file under `directory` with its bytes."""
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """A 600-step run in its run folder: logs, checkpoints every 200 steps, the best."""
    folder = tmp_path_factory.mktemp("first") / "run"
    config = jaxsac.SACConfig(**TINY, log_dir=str(folder),
                              checkpoint_dir=str(folder / "checkpoints"),
                              checkpoint_every=200, max_to_keep=5, keep_best=True)
    result = jaxsac.train(config, progress=False)
    return config, result, folder


def copy_run(first_run, target: Path) -> jaxsac.SACConfig:
    """The first run's folder copied to `target`; its config pointed there."""
    config, _, folder = first_run
    shutil.copytree(folder, target)
    return config.replace(log_dir=str(target), checkpoint_dir=str(target / "checkpoints"))


def test_each_folder_and_each_checkpoint_records_the_run(first_run):
    config, result, folder = first_run
    assert result.run_id and result.resumed_from is None
    assert json.loads((folder / "run.json").read_text())["run_id"] == result.run_id
    assert runs.read_record(folder / "checkpoints")["run_id"] == result.run_id
    assert runs.step_runs(str(folder / "checkpoints")) == {result.run_id: [200, 400, 600]}


def test_a_new_run_refuses_the_folders_of_a_previous_run_and_leaves_them_as_they_are(
        first_run, tmp_path):
    config = copy_run(first_run, tmp_path / "run")
    before = folder_state(tmp_path / "run")
    for other in (config, config.replace(seed=1), config.replace(log_dir=None),
                  config.replace(checkpoint_dir=None, checkpoint_every=0, keep_best=False)):
        with pytest.raises(FileExistsError, match=r"a new run, but .* holds the "
                           r"(checkpoints|logs) of run .*resume=True.*--overwrite"):
            jaxsac.train(other, progress=False)
    assert folder_state(tmp_path / "run") == before  # no row, event file or step added
    # Cleared, the folders take a new run (the run's own files only are deleted).
    (tmp_path / "run" / "notes.txt").write_text("mine")
    deleted = runs.clear(config.log_dir, config.checkpoint_dir)
    assert len(deleted) == 4 + 5  # run.json, metrics.csv, curve.png, tb; 3 steps, best, run.json
    assert sorted(os.listdir(tmp_path / "run")) == ["checkpoints", "notes.txt"]
    runs.check_run(config, "train")


def test_saving_another_run_into_a_checkpoint_folder_is_an_error(first_run, tmp_path):
    config, result, folder = first_run
    directory = tmp_path / "checkpoints"
    shutil.copytree(folder / "checkpoints", directory)
    another_key = result.state.replace(key=jax.random.key(1))
    with pytest.raises(FileExistsError, match=rf"holds the checkpoints of run {result.run_id} "
                       r"\(steps \[200, 400, 600\]\), not of this state \(its key differs"):
        checkpoint.save(directory, another_key, config, 800)
    with pytest.raises(FileExistsError, match=r"not of run other-run"):
        checkpoint.save(directory, result.state, config, 800, run_id="other-run")
    assert steps_in(directory) == [200, 400, 600]
    # The same run's state (its key) is saved as that run's.
    checkpoint.save(directory, result.state, config, 800)
    assert runs.step_runs(str(directory)) == {result.run_id: [200, 400, 600, 800]}


def test_load_policy_on_a_folder_of_several_runs_is_an_error_naming_them(first_run, tmp_path):
    config, result, folder = first_run
    other = tmp_path / "other"
    checkpoint.save(other, result.state.replace(key=jax.random.key(1)), config, 500)
    mixed = tmp_path / "mixed"
    shutil.copytree(folder / "checkpoints", mixed)
    shutil.copytree(other / "500", mixed / "500")
    [other_run] = set(runs.step_runs(str(other)))
    with pytest.raises(ValueError, match=rf"holds the checkpoints of 2 runs \(run "
                       rf"{result.run_id}: steps \[200, 400, 600\]; run {other_run}: steps "
                       r"\[500\]\).*pass step=\.\.\."):
        jaxsac.load_policy(mixed)
    with pytest.raises(ValueError, match="2 runs"):
        checkpoint.restore(mixed)
    assert jaxsac.load_policy(mixed, step=500).step == 500  # a step names one run


def test_resume_says_from_which_step_and_rewrites_no_row_twice(first_run, tmp_path, capsys):
    """A run folder whose newest checkpoint (600) was lost: the resumed run continues
    from 400, and metrics.csv ends with one row per log period."""
    config = copy_run(first_run, tmp_path / "run")
    _, first, _ = first_run
    shutil.rmtree(tmp_path / "run" / "checkpoints" / "600")
    assert csv_steps(tmp_path / "run") == [200, 400, 600]
    result = jaxsac.train(config.replace(resume=True, total_env_steps=800), progress=True)
    assert f"jaxsac: resumed run {first.run_id} from step 400 of" in capsys.readouterr().out
    assert (result.run_id, result.resumed_from) == (first.run_id, 400)
    assert result.metrics["env_steps"].tolist() == [600, 800]
    assert csv_steps(tmp_path / "run") == [200, 400, 600, 800]
    # Bit for bit the first run's period from 400 to 600 (JAX envs).
    assert result.metrics["eval_return"][0] == first.metrics["eval_return"][2]
    # The best evaluation of the whole run, its first part included.
    returns = np.concatenate([first.metrics["eval_return"][:2], result.metrics["eval_return"]])
    best = jaxsac.load_policy(config.log_dir, best=True)
    assert best.step == 200 * (1 + int(np.argmax(returns)))
    # At total_env_steps already: nothing to train, and nothing fails.
    with pytest.warns(UserWarning, match="nothing to train"):
        again = jaxsac.train(config.replace(resume=True, total_env_steps=800), progress=False)
    assert again.metrics == {} and again.resumed_from == 800


def test_resume_without_a_checkpoint_is_an_error(tmp_path):
    config = jaxsac.SACConfig(**TINY, checkpoint_dir=str(tmp_path / "mistyped"), resume=True)
    with pytest.raises(FileNotFoundError, match=r"resume=True, but checkpoint_dir=.*mistyped' "
                       r"holds no checkpoint \(no such directory\).*--resume-if-present"):
        jaxsac.train(config, progress=False)
    (tmp_path / "mistyped").mkdir()
    with pytest.raises(FileNotFoundError, match=r"\(empty directory\)"):
        jaxsac.train(config, progress=False)
    assert not os.listdir(tmp_path / "mistyped")


def test_a_resumed_run_refuses_another_run_s_log_dir(first_run, tmp_path):
    config = copy_run(first_run, tmp_path / "run")
    runs.write_record(tmp_path / "logs", {"run_id": "another"})
    with pytest.raises(FileExistsError, match=r"log_dir=.* holds the logs of run another, not "
                       r"of run"):
        jaxsac.train(config.replace(resume=True, log_dir=str(tmp_path / "logs")),
                     progress=False)


def test_load_policy_takes_a_run_folder_or_a_step_folder(first_run, tmp_path):
    config, _, folder = first_run
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    newest = jaxsac.load_policy(folder / "checkpoints")
    assert jaxsac.load_policy(folder).step == newest.step == 600  # the run folder
    step_folder = jaxsac.load_policy(folder / "checkpoints" / "400")
    assert step_folder.step == 400
    np.testing.assert_array_equal(step_folder(obs),
                                  jaxsac.load_policy(folder / "checkpoints", step=400)(obs))
    with pytest.raises(ValueError, match=r"step=200 is invalid for the step folder .*400: "
                       r"must be None or 400"):
        jaxsac.load_policy(folder / "checkpoints" / "400", step=200)
    # A run folder moved elsewhere still finds its checkpoints (run.json names them
    # relative to it); a folder with one checkpoint folder finds it, one with several
    # names them.
    shutil.copytree(folder, tmp_path / "moved")
    assert jaxsac.load_policy(tmp_path / "moved").step == 600
    shutil.copytree(folder / "checkpoints", tmp_path / "runs" / "a")
    assert jaxsac.load_policy(tmp_path / "runs").step == 600
    shutil.copytree(folder / "checkpoints", tmp_path / "runs" / "b")
    with pytest.raises(FileNotFoundError, match=r"no checkpoint in .*runs; its folders "
                       r"\[.*a', .*b'\] hold checkpoints: pass one of them"):
        jaxsac.load_policy(tmp_path / "runs")


def test_keep_best_keeps_the_best_evaluation_s_checkpoint(first_run, tmp_path):
    config, result, folder = first_run
    returns = result.metrics["eval_return"]
    best_step = int(result.metrics["env_steps"][np.argmax(returns)])
    assert steps_in(folder / "checkpoints" / "best") == [best_step]
    best = jaxsac.load_policy(folder, best=True)
    assert best.step == best_step
    obs = np.random.default_rng(1).normal(size=(7, 3)).astype(np.float32)
    np.testing.assert_array_equal(best(obs), jaxsac.load_policy(folder, step=best_step)(obs))
    with checkpoint.open_step(folder / "checkpoints" / "best", None, "test") as opened:
        assert opened.meta["eval_return"] == float(np.max(returns))
        assert not opened.meta["buffer_saved"]
    with pytest.raises(ValueError, match="step=200 is invalid: must be None with best=True"):
        jaxsac.load_policy(folder, step=200, best=True)
    shutil.copytree(folder / "checkpoints", tmp_path / "no_best",
                    ignore=shutil.ignore_patterns("best"))
    with pytest.raises(FileNotFoundError, match=r"no best checkpoint in .*: train with "
                       r"keep_best=True \(CLI: --keep-best\)"):
        jaxsac.load_policy(tmp_path / "no_best", best=True)
