"""bench_gpu.py's humanoid section at its smallest size (the CPU-sized FastSAC / FastTD3
recipe on T1JoystickFlatTerrain): its written points are the run's own metrics rows and
clock, the budget stops the run after the first period past it, and brax's SAC is not
run because brax itself refuses the humanoid's observation."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

import jaxsac
from experiments.benchmarks import bench_gpu

pytestmark = pytest.mark.long  # the humanoid's compile: minutes on 2 CPU cores


@pytest.fixture(scope="module")
def section(tmp_path_factory):
    """run_all of the locomotion section alone, with jaxsac.train spied on: (result,
    the written JSON, the written markdown, the TrainResults jaxsac.train returned)."""
    out = tmp_path_factory.mktemp("bench_gpu_locomotion")
    paths = out / "gpu.json", out / "gpu.md"
    returned = []
    original = jaxsac.train

    def spy(*args, **kwargs):
        returned.append(original(*args, **kwargs))
        return returned[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jaxsac, "train", spy)
        result = bench_gpu.run_all(bench_gpu.SMALLEST, out_json=str(paths[0]),
                                   out_md=str(paths[1]), log=lambda *_: None,
                                   sections=("locomotion",))
    return result, json.loads(paths[0].read_text()), paths[1].read_text(), returned


def test_the_written_points_are_the_runs_metrics(section):
    result, written, md, returned = section
    assert written == json.loads(json.dumps(result))
    assert written["errors"] == {} and written["skipped"] == []
    assert written["selected_sections"] == ["locomotion"]
    row, [run] = written["sections"]["locomotion"], returned
    sizes = bench_gpu.SMALLEST.locomotion
    assert row["tuned_id"] == sizes.tuned_id and row["config"] == run.config.to_dict()
    assert run.config.domain_randomization and run.config.critic == "categorical"
    points = row["points"]
    periods = sizes.total_env_steps // sizes.log_every  # the budget outlasts the run here
    assert row["stopped_by"] == "total_env_steps" and len(points) == periods
    assert [p["env_steps"] for p in points] == run.metrics["env_steps"].tolist()
    assert [p["grad_steps"] for p in points] == run.metrics["grad_steps"].tolist()
    assert [p["eval_return"] for p in points] == run.metrics["eval_return"].tolist()
    assert all(math.isfinite(p["eval_return"]) for p in points)
    for name in ("qf_loss", "policy_loss", "alpha_loss"):
        assert np.isfinite(run.metrics[name]).all(), name
    walls = [p["wall_s"] for p in points]
    assert walls == sorted(walls) and len(set(walls)) == len(walls)
    # Everything is compiled in the first period (none of it when an earlier test of
    # this process compiled the same programs): nothing after it.
    compiles = [p["compile_s"] for p in points]
    assert 0 <= compiles[0] < walls[0] and compiles == [compiles[0]] * len(points)
    for p in points:
        assert p["train_s"] == pytest.approx(p["wall_s"] - p["compile_s"])
    last = points[-1]
    assert (row["env_steps"], row["final_return"], row["train_s"], row["compile_s"]) == (
        last["env_steps"], last["eval_return"], last["train_s"], last["compile_s"])
    assert row["env_steps_per_s"] == pytest.approx(last["env_steps"] / last["train_s"])
    published = row["published"]
    assert published["device"] == "NVIDIA A100 80GB"
    assert published["points"][-1] == {"wall_s": 3027.5, "env_steps": 46_080_000,
                                       "eval_return": 34.8}
    assert "## A humanoid's return against wall-clock seconds" in md
    assert f"| {last['env_steps']:,} |" in md and "Published, not measured here" in md
    assert "brax's SAC: not run: " + row["brax"]["reason"] in md


def test_the_budget_stops_after_the_first_period_past_it(section):
    """A budget of 0 training seconds: the first period is past it, and the run stops
    there (the section's programs are compiled already)."""
    run = dataclasses.replace(bench_gpu.SMALLEST.locomotion, budget_s=0.0)
    row = bench_gpu.bench_locomotion(run)
    assert row["stopped_by"] == "budget" and len(row["points"]) == 1
    assert row["points"][0]["env_steps"] == run.log_every


def test_brax_sac_refuses_the_humanoids_observation(section):
    """brax's own SAC raises for T1's dict observation, which is what the record says."""
    from brax.training.agents.sac import train as brax_sac
    from mujoco_playground import wrapper

    env_id = "playground/T1JoystickFlatTerrain"
    task = jaxsac.envs.make(env_id).unwrapped.env
    with pytest.raises(NotImplementedError, match="Dictionary observations"):
        brax_sac.train(environment=task, wrap_env_fn=wrapper.wrap_for_brax_training,
                       num_timesteps=2_048, episode_length=1000, num_envs=8, batch_size=8,
                       min_replay_size=8)
    reason = section[1]["sections"]["locomotion"]["brax"]["reason"]
    assert reason == bench_gpu.brax_sac_refusal(env_id)
    assert "NotImplementedError" in reason and "privileged_state" in reason
    assert bench_gpu.brax_sac_refusal("playground/CartpoleBalance") is None
