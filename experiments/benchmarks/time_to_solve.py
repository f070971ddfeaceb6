"""Time to solve Pendulum-v1 (jaxsac against rejax, sbx and stable-baselines3),
CartPole-v1 (discrete SAC, jaxsac against rejax) and MuJoCo Playground's CartpoleBalance
(jaxsac against brax's SAC), each library with its own best-known settings and with
shared settings.

    .venv/bin/python -m experiments.benchmarks.time_to_solve [--task cartpole] [--seeds 0 1 2 3 4]
    make bench-peers          # runs compare_peers, then this for every task

The description below is Pendulum-v1's; CartPole-v1 differs in its threshold (475, of
the most, 500), its evaluation period (1,000 env steps), its budget (50,000 env steps),
its libraries and its settings (CARTPOLE_OWN; shared: compare_peers --task cartpole).
CartpoleBalance (--task cartpole_balance) differs in its threshold (900, of the most,
1,000), its evaluation period (2,048 env steps), its budget (40,960 env steps), its
libraries and its settings: CARTPOLE_BALANCE_SHARED, a 4-env config sized for 2 CPU
cores with brax's fixed alpha settings and 1-step returns for both, and
CARTPOLE_BALANCE_OWN: jaxsac's CPU-sized config (tests/test_learning.py) and
Playground's own brax SAC config (compare_peers --task cartpole_balance), which is sized
for an accelerator. brax's SAC cannot stop mid-run: like rejax's, its run goes on to the
budget, which does not change its timestamps.

Solved: the first deterministic in-run evaluation (the mean of 10 episodes) at or above
-200, every library evaluating every 500 env steps: jaxsac and rejax with their own
evaluation inside the jitted program (10 deterministic episodes of their JAX Pendulum),
sbx and stable-baselines3 with the common one (10 deterministic episodes of gymnasium's
Pendulum-v1, reset seeds 10000-10009) from the training loop's callback. Evaluation time
counts for every library.

Time to solve: wall clock from the launch of the run's process (Python start-up, imports
and compilation included) to the end of that evaluation; the env steps then are the
other figure. Each run is a fresh process without a persistent compilation cache (see
compare_peers.child_env). Runs stop at the threshold where the library can stop mid-run
(jaxsac through `train`'s callback, sbx and stable-baselines3 through theirs); rejax's
single jitted program runs its whole budget, which does not change its timestamps.

Settings, per library (OWN, with their sources), and SHARED: the Pendulum-v1 comparison
of compare_peers (20,000 env steps, learning starts 1,000, 256x256 ReLU, Adam 3e-4, batch
256, tau 0.005). Every run has at most 20,000 env steps.

Rounds: round r runs every (library, settings) pair once with seed r, starting one pair
later than round r - 1, so drift on a noisy machine hits all alike.

Writes docs/benchmarks/time_to_solve.json (every run's record) and .md (the tables);
CartPole-v1: docs/benchmarks/time_to_solve_cartpole.json and .md; CartpoleBalance:
docs/benchmarks/time_to_solve_cartpole_balance.json and .md.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import shlex
import statistics
import sys
from typing import Any

from experiments.benchmarks import compare_peers
from experiments.benchmarks.compare_peers import fmt, minus

RL_ZOO_PENDULUM = {
    # RL Zoo's hyperparams/sac.yml, Pendulum-v1: n_timesteps 20,000, learning_rate 1e-3,
    # the rest SB3's defaults (learning starts 100, batch 256, tau 0.005, gamma 0.99,
    # 256x256 ReLU, one gradient step per env step, learned alpha). Its buffer of 10^6
    # never fills in 20,000 env steps, so the run's 20,000 is the same buffer.
    "lr": 1e-3, "learning_starts": 100, "buffer_size": 20_000,
}
OWN = {
    # jaxsac's tuned example (jaxsac/tuned/Pendulum-v1.json): 64x64 networks, learning
    # rates 1e-3 / 2e-3 / 1e-3, n-step returns from [2, 4], prioritized replay, learning
    # starts 256.
    "jaxsac-jax": {"tuned": True},
    # rejax's configs/gymnax/pendulum.yaml, sac: swish 64x64 (rejax's default sizes),
    # learning rate 0.01, buffer 10,000, fill_buffer 256, batch 256, polyak 0.98,
    # normalized observations (its budget there: 10,000 env steps).
    "rejax": {"lr": 0.01, "buffer_size": 10_000, "learning_starts": 256, "tau": 0.02,
              "activation": "swish", "hidden": [64, 64], "normalize_obs": True},
    "sbx": RL_ZOO_PENDULUM,
    "sb3": RL_ZOO_PENDULUM,
}
CARTPOLE_OWN = {
    # jaxsac's tuned example (jaxsac/tuned/CartPole-v1.json): rejax's CartPole setting with
    # the target entropy 0.5 log|A| and a Polyak update after every gradient step.
    "jaxsac-jax": {"tuned": True},
    # rejax's configs/gymnax/cartpole.yaml is the comparison's shared setting but for its
    # target entropy, 0.7 log|A| (the comparison gives both libraries 0.5).
    "rejax": {"target_entropy_scale": 0.7},
}
CARTPOLE_BALANCE_SHARED = {
    # A config both libraries run on 2 CPU cores within minutes: 4 envs, one gradient step
    # per env step (4 per iteration), batch 256, 128x128 ReLU networks, learning rate
    # 1e-3, LayerNorm critics, raw observations, 2,048 warm-up steps, a buffer of 32,768;
    # discount and tau as Playground's. alpha as brax fixes it (Adam 3e-4, target -0.5,
    # compare_peers.CARTPOLE_BALANCE_JAXSAC gives jaxsac the same) and 1-step returns.
    "num_envs": 4, "utd_ratio": 1.0, "batch_size": 256, "hidden": [128, 128], "lr": 1e-3,
    "normalize_obs": False, "learning_starts": 2_048, "buffer_size": 32_768,
}
CARTPOLE_BALANCE_OWN = {
    # jaxsac's CPU-sized CartpoleBalance config (tests/test_learning.py,
    # cartpole_balance_small): the shared one with alpha's learning rate 1e-3, the target
    # entropy -|A| and 3-step returns. (jaxsac/tuned/playground/CartpoleBalance.json is
    # Playground's accelerator-sized setting, brax's below.)
    "jaxsac-jax": {**CARTPOLE_BALANCE_SHARED, "alpha_lr": 1e-3, "target_entropy": -1.0,
                   "n_step": 3},
    # Playground's brax SAC config for the dm_control suite, as compare_peers runs it
    # (128 envs, batch 512, 8 gradient steps per iteration, 256x256, normalized
    # observations, 8,192 warm-up steps); its 5M env steps are cut to the budget.
    "brax": {},
}
SETTINGS = ("own", "shared")


@dataclasses.dataclass(frozen=True)
class SolveTask:
    """One time-to-solve comparison: its env, libraries, threshold and settings."""

    env_id: str
    peer_task: str
    """compare_peers.TASKS key: the shared settings, learning starts and buffer."""
    libraries: tuple[str, ...]
    threshold: float
    eval_every: int
    total_env_steps: int
    own: dict[str, dict[str, Any]]
    """Each library's own settings: overrides of the peer task's runner settings."""
    out: str
    """Outputs <out>.json and <out>.md (relative to the repository)."""
    shared: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The shared settings: overrides of the peer task's runner settings (none: the peer
    comparison's own)."""


