"""Time to solve Pendulum-v1 (jaxsac against rejax, sbx and stable-baselines3),
CartPole-v1 (discrete SAC, jaxsac against rejax) and MuJoCo Playground's CartpoleBalance
(jaxsac against brax's SAC), each library with its own best-known settings and with
shared settings.

    .venv/bin/python -m experiments.benchmarks.time_to_solve [--task cartpole] [--seeds 0 1 2 3 4]
    make bench-peers          # runs compare_peers, then this for every task

The description below is Pendulum-v1's; CartPole-v1 differs in its threshold (475, of
the most, 500), its evaluation period (1,000 env steps), its budget (50,000 env steps),
its libraries and its settings (peer_tasks.CARTPOLE_OWN; shared: compare_peers --task
cartpole).
CartpoleBalance (--task cartpole_balance) differs in its threshold (900, of the most,
1,000), its evaluation period (2,048 env steps), its budget (40,960 env steps), its
libraries and its settings: peer_tasks.CARTPOLE_BALANCE_SHARED, a 4-env config sized for
2 CPU cores with brax's fixed alpha settings and 1-step returns for both, and
peer_tasks.CARTPOLE_BALANCE_OWN: jaxsac's CPU-sized config (tests/test_learning.py) and
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
peer_tasks.child_env). Runs stop at the threshold where the library can stop mid-run
(jaxsac through `train`'s callback, sbx and stable-baselines3 through theirs); rejax's
single jitted program runs its whole budget, which does not change its timestamps.

Settings, per library (peer_tasks.PENDULUM_OWN, with their sources), and shared: the
Pendulum-v1 comparison of compare_peers (20,000 env steps, learning starts 1,000, 256x256
ReLU, Adam 3e-4, batch 256, tau 0.005). Every run has at most 20,000 env steps. The tasks
and their settings are registered in experiments/benchmarks/peer_tasks.py.

Rounds: round r runs every (library, settings) pair once with seed r, starting one pair
later than round r - 1, so drift on a noisy machine hits all alike.

Writes docs/benchmarks/time_to_solve.json (every run's record) and .md (the tables);
CartPole-v1: docs/benchmarks/time_to_solve_cartpole.json and .md; CartpoleBalance:
docs/benchmarks/time_to_solve_cartpole_balance.json and .md.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from typing import Any

from experiments.benchmarks import harness, peer_tasks
from experiments.benchmarks.harness import number, signed
from experiments.benchmarks.peer_tasks import TASKS

SETTINGS = ("own", "shared")


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
    task = TASKS[args.task].solve
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


def peer_run(args: argparse.Namespace, library: str, settings: str,
             seed: int) -> peer_tasks.PeerRun:
    """One run on the task's runner settings with `settings`'s overrides, an evaluation
    every `eval_every` env steps and the stop at the threshold."""
    task = TASKS[args.task]
    overrides = {**(task.solve.own[library] if settings == "own" else task.solve.shared),
                 "mark_every": task.solve.eval_every, "stop_at_return": task.solve.threshold}
    return peer_tasks.PeerRun(
        args.task, library, seed, total_env_steps=args.total_env_steps,
        learning_starts=overrides.pop("learning_starts", task.learning_starts),
        buffer_size=overrides.pop("buffer_size", task.buffer_size), overrides=overrides,
        torch_threads=args.torch_threads)


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
    step = peer_tasks.first_at(steps, returns, threshold)
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


def tables(report: dict[str, Any]) -> list[str]:
    lines = []
    titles = {"own": "Each library's own best-known settings",
              "shared": "The shared settings of the peer comparison"}
    for settings, by_lib in report["summary"].items():
        rows = []
        for lib, s in by_lib.items():
            failed = f" ({s['failed']} failed)" if s["failed"] else ""
            imports = statistics.median(s["import_s"]) if s["import_s"] else None
            rows.append([
                lib, f"{s['solved']}/{s['runs']}{failed}", seconds(s["median_s"]),
                seconds(s["worst_s"]), ", ".join(seconds(x) for x in s["s_to_solve"]),
                number(s["median_env_steps"], 0), number(s["worst_env_steps"], 0),
                ", ".join(number(x, 0) for x in s["env_steps_to_solve"]),
                ", ".join(number(x) for x in s["compile_s"]), number(imports)])
        lines += [f"## {titles[settings]}", "",
                  *harness.markdown_table(
                      ["library", "seeds solved", "median s", "worst s", "s per seed",
                       "median env steps", "worst env steps", "env steps per seed",
                       "compile s per seed", "imports s"], rows), ""]
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
    env_id = TASKS[report.get("task", "pendulum")].env_id
    task = TASKS[report.get("task", "pendulum")].solve
    shared = (f"the {env_id} comparison's (compare_peers)" if not task.shared else
              f"the {env_id} comparison's (compare_peers) with {json.dumps(task.shared)}")
    own = report["own_settings"]
    lines = [
        f"# Time to solve {env_id}: jaxsac and its peers", "",
        f"Generated {report['date']} by `{report['command']}`. How it is measured: the "
        "docstring of experiments/benchmarks/time_to_solve.py and "
        "[docs/peers.md](../peers.md#time-to-solve-pendulum-v1).", "",
        harness.conditions_line(report), "",
        f"Solved: the first deterministic in-run evaluation (mean of 10 episodes) ≥ "
        f"{signed(report['threshold'])}, every library evaluating every "
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
        *peer_tasks.versions_lines(report["versions"]),
    ]
    failures = [r for r in report["runs"] if "error" in r]
    if failures:
        lines += ["", "## Failed runs", ""]
        lines += [f"- {r['library']} {r['settings']} seed {r['seed']}: {r['error']}"
                  for r in failures]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    task = TASKS[args.task].solve
    command = harness.command_line(".venv/bin/python -m experiments.benchmarks.time_to_solve",
                                   sys.argv[1:] if argv is None else argv)
    pythons = peer_tasks.Pythons(jaxsac=args.jaxsac_python, peers=args.peers_python)
    plan = schedule(args)
    load_before = harness.load_average()
    records = []
    for i, (lib, settings, seed) in enumerate(plan, 1):
        print(f"[{i}/{len(plan)}] {lib} {settings} seed {seed} ...", file=sys.stderr,
              flush=True)
        record = peer_tasks.run_peer(peer_run(args, lib, settings, seed), pythons=pythons,
                                     timeout=args.timeout)
        record["settings"] = settings
        if "error" in record:
            print(f"    FAILED: {record['error']}\n{record.get('stderr_tail', '')}",
                  file=sys.stderr, flush=True)
        else:
            record["solved"] = solved_at(record, task.threshold)
            print(f"    solved at {number(record['solved']['env_steps'], 0)} env steps, "
                  f"{seconds(record['solved']['s_from_launch'])} s from launch (compile "
                  f"{number(record['compile_s'])} s)", file=sys.stderr, flush=True)
        records.append(record)
    summary = summarize(records)
    report = {
        **harness.provenance(command, load_before, jax_platform="cpu"),
        "task": args.task, "seeds": args.seeds, "libraries": args.libraries,
        "settings": args.settings, "total_env_steps": args.total_env_steps,
        "threshold": task.threshold, "eval_every": task.eval_every,
        "own_settings": {lib: task.own[lib] for lib in args.libraries},
        "summary": summary, "target": target(summary),
        "versions": peer_tasks.versions(records), "runs": records,
    }
    harness.publish_report(report, markdown(report), peer_tasks.ROOT / args.out_json,
                           peer_tasks.ROOT / args.out_md)


if __name__ == "__main__":
    main()
