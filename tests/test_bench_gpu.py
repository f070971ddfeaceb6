"""experiments/benchmarks/bench_gpu.py: its smallest setting runs in-process and its
outputs agree with what the configs imply; the GPU sizes are valid configs. (The
humanoid's section, whose compile alone takes minutes on a CPU, has its own tests in
tests/test_bench_gpu_locomotion.py; the runs here select the other sections.)"""

from __future__ import annotations

import json
import math

import pytest

import jaxsac
from experiments.benchmarks import bench_gpu, harness


@pytest.fixture(scope="module")
def smallest(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_gpu")
    paths = out / "gpu.json", out / "gpu.md"
    result = bench_gpu.run_all(bench_gpu.SMALLEST, out_json=str(paths[0]), out_md=str(paths[1]),
                               sizes_name="smallest", log=lambda *_: None,
                               sections=bench_gpu.THROUGHPUT_SECTIONS)
    return result, json.loads(paths[0].read_text()), paths[1].read_text()


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def test_every_section_is_written(smallest):
    result, written, md = smallest
    assert set(written["sections"]) == set(bench_gpu.SECTIONS)
    assert written["selected_sections"] == list(bench_gpu.THROUGHPUT_SECTIONS)
    assert written["sections"]["brax"] == [] and "jaxsac and brax's SAC side by side" in md
    assert written["sections"]["locomotion"] is None
    assert "## A humanoid's return against wall-clock seconds" in md
    assert written["sections"]["updates"] is not None
    assert [r["num_envs"] for r in written["sections"]["envs"]] == [
        e for e, _ in bench_gpu.SMALLEST.env_runs]
    assert [r["seeds"] for r in written["sections"]["seeds"]] == [
        s for s, _ in bench_gpu.SMALLEST.seed_runs]
    assert written["skipped"] == [] and written["errors"] == {}
    assert written["environment"]["device_kind"] and written["environment"]["jax"]
    assert [r["num_envs"] for r in written["sections"]["playground"]] == [
        e for e, _ in bench_gpu.SMALLEST.playground_runs]
    for heading in ("Learner updates", "Pendulum-v1 training by env count", "Vmapped seeds",
                    "MuJoCo Playground training by env count"):
        assert heading in md
    assert json.loads(json.dumps(result)) == written


def test_image_update_rates(smallest):
    rows = smallest[1]["sections"]["images"]
    updates, batch, side = bench_gpu.SMALLEST.image_updates
    assert [r["variant"] for r in rows] == list(harness.IMAGE_UPDATES)
    for r in rows:
        assert (r["updates"], r["batch"], r["shape"]) == (updates, batch, [side, side, 9])
        assert len(r["seconds"]) == r["repeats"] == bench_gpu.SMALLEST.repeats
        assert r["updates_per_s"] == pytest.approx(updates / r["median_s"])
        assert all(_positive(r[k]) for k in ("median_s", "update_ms", "compile_s"))
    assert "## Image updates" in smallest[2] and "NatureCNN's sizes" in smallest[2]


def test_update_rates(smallest):
    u = smallest[1]["sections"]["updates"]
    assert u["updates"] == bench_gpu.SMALLEST.updates
    assert len(u["seconds"]) == u["repeats"] == bench_gpu.SMALLEST.repeats
    assert u["losses_finite"]
    for name in ("median_s", "update_ms", "updates_per_s", "compile_s"):
        assert _positive(u[name]), name
    assert u["updates_per_s"] == pytest.approx(u["updates"] / u["median_s"])


def test_training_counts_match_the_configs(smallest):
    sections = smallest[1]["sections"]
    for row in sections["envs"] + sections["seeds"] + sections["playground"]:
        config = row["config"]
        assert row["env_steps"] == row["expected_env_steps"] == row["seeds"] * config[
            "total_env_steps"]
        assert row["grad_steps"] == row["expected_grad_steps"] > 0
        for name in ("compile_s", "run_s", "env_steps_per_s", "grad_steps_per_s",
                     "env_steps_per_s_per_seed"):
            assert _positive(row[name]), (row["seeds"], name)
        assert row["env_steps_per_s"] == pytest.approx(row["env_steps"] / row["run_s"])
        seconds = row["run_seconds"]
        assert len(seconds) == bench_gpu.TIMED_RUNS and all(_positive(s) for s in seconds)
        assert min(seconds) <= row["run_s"] <= max(seconds)
        assert row["spread_pct"] == pytest.approx((max(seconds) - min(seconds)) / min(seconds)
                                                  * 100)
        assert row["env_steps_per_s_each_run"] == pytest.approx(
            [row["env_steps"] / s for s in seconds])
        assert len(row["eval_return"]) == row["seeds"]
        assert all(math.isfinite(x) for x in row["eval_return"])


def test_expected_counts_follow_the_schedule():
    # 1 env, learning starts 256: iterations 0..254 random, 255 first learns -> 65 of 320
    assert bench_gpu.expected_counts(bench_gpu.train_config(1, 320, 8)) == (320, 65)
    # 64 envs, 8 gradient steps per iteration: ceil(256/64) = 4 warm-up iterations
    assert bench_gpu.expected_counts(bench_gpu.train_config(64, 10, 8)) == (640, 7 * 8)
    # more envs than learning_starts: the first iteration already learns
    assert bench_gpu.expected_counts(bench_gpu.train_config(4096, 3, 8)) == (3 * 4096, 3 * 8)


@pytest.mark.parametrize("sizes", [bench_gpu.GPU, bench_gpu.SMALLEST], ids=["gpu", "smallest"])
def test_sizes_are_valid_configs(sizes):
    steps = sizes.grad_steps_per_iteration
    configs = [(bench_gpu.train_config(e, i, steps, learning_starts=sizes.learning_starts),
                1 if e == 1 else steps) for e, i in sizes.env_runs]
    e = sizes.seed_num_envs  # section 3: one gradient step per env step
    configs += [(bench_gpu.train_config(e, i, e, learning_starts=sizes.learning_starts), e)
                for _, i in sizes.seed_runs]
    configs += [(bench_gpu.playground_config(sizes.playground_task, e, i,
                                             sizes.learning_starts), 8)
                for e, i in sizes.playground_runs]
    configs += [(bench_gpu.locomotion_config(sizes.locomotion), 8)]  # the recipe's 8
    for config, per_iteration in configs:
        assert round(config.utd_ratio * config.num_envs) == per_iteration
        assert config.buffer_capacity % config.num_envs == 0
        assert config.batch_size <= config.buffer_capacity
        assert config.total_env_steps % config.log_every == 0
        assert config.log_every % config.num_envs == 0
        assert bench_gpu.expected_counts(config)[1] > 0
        jaxsac.make_train(config)  # validates eagerly; nothing is compiled


def test_budget_skips_and_still_writes(tmp_path):
    path = tmp_path / "gpu.json"
    result = bench_gpu.run_all(bench_gpu.SMALLEST, budget_s=-1.0, out_json=str(path),
                               log=lambda *_: None)
    assert result["skipped"] == ["updates", "image updates", "envs=1", "seeds=2",
                                 "playground CartpoleBalance envs=16",
                                 "locomotion playground/T1JoystickFlatTerrain-cpu"]
    assert json.loads(path.read_text())["skipped"] == result["skipped"]
    assert "Skipped (time budget)" in bench_gpu.markdown(result)


def test_keep_going_records_failures(monkeypatch, tmp_path):
    def fail(*args, **kwargs):
        raise RuntimeError("out of memory")

    for name in ("bench_updates", "bench_envs", "bench_seeds", "bench_playground",
                 "bench_locomotion"):
        monkeypatch.setattr(bench_gpu, name, fail)
    path = tmp_path / "gpu.json"
    result = bench_gpu.run_all(bench_gpu.SMALLEST, out_json=str(path), log=lambda *_: None,
                               keep_going=True)
    assert set(result["errors"]) == {"updates", "envs=1", "seeds=2",
                                     "playground CartpoleBalance envs=16",
                                     "locomotion playground/T1JoystickFlatTerrain-cpu"}
    assert json.loads(path.read_text())["errors"]["envs=1"] == "RuntimeError: out of memory"
    assert "Failed: seeds=2" in bench_gpu.markdown(result)
    with pytest.raises(RuntimeError):
        bench_gpu.run_all(bench_gpu.SMALLEST, log=lambda *_: None)


def test_brax_section_runs_both_libraries_on_the_same_settings():
    """Section 5 (GPU sizes only; its runs are the peer comparisons', tested there): both
    runners get the task, env count, 8 gradient steps per iteration and budget."""
    from experiments.benchmarks import peer_tasks

    num_envs, mark_every, marks = bench_gpu.GPU.peer_run
    runs = bench_gpu.brax_runs(bench_gpu.GPU.playground_task, num_envs, mark_every, marks)
    commands = {run.library: peer_tasks.runner_command(run) for run in runs}
    assert set(commands) == {"jaxsac-jax", "brax"}
    for command in commands.values():
        flags = " ".join(command)
        assert "--env-id playground/CheetahRun" in flags and f"--num-envs {num_envs} " in flags
        assert f"--utd-ratio {8 / num_envs}" in flags and f"--mark-every {mark_every}" in flags
        assert f"--total-env-steps {mark_every * marks} " in flags
        assert f"--learning-starts {mark_every} " in flags
        assert "--critic-layer-norm" in flags and "--normalize-obs" in flags
    assert commands["brax"][0].endswith(".venv-peers/bin/python")
    assert bench_gpu.SMALLEST.peer_run is None


def test_sections_are_selected_by_name(tmp_path):
    """Only the selected sections run, in SECTIONS' order; an unknown name is refused
    before anything runs."""
    result = bench_gpu.run_all(bench_gpu.SMALLEST, budget_s=-1.0, log=lambda *_: None,
                               sections=("seeds", "updates"))
    assert result["skipped"] == ["updates", "seeds=2"]
    assert result["selected_sections"] == ["seeds", "updates"]
    for bad in (("update",), ()):
        with pytest.raises(ValueError, match=r"run_all: sections=.* is invalid: must be a "
                           r"non-empty selection of \['updates', 'images', 'envs', 'seeds', "
                           r"'playground', 'brax', 'locomotion'\]"):
            bench_gpu.run_all(bench_gpu.SMALLEST, log=lambda *_: None, sections=bad)
    with pytest.raises(SystemExit):
        bench_gpu.main(["--smallest", "--sections", "humanoid"])


def test_a_selection_writes_files_named_after_it():
    assert bench_gpu.default_outputs(bench_gpu.SECTIONS) == bench_gpu.DEFAULT_OUT
    assert bench_gpu.default_outputs(tuple(reversed(bench_gpu.SECTIONS))) == \
        bench_gpu.DEFAULT_OUT
    assert bench_gpu.default_outputs(("locomotion",)) == (
        "docs/benchmarks/gpu_locomotion.json", "docs/benchmarks/gpu_locomotion.md")
    assert bench_gpu.default_outputs(("seeds", "updates"))[0] == \
        "docs/benchmarks/gpu_updates_seeds.json"
