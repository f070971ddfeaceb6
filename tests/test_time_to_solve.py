"""The time-to-solve harness's bookkeeping: which evaluation solved, its time from the
process's launch, medians with unsolved seeds, the target, the runs' settings."""

from __future__ import annotations

import argparse

import pytest

from experiments.benchmarks import peer_tasks, time_to_solve
from experiments.benchmarks.peer_runners import common
from tests.test_learning import cartpole_balance_small


def record(returns: list[float], every: int = 500, launch: float = 100.0,
           clock_start: float = 102.5) -> dict:
    steps = [every * (k + 1) for k in range(len(returns))]
    return {"own_eval_env_steps": steps, "own_eval_returns": [returns],
            "marks": {str(s): 1.5 * k + 4.0 for k, s in enumerate(steps)},
            "launch_unix": launch, "clock_start_unix": clock_start}


def test_solved_at_is_the_first_evaluation_at_or_above_the_threshold():
    returns = [-1500.0, -900.0, -200.5, -200.0, -150.0, -300.0]
    solved = time_to_solve.solved_at(record(returns), -200.0)
    # Brute force: the first index with a return >= -200, its mark plus the imports.
    k = min(i for i, x in enumerate(returns) if x >= -200.0)
    assert solved["env_steps"] == 500 * (k + 1)
    assert solved["s_from_clock"] == pytest.approx(1.5 * k + 4.0)
    assert solved["s_from_launch"] == pytest.approx(2.5 + 1.5 * k + 4.0)
    assert time_to_solve.solved_at(record([-1500.0, -201.0]), -200.0) == {
        "env_steps": None, "s_from_launch": None, "s_from_clock": None}


@pytest.mark.parametrize(("xs", "median", "worst"), [
    ([3.0, 1.0, 2.0], 2.0, 3.0),
    ([3.0, None, 1.0], 3.0, None),      # the unsolved seed is the slowest
    ([None, None, 1.0], None, None),    # the median falls on an unsolved seed
    ([4.0, 1.0, 2.0, None], 3.0, None),
    ([], None, None),
])
def test_medians_count_an_unsolved_seed_as_the_slowest(xs, median, worst):
    assert time_to_solve.median_unsolved_last(xs) == median
    assert time_to_solve.worst(xs) == worst


def summary_of(per_library: dict[str, list[float | None]]) -> dict:
    return {"own": {lib: {"median_s": time_to_solve.median_unsolved_last(xs),
                          "solved": sum(x is not None for x in xs), "runs": len(xs)}
                    for lib, xs in per_library.items()}}


def test_the_target_compares_jaxsac_with_the_fastest_peer():
    t = time_to_solve.target(summary_of({"jaxsac-jax": [5.0, 6.0, 7.0],
                                         "rejax": [20.0, 13.0, 30.0],
                                         "sbx": [12.0, 14.0, None]}))
    assert (t["best_peer"], t["best_peer_median_s"], t["speedup"]) == ("sbx", 14.0, 2.33)
    assert t["passed"] is True
    slow = time_to_solve.target(summary_of({"jaxsac-jax": [8.0, None, 7.0],
                                            "sbx": [12.0, 14.0, 13.0]}))
    assert slow["speedup"] == pytest.approx(13.0 / 8.0, abs=0.01)
    assert slow["every_jaxsac_seed_solves"] is False and slow["passed"] is False


@pytest.mark.parametrize("library", ["rejax", "sbx", "sb3"])
@pytest.mark.parametrize("settings", time_to_solve.SETTINGS)
def test_each_run_gets_its_settings_the_evaluation_period_and_the_stop(library, settings):
    args = time_to_solve.parse_args([])
    command = peer_tasks.runner_command(time_to_solve.peer_run(args, library, settings, seed=3))
    parsed, _ = common.parser("test").parse_known_args(command[3:])
    expected = vars(common.parser("test").parse_args([]))
    expected.update(seed=3, total_env_steps=20_000, learning_starts=1_000,
                    buffer_size=20_000, mark_every=500, stop_at_return=-200.0)
    if settings == "own":
        expected.update(peer_tasks.PENDULUM_OWN[library])
    assert vars(parsed) == expected


@pytest.mark.parametrize("settings", time_to_solve.SETTINGS)
def test_cartpole_runs_get_the_discrete_comparisons_settings(settings):
    """rejax on CartPole-v1: the side-by-side comparison's CartPole settings (rejax's own
    but for the target entropy), its own 0.7 log|A| with the own settings, evaluation
    every 1,000 env steps and the stop at 475, within 50,000 env steps."""
    args = time_to_solve.parse_args(["--task", "cartpole"])
    assert args.libraries == ["jaxsac-jax", "rejax"] and args.total_env_steps == 50_000
    assert args.out_json == "docs/benchmarks/time_to_solve_cartpole.json"
    command = peer_tasks.runner_command(time_to_solve.peer_run(args, "rejax", settings, seed=3))
    parsed, _ = common.parser("test").parse_known_args(command[3:])
    expected = vars(common.parser("test").parse_args([]))
    expected.update(peer_tasks.CARTPOLE, seed=3, total_env_steps=50_000,
                    learning_starts=1_000, buffer_size=10_000, mark_every=1_000,
                    stop_at_return=475.0,
                    target_entropy_scale=0.7 if settings == "own" else 0.5)
    assert vars(parsed) == expected
    jaxsac = peer_tasks.runner_command(time_to_solve.peer_run(args, "jaxsac-jax", settings, seed=3))
    assert ("--tuned" in jaxsac) == (settings == "own")