TASKS = {
    "pendulum": SolveTask("Pendulum-v1", "pendulum", ("jaxsac-jax", "rejax", "sbx", "sb3"),
                          threshold=-200.0, eval_every=500, total_env_steps=20_000, own=OWN,
                          out="docs/benchmarks/time_to_solve"),
    "cartpole": SolveTask("CartPole-v1", "cartpole", ("jaxsac-jax", "rejax"),
                          threshold=475.0, eval_every=1_000, total_env_steps=50_000,
                          own=CARTPOLE_OWN, out="docs/benchmarks/time_to_solve_cartpole"),
    "cartpole_balance": SolveTask(
        "playground/CartpoleBalance", "cartpole_balance", ("jaxsac-jax", "brax"),
        threshold=900.0, eval_every=2_048, total_env_steps=40_960, own=CARTPOLE_BALANCE_OWN,
        shared=CARTPOLE_BALANCE_SHARED, out="docs/benchmarks/time_to_solve_cartpole_balance"),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", choices=list(TASKS), default="pendulum")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4],
                   help="one round per seed; each round runs every (library, settings) once")
    p.add_argument("--libraries", nargs="+", default=None,
                   help="default: the task's (pendulum: jaxsac-jax rejax sbx sb3; "
                        "cartpole: jaxsac-jax rejax; cartpole_balance: jaxsac-jax brax)")
    p.add_argument("--settings", nargs="+", choices=SETTINGS, default=list(SETTINGS))
    p.add_argument("--total-env-steps", type=int, default=None,
                   help="every run's budget of env steps (default: the task's, 20,000 for "
                        "pendulum, 50,000 for cartpole, 40,960 for cartpole_balance)")
    p.add_argument("--peers-python", default=".venv-peers/bin/python")
    p.add_argument("--jaxsac-python", default=".venv/bin/python")
    p.add_argument("--torch-threads", type=int, default=1,
                   help="torch intra-op threads of sb3 (0: torch's default)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    p.add_argument("--out-json", default=None, help="default: the task's <out>.json")
    p.add_argument("--out-md", default=None, help="default: the task's <out>.md")
    args = p.parse_args(argv)
    task = TASKS[args.task]
    args.libraries = args.libraries or list(task.libraries)
    unknown = sorted(set(args.libraries) - set(task.libraries))
    if unknown:
        p.error(f"--libraries {' '.join(unknown)}: not in task {args.task!r}; "
                f"its libraries: {' '.join(task.libraries)}")
    if args.total_env_steps is None:
        args.total_env_steps = task.total_env_steps
    elif args.total_env_steps < 1:
        p.error(f"--total-env-steps {args.total_env_steps}: must be at least 1")
    args.out_json = args.out_json or f"{task.out}.json"
    args.out_md = args.out_md or f"{task.out}.md"
    return args


def runner_args(args: argparse.Namespace, library: str, settings: str) -> argparse.Namespace:
    """compare_peers.run_one's arguments for one run: the task's shared settings, with
    `settings`'s overrides, an evaluation every `eval_every` env steps and the stop at
    the threshold."""
    task = TASKS[args.task]
    peer_task = compare_peers.TASKS[task.peer_task]
    overrides = {**(task.own[library] if settings == "own" else task.shared),
                 "mark_every": task.eval_every, "stop_at_return": task.threshold}
    learning_starts = overrides.pop("learning_starts", peer_task.learning_starts)
    buffer_size = overrides.pop("buffer_size", peer_task.buffer_size)
    return argparse.Namespace(
        task=task.peer_task, total_env_steps=args.total_env_steps,
        learning_starts=learning_starts, buffer_size=buffer_size,
        peers_python=args.peers_python, jaxsac_python=args.jaxsac_python,
        torch_threads=args.torch_threads, timeout=args.timeout,
        runner_overrides=overrides)


def schedule(args: argparse.Namespace) -> list[tuple[str, str, int]]:
    """(library, settings, seed) in run order: rotated rounds, one per seed."""
    pairs = [(lib, s) for s in args.settings for lib in args.libraries]
    plan = []
    for r, seed in enumerate(args.seeds):
        k = r % len(pairs)
        plan += [(lib, s, seed) for lib, s in pairs[k:] + pairs[:k]]
    return plan


def solved_at(record: dict[str, Any], threshold: float) -> dict[str, Any]:
    """When the run first evaluated at or above `threshold`: env steps, seconds from the
    process's launch and from the clock's start (after imports); None where it never
    did."""
    steps = record.get("own_eval_env_steps", [])
    returns = record.get("own_eval_returns", [[]])[0]
    step = compare_peers.first_at(steps, returns, threshold)
    if step is None:
        return {"env_steps": None, "s_from_launch": None, "s_from_clock": None}
    after_clock = record["marks"][str(step)]
    imports = record["clock_start_unix"] - record["launch_unix"]
    return {"env_steps": step, "s_from_launch": round(imports + after_clock, 3),
            "s_from_clock": round(after_clock, 3)}


def median_unsolved_last(xs: list[float | None]) -> float | None:
    """The median, a seed that never solved (None) counting as infinitely slow; None when
    the median falls on such a seed."""
    if not xs:
        return None
    m = statistics.median(math.inf if x is None else x for x in xs)
    return None if math.isinf(m) else m


def worst(xs: list[float | None]) -> float | None:
    """The largest value; None when any seed never solved."""
    return None if not xs or None in xs else max(xs)


def summarize(records: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """{settings: {library: per-seed seconds and env steps to solve, their medians and
    worst seeds, compile and import seconds}}, seeds in order."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for settings in dict.fromkeys(r["settings"] for r in records):
        out[settings] = {}
        for lib in dict.fromkeys(r["library"] for r in records):
            runs = sorted((r for r in records
                           if (r["settings"], r["library"]) == (settings, lib)),
                          key=lambda r: r["seed"])
            if not runs:
                continue
            ok = [r for r in runs if "error" not in r]
            seconds = [r["solved"]["s_from_launch"] for r in ok]
            steps = [r["solved"]["env_steps"] for r in ok]
            out[settings][lib] = {
                "seeds": [r["seed"] for r in ok], "failed": len(runs) - len(ok),
                "solved": sum(x is not None for x in seconds), "runs": len(ok),
                "s_to_solve": seconds, "env_steps_to_solve": steps,
                "median_s": median_unsolved_last(seconds), "worst_s": worst(seconds),
                "median_env_steps": median_unsolved_last(steps),
                "worst_env_steps": worst(steps),
                "compile_s": [r["compile_s"] for r in ok],
                "import_s": [round(r["clock_start_unix"] - r["launch_unix"], 2) for r in ok],
            }
    return out


def target(summary: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """The performance issue's bar: jaxsac's median time to solve at least 2x faster than
    the best peer's, both with their own settings, and every jaxsac seed solving."""
    own = summary.get("own", {})
    jaxsac = own.get("jaxsac-jax")
    peers = {lib: s["median_s"] for lib, s in own.items()
             if lib != "jaxsac-jax" and s["median_s"] is not None}
    if jaxsac is None or not peers:
        return {"passed": None}
    best = min(peers, key=peers.get)
    speedup = (None if jaxsac["median_s"] is None else
               round(peers[best] / jaxsac["median_s"], 2))
    return {"best_peer": best, "best_peer_median_s": peers[best],
            "jaxsac_median_s": jaxsac["median_s"], "speedup": speedup,
            "every_jaxsac_seed_solves": jaxsac["solved"] == jaxsac["runs"],
            "passed": bool(speedup is not None and speedup >= 2.0
                           and jaxsac["solved"] == jaxsac["runs"])}


def seconds(x: float | None) -> str:
    return "not solved" if x is None else f"{x:.1f}"


def steps(x: int | None) -> str:
    return "—" if x is None else f"{x:,}"


def tables(report: dict[str, Any]) -> list[str]:
    lines = []
    titles = {"own": "Each library's own best-known settings",
              "shared": "The shared settings of the peer comparison"}
    for settings, by_lib in report["summary"].items():
        lines += [f"## {titles[settings]}", "",
                  "| library | seeds solved | median s | worst s | s per seed | median env "
                  "steps | worst env steps | env steps per seed | compile s per seed | "
                  "imports s |", "|---|---|---|---|---|---|---|---|---|---|"]
        for lib, s in by_lib.items():
            failed = f" ({s['failed']} failed)" if s["failed"] else ""
            lines.append(
                f"| {lib} | {s['solved']}/{s['runs']}{failed} | {seconds(s['median_s'])} "
                f"| {seconds(s['worst_s'])} | "
                f"{', '.join(seconds(x) for x in s['s_to_solve'])} "
                f"| {steps(s['median_env_steps'])} | {steps(s['worst_env_steps'])} | "
                f"{', '.join(steps(x) for x in s['env_steps_to_solve'])} | "
                f"{', '.join(fmt(x) for x in s['compile_s'])} | "
                f"{fmt(statistics.median(s['import_s']) if s['import_s'] else None)} |")
        lines.append("")
    t = report["target"]
    if t.get("passed") is not None:
        speedup = "—" if t["speedup"] is None else f"{t['speedup']:.2f}×"
        against = (f"jaxsac's median with its own settings, {seconds(t['jaxsac_median_s'])} "
                   f"s, against the best peer's with its own, {t['best_peer']} "
                   f"{seconds(t['best_peer_median_s'])} s: {speedup}")
        solves = "yes" if t["every_jaxsac_seed_solves"] else "no"
        if report.get("task", "pendulum") == "pendulum":  # the performance issue's bar
            lines += ["## Target", "",
                      f"{against} (target: at least 2×); every jaxsac seed solves: {solves}. "
                      f"Passed: {'yes' if t['passed'] else '**no**'}.", ""]
        else:
            lines += ["## jaxsac against the fastest peer", "",
                      f"{against}; every jaxsac seed solves: {solves}. (The performance "
                      "issue's 2× target is Pendulum-v1's.)", ""]
    return lines


def markdown(report: dict[str, Any]) -> str:
    task = TASKS[report.get("task", "pendulum")]
    env_id = task.env_id
    shared = (f"the {env_id} comparison's (compare_peers)" if not task.shared else
              f"the {env_id} comparison's (compare_peers) with {json.dumps(task.shared)}")
    own = report["own_settings"]
    lines = [
        f"# Time to solve {env_id}: jaxsac and its peers", "",
        f"Generated {report['date']} by `{report['command']}`. How it is measured: the "
        "docstring of experiments/benchmarks/time_to_solve.py and "
        "[docs/peers.md](../peers.md#time-to-solve-pendulum-v1).", "",
        compare_peers.machine_line(report), "",
        f"Solved: the first deterministic in-run evaluation (mean of 10 episodes) ≥ "
        f"{minus(report['threshold'])}, every library evaluating every "
        f"{report['eval_every']:,} env steps. "
        "Seconds: from the launch of the run's fresh process (imports and compilation "
        "included, no compilation cache) to the end of that evaluation. Medians and worst "
        f"over {len(report['seeds'])} seeds, a seed that never solved (within "
        f"{report['total_env_steps']:,} env steps) counting as the slowest.", "",
        *tables(report),
        "## Settings", "",
        "- own: " + "; ".join(f"{lib}: {json.dumps(own[lib])}" for lib in report["libraries"]),
        f"- shared: {shared}, evaluation every "
        f"{report['eval_every']} env steps", "",
        "## Versions", "",
    ]
    for lib, v in report["versions"].items():
        lines.append(f"- {lib}: " + ", ".join(f"{k} {x}" for k, x in sorted(v.items())))
    failures = [r for r in report["runs"] if "error" in r]
    if failures:
        lines += ["", "## Failed runs", ""]
        lines += [f"- {r['library']} {r['settings']} seed {r['seed']}: {r['error']}"
                  for r in failures]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    task = TASKS[args.task]
    command = " ".join([".venv/bin/python -m experiments.benchmarks.time_to_solve",
                        *(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))])
    plan = schedule(args)
    load_before = [round(x, 2) for x in os.getloadavg()]
    records = []
    for i, (lib, settings, seed) in enumerate(plan, 1):
        print(f"[{i}/{len(plan)}] {lib} {settings} seed {seed} ...", file=sys.stderr,
              flush=True)
        record = compare_peers.run_one(lib, seed, 1, runner_args(args, lib, settings))
        record["settings"] = settings
        if "error" in record:
            print(f"    FAILED: {record['error']}\n{record.get('stderr_tail', '')}",
                  file=sys.stderr, flush=True)
        else:
            record["solved"] = solved_at(record, task.threshold)
            print(f"    solved at {steps(record['solved']['env_steps'])} env steps, "
                  f"{seconds(record['solved']['s_from_launch'])} s from launch (compile "
                  f"{fmt(record['compile_s'])} s)", file=sys.stderr, flush=True)
        records.append(record)
    summary = summarize(records)
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command, "machine": compare_peers.machine(),
        "load_before": load_before, "load_after": [round(x, 2) for x in os.getloadavg()],
        "task": args.task, "seeds": args.seeds, "libraries": args.libraries,
        "settings": args.settings, "total_env_steps": args.total_env_steps,
        "threshold": task.threshold, "eval_every": task.eval_every,
        "own_settings": {lib: task.own[lib] for lib in args.libraries},
        "summary": summary, "target": target(summary),
        "versions": compare_peers.versions(records), "runs": records,
    }
    compare_peers.write_report(report, markdown(report), args.out_json, args.out_md)


if __name__ == "__main__":
    main()
