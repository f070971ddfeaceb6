"""The MuJoCo learning benchmark's bookkeeping (experiments/benchmarks/learn_mujoco.py),
on synthetic records and a fake runner: the run order, the skip of recorded runs, the
budget, the runners' command lines and the report."""

from __future__ import annotations

import json

import pytest

from experiments.benchmarks import learn_mujoco
from experiments.benchmarks.peer_runners import common


def fake_record(task: str, agent: str, seed: int, final: float, steps: int = 10_000,
                rate: float = 200.0) -> dict:
    evals = list(range(5_000, steps + 1, 5_000))
    return {"task": task, "agent": agent, "seed": seed, "total_env_steps": steps,
            "eval_env_steps": evals, "eval_mean": [final / 2] * (len(evals) - 1) + [final],
            "final_return": final, "env_steps_per_s": rate, "wall_s": steps / rate,
            "library": learn_mujoco.AGENTS[agent].library, "versions": {"jax": "x"}}


def test_the_plan_alternates_libraries_and_covers_the_grid():
    agents = ["jaxsac-sac", "jaxsac-tqc", "jaxsac-categorical", "sbx-sac", "sbx-tqc"]
    tasks = ["Hopper-v5", "Walker2d-v5"]
    plan = learn_mujoco.plan(tasks, agents, [0, 1])
    assert sorted(plan) == sorted((t, a, s) for t in tasks for a in agents for s in (0, 1))
    libs = [learn_mujoco.AGENTS[a].library for _, a, _ in plan]
    # Block 0 starts with jaxsac, block 1 with sbx; pairs alternate while both have agents.
    assert libs[:5] == ["jaxsac", "sbx", "jaxsac", "sbx", "jaxsac"]
    assert libs[5:10] == ["sbx", "jaxsac", "sbx", "jaxsac", "jaxsac"]
    # Seed by seed: every run of seed 0 comes before any of seed 1.
    seeds = [s for _, _, s in plan]
    assert seeds == sorted(seeds)


def test_recorded_runs_are_skipped_at_their_env_step_count_only():
    plan = learn_mujoco.plan(["Hopper-v5"], ["jaxsac-sac", "sbx-sac"], [0, 1])
    records = [fake_record("Hopper-v5", "sbx-sac", 1, 1000.0, steps=100_000),
               fake_record("Hopper-v5", "jaxsac-sac", 0, 1000.0, steps=2_000)]
    left = learn_mujoco.pending(plan, records, 100_000)
    assert ("Hopper-v5", "sbx-sac", 1) not in left
    assert ("Hopper-v5", "jaxsac-sac", 0) in left  # its record is of another env-step count
    assert len(left) == 3


def test_main_appends_records_resumes_and_stops_at_the_budget(tmp_path, monkeypatch):
    out = tmp_path / "results.jsonl"
    calls = []

    def fake_run(args, task, agent, seed, harness_command):
        calls.append((task, agent, seed))
        return fake_record(task, agent, seed, 100.0 * len(calls), steps=args.total_env_steps)

    monkeypatch.setattr(learn_mujoco, "run_one", fake_run)
    argv = ["--tasks", "Hopper-v5", "--agents", "jaxsac-sac", "sbx-sac", "--seeds", "0", "1",
            "--total-env-steps", "10000", "--out", str(out), "--python", __file__,
            "--peers-python", __file__]
    learn_mujoco.main([*argv, "--budget-minutes", "0"])
    assert calls == [] and not out.exists()  # a spent budget starts nothing
    learn_mujoco.main(argv)
    assert len(calls) == 4 and len(out.read_text().splitlines()) == 4
    learn_mujoco.main(argv)  # everything recorded: nothing runs again
    assert len(calls) == 4

    # A failed run is not recorded, so the next invocation retries it.
    monkeypatch.setattr(learn_mujoco, "run_one", lambda *a: {"error": "exit status 1"})
    learn_mujoco.main([*argv, "--seeds", "2"])
    assert len(out.read_text().splitlines()) == 4


def test_the_report_gives_mean_and_std_over_the_seeds_at_equal_env_steps(tmp_path):
    records = [fake_record("Hopper-v5", "jaxsac-tqc", s, x) for s, x in enumerate([900.0, 1100.0,
                                                                                    1000.0])]
    records += [fake_record("Hopper-v5", "sbx-tqc", s, x) for s, x in enumerate([500.0, 700.0])]
    records += [fake_record("Hopper-v5", "jaxsac-sac", 0, 400.0)]
    records += [fake_record("Hopper-v5", "sbx-sac", 0, 5000.0, steps=100_000)]  # other steps
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    md_path = tmp_path / "r.md"
    learn_mujoco.main(["--report", "--out", str(path), "--report-md", str(md_path),
                       "--total-env-steps", "10000"])
    md = md_path.read_text()
    assert "| jaxsac-tqc | 3 | 1,000 ± 100 | 900, 1,100, 1,000 | 200 |" in md
    assert "| sbx-tqc | 3 |" not in md and "| sbx-tqc | 2 | 600 ± 141 |" in md
    assert "| jaxsac-sac | 1 | 400 |" in md
    assert "sbx-sac" not in md  # recorded at 100,000 env steps only
    assert "jaxsac's best family jaxsac-tqc 1,000 ≥ sbx's best sbx-tqc 600" in md
    assert "jaxsac-tqc ÷ jaxsac-sac: 2.50×" in md
    # The mean curve: (450 + 550 + 500) / 3 at 5,000 env steps.
    assert "| env steps | jaxsac-sac | jaxsac-tqc | sbx-tqc |" in md
    assert "| 5,000 | 200 | 500 | 300 |" in md