@pytest.mark.parametrize("settings", time_to_solve.SETTINGS)
def test_cartpole_balance_runs_get_their_settings_and_brax_its_playground_config(settings):
    """CartpoleBalance within 40,960 env steps, evaluated every 2,048, stopping at 900.
    Shared: both libraries the 4-env CPU config, jaxsac with brax's fixed alpha settings
    and 1-step returns. Own: jaxsac its learning test's config, brax Playground's."""
    args = time_to_solve.parse_args(["--task", "cartpole_balance"])
    assert args.libraries == ["jaxsac-jax", "brax"] and args.total_env_steps == 40_960
    assert args.out_json == "docs/benchmarks/time_to_solve_cartpole_balance.json"
    protocol = dict(seed=3, total_env_steps=40_960, mark_every=2_048, stop_at_return=900.0,
                    eval_episodes=10, env_id="playground/CartpoleBalance", gamma=0.99,
                    tau=0.005, activation="relu")
    small = cartpole_balance_small(40_960)
    cpu_config = dict(num_envs=small.num_envs, utd_ratio=small.utd_ratio,
                      batch_size=small.batch_size, hidden=list(small.hidden_sizes),
                      lr=small.critic_lr, learning_starts=small.learning_starts,
                      buffer_size=small.buffer_capacity, normalize_obs=False,
                      critic_layer_norm=True)
    playground = dict(num_envs=128, utd_ratio=8 / 128, batch_size=512, hidden=[256, 256],
                      lr=1e-3, learning_starts=8_192, buffer_size=163_840,
                      normalize_obs=True, critic_layer_norm=True)

    def parsed(library: str) -> dict:
        command = peer_tasks.runner_command(time_to_solve.peer_run(args, library, settings, seed=3))
        p = common.parser("test")
        p.add_argument("--critic-layer-norm", action="store_true")
        if library == "jaxsac-jax":
            for flag in ("--alpha-lr", "--target-entropy"):
                p.add_argument(flag, type=float)
            p.add_argument("--n-step", type=int, default=1)
            p.add_argument("--backend")
        return vars(p.parse_args(command[3:]))

    expected = vars(common.parser("test").parse_args([]))
    brax = {**expected, **protocol, **(playground if settings == "own" else cpu_config),
            "critic_layer_norm": True}
    assert parsed("brax") == brax
    jaxsac = {**expected, **protocol, **cpu_config, "backend": "jax"}
    if settings == "own":  # the learning test's config
        jaxsac.update(alpha_lr=small.alpha_lr, target_entropy=-1.0, n_step=small.n_step)
    else:  # brax's fixed alpha settings, 1-step returns
        jaxsac.update(alpha_lr=3e-4, target_entropy=-0.5, n_step=1)
    assert parsed("jaxsac-jax") == jaxsac


def test_a_library_outside_the_task_is_refused():
    with pytest.raises(SystemExit):
        time_to_solve.parse_args(["--task", "cartpole", "--libraries", "sbx"])


def test_rounds_rotate_and_run_every_pair_once_per_seed():
    args = argparse.Namespace(seeds=[0, 1, 2], libraries=["jaxsac-jax", "sbx"],
                              settings=["own", "shared"])
    plan = time_to_solve.schedule(args)
    pairs = [(lib, s) for s in args.settings for lib in args.libraries]
    for r, seed in enumerate(args.seeds):
        this_round = plan[4 * r: 4 * r + 4]
        assert {(lib, s) for lib, s, _ in this_round} == set(pairs)
        assert all(x == seed for _, _, x in this_round)
        assert this_round[0][:2] == pairs[r % 4]


def runner_namespace(**kw) -> argparse.Namespace:
    return common.parser("test").parse_args(
        [f"--{k.replace('_', '-')}={v}" for k, v in kw.items()])


@pytest.mark.parametrize(("last_mark", "rate"), [(3_000, 1_000 / 2.0), (1_000, None)])
def test_a_run_stopped_at_the_return_times_its_steady_window_to_its_last_mark(last_mark, rate):
    args = runner_namespace(mark_every=500, learning_starts=500, total_env_steps=20_000,
                            stop_at_return=-200)
    clock = common.Clock()
    for k, step in enumerate(range(500, last_mark + 1, 500)):
        clock.marks[step] = 1.0 * k  # one second per 500 env steps
    clock.t_end = clock.marks[last_mark]
    out = common.summarize("x", args, clock, None, [[-150.0]], {})
    # steady window: from the first mark a whole period after learning starts (1,000)
    assert out["stopped_at_return"] is True and out["steady_window"] == [1_000, last_mark]
    assert out["steady_env_steps_per_s"] == (None if rate is None else pytest.approx(rate))
    with pytest.raises(RuntimeError, match="no timestamp"):
        common.summarize("x", runner_namespace(mark_every=500, total_env_steps=20_000),
                         clock, None, [[-150.0]], {})
