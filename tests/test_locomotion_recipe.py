"""The FastSAC / FastTD3 recipe's tuned examples for Playground's humanoids: the four
tasks share one recipe, its CPU-sized entry is that recipe cut in size only, and the
CPU-sized T1 run with domain randomization trains, saves, restores and resumes bit for
bit (against the uninterrupted run)."""

from __future__ import annotations

import json
import shutil
from importlib import resources

import jax
import numpy as np
import pytest

import jaxsac
from jaxsac import checkpoint
from tests.support.helpers import leaves_equal

RECIPE_TASKS = ("T1JoystickFlatTerrain", "T1JoystickRoughTerrain", "G1JoystickFlatTerrain",
                "G1JoystickRoughTerrain")
CPU_ID = "playground/T1JoystickFlatTerrain-cpu"
SIZE_FIELDS = {"num_envs", "batch_size", "utd_ratio", "hidden_sizes", "total_env_steps",
               "log_every", "learning_starts", "buffer_capacity", "eval_episodes"}
"""What the CPU-sized entry may change: the run's size, nothing of the recipe."""


def _stored(tuned_id: str) -> dict:
    """The tuned file of `tuned_id` as stored (its note included)."""
    path = resources.files("jaxsac.tuned").joinpath(*f"{tuned_id}.json".split("/"))
    return json.loads(path.read_text())


def test_the_humanoid_tasks_share_one_recipe():
    """The four files differ in their env id and the published figure their note
    cites; each is listed, and names its sources and what it leaves out."""
    values = {task: jaxsac.tuned.tuned_values(f"playground/{task}") for task in RECIPE_TASKS}
    recipe = {k: v for k, v in values[RECIPE_TASKS[0]].items() if k != "env_id"}
    for task, stored in values.items():
        assert f"playground/{task}" in jaxsac.tuned.available()
        assert stored == {**recipe, "env_id": f"playground/{task}"}
        note = _stored(f"playground/{task}")["_about"]
        for source in ("github.com/younggyoseo/FastTD3", "FastSAC", "asymmetric",
                       "Not carried over"):
            assert source in note, (task, source)
    config = jaxsac.tuned("playground/T1JoystickFlatTerrain")
    assert round(config.utd_ratio * config.num_envs) == 8  # gradient steps per iteration
    assert config.critic == "categorical" and config.domain_randomization
    assert config.normalize_obs and config.obs_keys is None  # both entries kept
    assert config.actor_obs_keys == ("state",)
    assert config.critic_obs_keys == ("privileged_state",)


def test_the_cpu_entry_is_the_t1_recipe_cut_in_size():
    gpu = jaxsac.tuned.tuned_values("playground/T1JoystickFlatTerrain")
    cpu = jaxsac.tuned.tuned_values(CPU_ID)
    assert set(gpu) == set(cpu)
    changed = {k for k in gpu if gpu[k] != cpu[k]}
    assert changed <= SIZE_FIELDS, changed - SIZE_FIELDS
    small, large = jaxsac.tuned(CPU_ID), jaxsac.tuned("playground/T1JoystickFlatTerrain")
    # The same gradient steps per iteration, so the actor's every-4th falls alike.
    assert round(small.utd_ratio * small.num_envs) == round(large.utd_ratio * large.num_envs)
    assert small.num_envs < large.num_envs and small.batch_size < large.batch_size
    assert CPU_ID in jaxsac.tuned.available()
    assert "CPU" in _stored(CPU_ID)["_about"]


def _finite_learning(metrics: dict) -> None:
    """Every period's losses are finite where it took gradient steps (all but none here),
    and every evaluation return is."""
    assert (metrics["grad_steps"] > 0).all()
    for name in ("qf_loss", "policy_loss", "alpha_loss", "eval_return"):
        assert np.isfinite(metrics[name]).all(), name


def _models(state) -> list[np.ndarray]:
    """The drawn leaves of each env's physics model, [num_envs, ...] each."""
    return [np.asarray(leaf) for leaf in jax.tree.leaves(state.runner.env_state.env_state.model)]


@pytest.mark.long  # 810 s on 2 CPU cores shared with other jobs (load average 6-8)
def test_the_cpu_recipe_trains_saves_restores_and_resumes_bit_for_bit(tmp_path):
    """Four log periods of the CPU-sized T1 recipe with domain randomization: finite
    losses and returns, a checkpoint every two periods that restores to the run's state,
    and a run resumed from the middle one that ends with the uninterrupted run's state
    and metrics rows."""
    full_dir, resumed_dir = tmp_path / "full", tmp_path / "resumed"
    config = jaxsac.tuned(CPU_ID, checkpoint_dir=str(full_dir))
    config = config.replace(checkpoint_every=2 * config.log_every)
    periods = config.total_env_steps // config.log_every
    full = jaxsac.train(config, progress=False)
    assert full.metrics["env_steps"].tolist() == [
        config.log_every * (p + 1) for p in range(periods)]
    _finite_learning(full.metrics)
    models = _models(full.state)
    assert models and all(not np.array_equal(leaf[0], leaf[1]) for leaf in models)

    middle = config.checkpoint_every
    assert checkpoint.latest_step(full_dir) == config.total_env_steps
    restored, _ = checkpoint.restore(full_dir)
    assert leaves_equal(restored, full.state)
    shutil.copytree(full_dir / str(middle), resumed_dir / str(middle))
    resumed = jaxsac.train(config.replace(checkpoint_dir=str(resumed_dir), resume=True),
                           progress=False)
    assert resumed.resumed_from == middle
    assert leaves_equal(resumed.state, full.state)
    later = slice(middle // config.log_every, None)
    for name, values in resumed.metrics.items():
        if name not in ("fps", "time_s", "compile_time_s"):
            np.testing.assert_array_equal(values, full.metrics[name][later], err_msg=name)
    assert leaves_equal(checkpoint.restore(resumed_dir)[0], full.state)


@pytest.mark.parametrize("task", RECIPE_TASKS)
def test_the_recipes_are_valid_runs(task):
    jaxsac.make_train(jaxsac.tuned(f"playground/{task}"))  # validated; nothing compiled
