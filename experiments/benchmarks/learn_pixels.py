"""Learning from pixels: a tuned pixel example trained through `jaxsac.train` (the
gymnasium host loop for a gymnasium env, one compiled program for a JAX env), one seed
after another; each log period's deterministic evaluation return.

    .venv/bin/python -m experiments.benchmarks.learn_pixels --env-id PendulumPixels-v1

    MUJOCO_GL=egl .venv/bin/python -m experiments.benchmarks.learn_pixels \
        --env-id dmc/cartpole-swingup-pixels-cpu --seeds 0 1 2 \
        --out-json docs/benchmarks/pixels_cartpole_swingup.json \
        --out-md docs/benchmarks/pixels_cartpole_swingup.md

    .venv/bin/python -m experiments.benchmarks.learn_pixels --env-id ALE/RoadRunner-v5 \
        --seeds 0 --eval-policy sample --random-episodes 30

    .venv/bin/python -m experiments.benchmarks.learn_pixels --env-id ALE/RoadRunner-v5 \
        --seeds 0 --set target_entropy_scale=0.89

The report gives, for every log period, each seed's evaluation return (the tuned
example's `eval_episodes`) and their mean, the wall time of each run (compile and
rendering included), and the published anchor of the task beside the last period. With
`--random-episodes N` (gymnasium envs) it also plays N episodes of uniformly random
actions through the same evaluation (`random_play`): the random-play baseline.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from experiments.benchmarks import harness

ANCHORS = {
    "dmc/cartpole-swingup-pixels": (
        "DrQ 759 ± 92, CURL 582 ± 146 at 100,000 environment frames (12,500 env steps at "
        "action repeat 8; Kostrikov et al. 2020, Table 1)"),
    "ALE/RoadRunner-v5": (
        "SAC-Discrete 305.3 at 100,000 agent steps, random play 11.5 (Christodoulou 2019, "
        "Table 1)"),
    "ALE/Pong-v5": (
        "SAC-Discrete −20.98 at 100,000 agent steps, random play −20.7 (Christodoulou "
        "2019, Table 1)"),
}
"""Published returns at 100k environment frames, by env id (a -cpu variant's base id)."""


def run_seed(env_id: str, seed: int, overrides: dict[str, Any]) -> dict[str, Any]:
    """One training run of the tuned `env_id` with `seed`: its evaluation curve and wall
    seconds."""
    import jaxsac

    config = jaxsac.tuned(env_id, seed=seed, **overrides)
    start = time.perf_counter()
    metrics = jaxsac.train(config, progress=False).metrics
    return {"seed": seed, "seconds": time.perf_counter() - start,
            "env_steps": [int(x) for x in metrics["env_steps"]],
            "eval_return": [float(x) for x in metrics["eval_return"]]}


def random_play(env_id: str, episodes: int, seed: int) -> list[float]:
    """Returns of `episodes` episodes of uniformly random actions on the tuned example of
    `env_id` (a gymnasium env), played through jaxsac's own evaluation on gymnasium envs
    (its env, episode ends and frame stacks) with the policy replaced by
    the action adapter's uniform draw."""
    import jax

    import jaxsac
    from jaxsac import evaluation

    def random_policy_for(obs_spec, actions):
        def policy(actor_params, obs_stats, obs, key, step):
            return actions.random(jax.random.fold_in(key, step),
                                  jax.tree.leaves(obs)[0].shape[0])
        return policy

    setting = evaluation.gym_evaluation(jaxsac.tuned(env_id, seed=seed, backend="gymnasium"))
    setting = setting._replace(policy_for=random_policy_for)
    returns = evaluation.evaluate_gymnasium(setting, None, jax.random.key(seed), episodes)
    return [float(r) for r in returns]


def markdown(report: dict[str, Any]) -> str:
    runs = report["runs"]
    header = ["env steps", *(f"seed {run['seed']}" for run in runs), "mean"]
    rows = []
    for p, steps in enumerate(runs[0]["env_steps"]):
        returns = [run["eval_return"][p] for run in runs]
        rows.append([f"{steps:,}", *map(harness.signed, returns),
                     harness.signed(statistics.fmean(returns))])
    minutes = ", ".join(f"{run['seconds'] / 60:.0f}" for run in runs)
    lines = [f"# {report['env_id']}: evaluation return from pixels", "",
             f"`{report['command']}`", "", harness.conditions_line(report), "",
             *harness.markdown_table(header, rows, "r" * len(header)), "",
             f"Wall minutes per seed (compile and rendering included): {minutes}."]
    if report.get("random_play"):
        returns = report["random_play"]
        lines += ["", f"Random play, measured through the same evaluation: "
                      f"{harness.signed(statistics.fmean(returns))} (mean of {len(returns)} "
                      f"episodes, standard deviation {statistics.pstdev(returns):.1f})."]
    if report["anchor"]:
        lines += ["", f"Published anchor: {report['anchor']}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", default="dmc/cartpole-swingup-pixels-cpu",
                        help="a tuned example's key")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--total-env-steps", type=int, default=None,
                        help="override the tuned example's total_env_steps")
    parser.add_argument("--eval-policy", choices=("mode", "sample"), default=None,
                        help="override the tuned example's eval_policy")
    parser.add_argument("--random-episodes", type=int, default=0,
                        help="also play this many episodes of random actions (gymnasium "
                             "envs)")
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=JSON",
                        help="override fields of the tuned example, e.g. "
                             "target_entropy_scale=0.89")
    parser.add_argument("--out-json", default=None)
    parser.add_argument("--out-md", default=None)
    args = parser.parse_args(argv)
    overrides = {name: value for name, value in (("total_env_steps", args.total_env_steps),
                                                 ("eval_policy", args.eval_policy))
                 if value is not None} | harness.field_overrides(args.set)
    load_before = harness.load_average()
    runs = []
    for seed in args.seeds:
        runs.append(run_seed(args.env_id, seed, overrides))
        print(f"seed {seed}: {runs[-1]['seconds']:.0f} s, returns "
              f"{[round(r) for r in runs[-1]['eval_return']]}", file=sys.stderr)
    report = {**harness.provenance(harness.command_line(
                  "MUJOCO_GL=egl .venv/bin/python -m experiments.benchmarks.learn_pixels",
                  sys.argv[1:] if argv is None else argv), load_before),
              "env_id": args.env_id, "overrides": overrides, "runs": runs,
              "random_play": (random_play(args.env_id, args.random_episodes, seed=0)
                              if args.random_episodes else None),
              "anchor": ANCHORS.get(args.env_id.removesuffix("-cpu"))}
    harness.publish_report(report, markdown(report), args.out_json, args.out_md)


if __name__ == "__main__":
    main()