def test_runner_commands_carry_each_agents_settings():
    args = learn_mujoco.parse_args(["--python", "py", "--peers-python", "peers"])
    cmd = learn_mujoco.runner_command(args, "HalfCheetah-v5", "jaxsac-categorical", 2)
    settings = json.loads(cmd[cmd.index("--settings") + 1])
    assert cmd[:3] == ["py", "-m", "experiments.benchmarks.peer_runners.jaxsac_families"]
    assert (settings["critic"], settings["v_min"], settings["v_max"]) == (
        "categorical", -500.0, 1500.0)
    args = learn_mujoco.parse_args(["--python", "py", "--peers-python", "peers",
                                    "--learning-starts", "1000"])
    cmd = learn_mujoco.runner_command(args, "Hopper-v5", "sbx-crossq", 0)
    assert cmd[:5] == ["peers", "-m", "experiments.benchmarks.peer_runners.sbx_families",
                       "--algo", "crossq"]
    assert json.loads(cmd[cmd.index("--settings") + 1])["learning_starts"] == 1000
    assert "tau" not in json.loads(cmd[cmd.index("--settings") + 1])  # CrossQ has none


@pytest.mark.parametrize("name", sorted(learn_mujoco.AGENTS))
def test_jaxsac_agents_are_valid_configs(name):
    agent = learn_mujoco.AGENTS[name]
    if agent.library != "jaxsac":
        return
    import jaxsac

    settings = agent.settings_for("Hopper-v5")
    jaxsac.SACConfig(env_id="Hopper-v5", backend="gymnasium",
                     **{k: tuple(v) if isinstance(v, list) else v for k, v in settings.items()})


def test_the_curve_keeps_the_last_evaluation_of_a_step_and_times_the_rest_out(monkeypatch):
    returns = iter([[1.0, 3.0], [5.0, 7.0], [9.0, 11.0]])
    monkeypatch.setattr(common, "evaluate", lambda policy, env_id, episodes: next(returns))
    curve = common.Curve("Hopper-v5", 2)
    assert curve(1000, None) == 2.0
    curve(2000, None)
    curve(2000, None)  # the same step again: replaces the previous one
    record = curve.record(wall_s=10.0 + curve.seconds, total_env_steps=2000)
    assert record["eval_env_steps"] == [1000, 2000]
    assert record["eval_mean"] == [2.0, 10.0] and record["final_return"] == 10.0
    assert record["train_s"] == pytest.approx(10.0, abs=1e-3)
    assert record["env_steps_per_s"] == pytest.approx(200.0, rel=1e-3)


def test_a_run_that_takes_no_cpu_is_killed_as_stalled():
    import sys

    code, _, _, error = learn_mujoco.run_process(
        [sys.executable, "-c", "import time; time.sleep(60)"], timeout=60.0, stall_s=1.0)
    assert error is not None and error.startswith("stalled")
    code, out, _, error = learn_mujoco.run_process(
        [sys.executable, "-c", "print('{}')"], timeout=60.0, stall_s=60.0)
    assert (code, out.strip(), error) == (0, "{}", None)


def test_recorded_commands_name_the_repositorys_virtualenvs():
    args = learn_mujoco.parse_args(["--python", "/x/jax/bin/python", "--peers-python",
                                    "/y/peers/bin/python"])
    command = "/x/jax/bin/python -m m --python /x/jax/bin/python --peers-python /y/peers/bin/python"
    assert learn_mujoco.portable(command, args) == (
        ".venv/bin/python -m m --python .venv/bin/python --peers-python .venv-peers/bin/python")


def test_smoke_settings_cannot_go_to_the_results_file():
    with pytest.raises(SystemExit, match="--learning-starts"):
        learn_mujoco.main(["--learning-starts", "1000", "--dry-run"])
    with pytest.raises(SystemExit, match="--eval-episodes"):
        learn_mujoco.main(["--eval-episodes", "2", "--dry-run"])


@pytest.mark.parametrize("task", list(learn_mujoco.TASKS))
def test_the_crossq_examples_are_the_benchmarked_agent(task):
    """jaxsac.tuned("<task>-crossq") trains what the benchmark measured as jaxsac-crossq:
    every setting of the agent, on the task, over the benchmark's env steps."""
    import jaxsac

    config = jaxsac.tuned(f"{task}-crossq")
    agent = learn_mujoco.AGENTS["jaxsac-crossq"].settings_for(task)
    benchmarked = jaxsac.SACConfig.from_dict({**agent, "env_id": task})
    for name in agent:
        assert getattr(config, name) == getattr(benchmarked, name), name
    assert (config.env_id, config.backend, config.total_env_steps) == (
        task, "gymnasium", learn_mujoco.parse_args([]).total_env_steps)
