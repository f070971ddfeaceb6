"""Side-by-side SAC comparison on Pendulum-v1: jaxsac against stable-baselines3, sbx, rejax.

    make bench-peers          # creates .venv-peers, then runs this with the defaults
    .venv/bin/python -m experiments.benchmarks.compare_peers [--seeds 0 1 2] [--vmap-seeds 8]
    .venv/bin/python -m experiments.benchmarks.compare_peers --task cartpole
    .venv/bin/python -m experiments.benchmarks.compare_peers --task cartpole_balance

--task pendulum (the default) is the comparison described below. --task cartpole runs
discrete SAC on CartPole-v1 with jaxsac (both backends) and rejax only, in rejax's own
CartPole setting (peer_tasks.CARTPOLE), and writes docs/benchmarks/peers_cartpole.json and .md.
--task cartpole_balance runs jaxsac (JAX backend) and brax's SAC on MuJoCo Playground's
CartpoleBalance in Playground's own brax SAC setting (peer_tasks.CARTPOLE_BALANCE), one seed
per run (no vmapped runs), and writes docs/benchmarks/peers_cartpole_balance.json and .md.

Every run is a fresh process: jaxsac's runner under jaxsac's `.venv`, the peers' under
`.venv-peers` (made by experiments/benchmarks/setup_peers.sh; never a dependency of
jaxsac). The libraries alternate: round r runs every library once with seed r, starting
one library later than round r - 1, so drift on a noisy machine hits all of them alike.
Then jaxsac and rejax train --vmap-seeds seeds vmapped in one program, in alternating order.

Same settings everywhere: batch 256, 256x256 ReLU actor and critics (twin Q), Adam 3e-4,
gamma 0.99, tau 0.005, learned alpha (initial 1) with target entropy -|A|, learning
starts at 1,000 env steps, one gradient step per env step, replay buffer of 20,000 (the
whole run), 20,000 env steps, one env. Timing and evaluation are described in
experiments/benchmarks/peer_runners/common.py and docs/peers.md.

Writes docs/benchmarks/peers.json (every run's record, the machine, versions and the
command) and docs/benchmarks/peers.md (the tables), and prints the tables.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from collections.abc import Callable
from typing import Any

from experiments.benchmarks import harness, peer_tasks
from experiments.benchmarks.harness import number, signed, times
from experiments.benchmarks.peer_tasks import LIBRARIES, TASKS, steady_start


@dataclasses.dataclass(frozen=True)
class Report:
    """How one task's comparison is reported (REPORTS); the task itself is
    peer_tasks.TASKS'."""

    settings: Callable[[argparse.Namespace], dict[str, Any]]
    """The report's settings (what every runner ran with)."""
    header: Callable[[dict[str, Any]], list[str]]
    """The markdown's title, command, machine and settings."""
    bars: Callable[..., list[dict[str, Any]]] | None = None
    """(single, vmapped, records, return_bar) -> the bars jaxsac is held to."""
    curves: bool = False
    """The tables add each seed's best in-run evaluation and when it reached return_bar."""
    summary: Callable[[list[dict], argparse.Namespace], dict[str, Any]] | None = None
    """(records, args) -> the task's own summary (report["summary"]["by_library"])."""
    tables: Callable[[dict[str, Any]], list[str]] | None = None
    """(report) -> the markdown's result sections, in place of the generic tables."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options; those left out (None) take the task's defaults."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", choices=list(TASKS), default="pendulum",
                   help="pendulum: jaxsac, rejax, sbx and sb3 on Pendulum-v1; cartpole: "
                        "discrete SAC, jaxsac and rejax on CartPole-v1; cartpole_balance: "
                        "jaxsac and brax on MuJoCo Playground's CartpoleBalance")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2],
                   help="one round per seed; each round runs every library once")
    p.add_argument("--libraries", nargs="+", choices=list(LIBRARIES),
                   help="default: the task's")
    p.add_argument("--vmap-seeds", type=int,
                   help="seeds of the vmapped jaxsac and rejax runs (0: none); default: the "
                        "task's (8; 0 for cartpole_balance)")
    p.add_argument("--vmap-rounds", type=int, default=1,
                   help="repetitions of the vmapped pair, alternating which goes first")
    p.add_argument("--total-env-steps", type=int, help="default: the task's")
    p.add_argument("--learning-starts", type=int, help="default: the task's")
    p.add_argument("--buffer-size", type=int, help="default: the task's")
    p.add_argument("--peers-python", default=".venv-peers/bin/python")
    p.add_argument("--jaxsac-python", default=".venv/bin/python")
    p.add_argument("--out-json", help="default: the task's <out>.json")
    p.add_argument("--out-md", help="default: the task's <out>.md")
    p.add_argument("--torch-threads", type=int, default=1,
                   help="torch intra-op threads of sb3 (0: torch's default, one per core)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    args = p.parse_args(argv)
    task = TASKS[args.task]
    defaults = {"libraries": list(task.libraries), "total_env_steps": task.total_env_steps,
                "learning_starts": task.learning_starts, "buffer_size": task.buffer_size,
                "vmap_seeds": task.vmap_seeds,
                "out_json": task.out + ".json", "out_md": task.out + ".md"}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    others = sorted(set(args.libraries) - set(task.libraries))
    if others:
        p.error(f"--task {args.task} runs {', '.join(task.libraries)}, not {', '.join(others)}")
    return args


def peer_run(args: argparse.Namespace, library: str, seed: int,
             num_seeds: int) -> peer_tasks.PeerRun:
    """One run of `library` on the task, with the options' budget."""
    return peer_tasks.PeerRun(args.task, library, seed, num_seeds,
                              total_env_steps=args.total_env_steps,
                              learning_starts=args.learning_starts,
                              buffer_size=args.buffer_size, torch_threads=args.torch_threads)


def pythons(args: argparse.Namespace) -> peer_tasks.Pythons:
    return peer_tasks.Pythons(jaxsac=args.jaxsac_python, peers=args.peers_python)


def schedule(args: argparse.Namespace) -> list[tuple[str, int, int]]:
    """(library, seed, num_seeds) in run order: rotated rounds, then the vmapped pairs."""
    libs = list(args.libraries)
    plan = []
    for r, seed in enumerate(args.seeds):
        k = r % len(libs)
        plan += [(lib, seed, 1) for lib in libs[k:] + libs[:k]]
    vmapped = [lib for lib in peer_tasks.VMAPPED if lib in libs]
    if args.vmap_seeds > 0:
        for r in range(args.vmap_rounds):
            order = vmapped if r % 2 == 0 else vmapped[::-1]
            plan += [(lib, args.seeds[0] + r, args.vmap_seeds) for lib in order]
    return plan


# --- summaries ---------------------------------------------------------------------


def mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def curve_summary(runs: list[dict], bar: float) -> dict[str, list]:
    """Per seed of `runs`: its best in-run evaluation and when it first reached `bar`."""
    curves = [(r["own_eval_env_steps"], seed) for r in runs for seed in r["own_eval_returns"]]
    return {"best_returns": [max(returns) for _, returns in curves],
            "env_steps_to_bar": [peer_tasks.first_at(steps, returns, bar)
                                 for steps, returns in curves]}


def summarize(records: list[dict], num_seeds: int, task: str) -> dict[str, dict[str, Any]]:
    """Per library: means over its runs of the timings; the final returns per seed (and,
    for tasks with curves, each seed's best in-run evaluation and when it reached the bar)."""
    out = {}
    for lib in LIBRARIES:
        runs = [r for r in records if r["library"] == lib and r.get("num_seeds") == num_seeds]
        if not runs:
            continue
        ok = [r for r in runs if "error" not in r]
        finals = [x for r in ok for x in r["final_return"]]
        rates = [r["steady_env_steps_per_s"] for r in ok]
        out[lib] = {
            "runs": len(runs),
            "failed": len(runs) - len(ok),
            "wall_s": mean([r["wall_s"] for r in ok]),
            "compile_s": mean([r["compile_s"] for r in ok if r["compile_s"] is not None]),
            "startup_s": mean([r["startup_s"] for r in ok]),
            "steady_env_steps_per_s": mean(rates),
            "steady_env_steps_per_s_min": min(rates) if rates else None,
            "steady_env_steps_per_s_max": max(rates) if rates else None,
            "aggregate_env_steps_per_s": mean([r["aggregate_env_steps_per_s"] for r in ok]),
            "final_returns": finals,
            "seeds_at_bar": sum(x >= TASKS[task].return_bar for x in finals),
            "seeds": len(finals),
        }
        if REPORTS[task].curves:
            out[lib].update(curve_summary(ok, TASKS[task].return_bar))
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def per_round(records: list[dict], num: str, den: str) -> list[float]:
    """num's steady env steps/s over den's, round by round (same seed, run close in time)."""
    rates = {(r["library"], r["seed"]): r["steady_env_steps_per_s"] for r in records
             if r.get("num_seeds") == 1 and "error" not in r}
    seeds = sorted({seed for _, seed in rates})
    return [round(rates[num, s] / rates[den, s], 3) for s in seeds
            if (num, s) in rates and (den, s) in rates]


def pendulum_bars(single: dict[str, dict], vmapped: dict[str, dict],
                  records: list[dict], return_bar: float) -> list[dict[str, Any]]:
    """The bars jaxsac is held to on Pendulum-v1: speed from the mean steady env steps/s
    of the single-seed runs (the ratio of each round's pair alongside); returns from every
    jaxsac seed, single and vmapped."""
    rate = lambda lib: single.get(lib, {}).get("steady_env_steps_per_s")
    checks = []
    for num, den, need in (("jaxsac-jax", "rejax", 0.95), ("jaxsac-jax", "sbx", 2.0),
                           ("jaxsac-gymnasium", "sbx", 1.5)):
        value = ratio(rate(num), rate(den))
        checks.append({"bar": f"{num} steady env steps/s >= {need}x {den}'s",
                       "value": None if value is None else round(value, 3),
                       "per_round": per_round(records, num, den),
                       "passed": None if value is None else value >= need})
    for lib, summary, what in (("jaxsac-jax", single, "seed"),
                               ("jaxsac-gymnasium", single, "seed"),
                               ("jaxsac-jax", vmapped, "vmapped seed")):
        if lib in summary:
            s = summary[lib]
            checks.append({"bar": f"every {lib} {what} reaches a final return >= "
                                  f"{return_bar:g}",
                           "value": f"{s['seeds_at_bar']}/{s['seeds']}",
                           "passed": s["seeds"] > 0 and s["seeds_at_bar"] == s["seeds"]})
    return checks


def table(summary: dict[str, dict], vmapped: bool, task: str) -> list[str]:
    ref_jax = summary.get("jaxsac-jax", {}).get("steady_env_steps_per_s")
    ref_gym = summary.get("jaxsac-gymnasium", {}).get("steady_env_steps_per_s")
    rate_col = "env steps/s (all seeds)" if vmapped else "steady env steps/s"
    bar = signed(TASKS[task].return_bar)
    curves = REPORTS[task].curves
    head = ["library", "runs", "wall s", "compile s", "start-up s", rate_col,
            "jaxsac-jax ÷ this"]
    if not vmapped:
        head.append("jaxsac-gym ÷ this")
    head += ["final return per seed", f"seeds ≥ {bar}"]
    if curves:
        head += ["best in-run eval per seed", f"env steps to ≥ {bar} per seed"]
    rows = []
    for lib, s in summary.items():
        key = "aggregate_env_steps_per_s" if vmapped else "steady_env_steps_per_s"
        rate = s[key]
        if vmapped:
            ref_jax = summary.get("jaxsac-jax", {}).get(key)
        spread = ("" if vmapped or s["runs"] < 2 or rate is None else
                  f" ({number(s['steady_env_steps_per_s_min'], 0)}–"
                  f"{number(s['steady_env_steps_per_s_max'], 0)})")
        row = [lib, f"{s['runs']}" + (f" ({s['failed']} failed)" if s["failed"] else ""),
               number(s["wall_s"]), number(s["compile_s"]), number(s["startup_s"]),
               number(rate, 0) + spread, times(ratio(ref_jax, rate))]
        if not vmapped:
            row.append(times(ratio(ref_gym, rate)))
        row += [", ".join(signed(x) for x in s["final_returns"]) or "—",
                f"{s['seeds_at_bar']}/{s['seeds']}"]
        if curves:
            row += [", ".join(signed(x) for x in s["best_returns"]) or "—",
                    ", ".join(number(x, 0) for x in s["env_steps_to_bar"]) or "—"]
        rows.append(row)
    return harness.markdown_table(head, rows)


# --- the tasks' reports ------------------------------------------------------------


def pendulum_header(report: dict[str, Any]) -> list[str]:
    """The Pendulum-v1 report's title, command, machine and settings."""
    settings = report["settings"]
    return [
        "# SAC on Pendulum-v1: jaxsac and its peers",
        "",
        f"Generated {report['date']} by `{report['command']}`",
        "(`make bench-peers` runs the same with the defaults). How it is measured: "
        "[docs/peers.md](../peers.md).",
        "",
        harness.conditions_line(report),
        "",
        f"Settings: {settings['total_env_steps']:,} env steps, learning starts "
        f"{settings['learning_starts']:,}, buffer {settings['buffer_size']:,}, batch 256, "
        "256×256 ReLU, Adam 3e-4, γ 0.99, τ 0.005, learned α (initial 1, target −|A|), "
        "one gradient step per env step, one env; sb3 with "
        f"{settings['sb3_torch_threads']} torch thread(s). Final return: 10 deterministic "
        "episodes of gymnasium's Pendulum-v1 (reset seeds 10000–10009), the same for "
        "every library. Steady env steps/s: env steps "
        f"{settings['steady_window'][0]:,}–{settings['steady_window'][1]:,} over the time "
        "between them.",
        "",
    ]


def cartpole_header(report: dict[str, Any]) -> list[str]:
    """The CartPole-v1 report's title, command, machine and settings."""
    settings = report["settings"]
    every = settings["mark_every"]
    return [
        "# Discrete SAC on CartPole-v1: jaxsac and rejax",
        "",
        f"Generated {report['date']} by `{report['command']}`. How it is measured: "
        "[docs/peers.md](../peers.md#cartpole-v1-discrete-sac-against-rejax).",
        "",
        harness.conditions_line(report),
        "",
        f"Settings (rejax's CartPole SAC): {settings['total_env_steps']:,} env steps over "
        f"{settings['num_envs']} envs, {settings['gradient_steps_per_iteration']} gradient "
        "steps per iteration of the envs, learning starts "
        f"{settings['learning_starts']:,}, buffer {settings['buffer_size']:,}, batch "
        f"{settings['batch_size']}, {'×'.join(map(str, settings['hidden']))} "
        f"{settings['activation']}, Adam {settings['lr']:g}, γ {settings['gamma']:g}, "
        f"τ {settings['tau']:g} once per iteration, learned α (initial 1, target "
        f"{settings['target_entropy_scale']:g}·log|A|). Final return: 10 deterministic "
        "(argmax) episodes of gymnasium's CartPole-v1 (reset seeds 10000–10009), the same "
        "for every library. Best in-run eval and env steps to ≥ "
        f"{signed(settings['return_bar'])}: each library's own evaluation (10 deterministic "
        f"episodes of its JAX CartPole, or of gymnasium's for jaxsac-gymnasium) every "
        f"{every:,} env steps; — where no evaluation reached it. Steady env steps/s: env "
        f"steps {settings['steady_window'][0]:,}–{settings['steady_window'][1]:,} over the "
        "time between them.",
        "",
    ]


def markdown(report: dict[str, Any], task: str) -> str:
    form = REPORTS[task]
    lines = list(form.header(report))
    if form.tables is not None:
        lines += form.tables(report)
    else:
        lines += [
            f"## One seed per run ({len(report['seeds'])} round"
            f"{'s' if len(report['seeds']) != 1 else ''}, libraries alternating)",
            "",
            *table(report["summary"]["single"], vmapped=False, task=task),
            "",
        ]
    if report["summary"]["vmapped"]:
        lines += [f"## {report['vmap_seeds']} seeds vmapped in one program", "",
                  *table(report["summary"]["vmapped"], vmapped=True, task=task), ""]
        if form.tables is not None:
            lines += ["(Vmapped runs: jaxsac only; the tables above are of the one-seed "
                      "runs.)", ""]
    if report["bars"]:
        lines += bar_lines(report["bars"])
    lines += peer_tasks.versions_lines(report["versions"])
    failures = [r for r in report["runs"] if "error" in r]
    if failures:
        lines += ["", "## Failed runs", ""]
        lines += [f"- {r['library']} seed {r['seed']}: {r['error']}" for r in failures]
    return "\n".join(lines) + "\n"


def bar_lines(bars: list[dict[str, Any]]) -> list[str]:
    rows = [[b["bar"], "—" if b["value"] is None else str(b["value"]),
             ", ".join(f"{x:.2f}" for x in b.get("per_round", [])) or "—",
             {True: "yes", False: "**no**", None: "—"}[b["passed"]]] for b in bars]
    return ["## Bars", "",
            "Speed ratios: of the mean steady env steps/s; each round's own ratio follows.", "",
            *harness.markdown_table(["bar", "value", "per round", "passed"], rows), ""]


# --- tasks -------------------------------------------------------------------------


def pendulum_settings(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "env_id": "Pendulum-v1", "total_env_steps": args.total_env_steps,
        "learning_starts": args.learning_starts, "buffer_size": args.buffer_size,
        "batch_size": 256, "hidden": [256, 256], "activation": "relu", "lr": 3e-4,
        "gamma": 0.99, "tau": 0.005, "alpha": "learned, initial 1, target -|A|",
        "gradient_steps_per_env_step": 1, "num_envs": 1, "eval_episodes": 10,
        "sb3_torch_threads": args.torch_threads or "torch default",
        "steady_window": [args.learning_starts + 1_000, args.total_env_steps],
    }


def cartpole_settings(args: argparse.Namespace) -> dict[str, Any]:
    cartpole = peer_tasks.CARTPOLE
    return {
        **cartpole, "total_env_steps": args.total_env_steps,
        "learning_starts": args.learning_starts, "buffer_size": args.buffer_size,
        "batch_size": 256, "gamma": 0.99,
        "gradient_steps_per_iteration": round(cartpole["utd_ratio"] * cartpole["num_envs"]),
        "alpha": f"learned, initial 1, target {cartpole['target_entropy_scale']:g} log|A|",
        "jaxsac_target_update_every": peer_tasks.CARTPOLE_JAXSAC["target_update_every"],
        "eval_episodes": 10, "return_bar": TASKS["cartpole"].return_bar,
        "steady_window": [steady_start(args.learning_starts, cartpole["mark_every"]),
                          args.total_env_steps],
    }


def cartpole_balance_settings(args: argparse.Namespace) -> dict[str, Any]:
    s = peer_tasks.CARTPOLE_BALANCE
    return {
        **s, "total_env_steps": args.total_env_steps,
        "learning_starts": args.learning_starts, "buffer_size": args.buffer_size,
        "gradient_steps_per_iteration": round(s["utd_ratio"] * s["num_envs"]),
        "alpha": "learned, initial 1, Adam 3e-4, target -0.5 |A| = -0.5 (brax's fixed "
                 "choices; jaxsac given the same)",
        "jaxsac": peer_tasks.CARTPOLE_BALANCE_JAXSAC,
        "episode_length": 1000, "return_bar": TASKS["cartpole_balance"].return_bar,
        "final_evaluation": "common: raw Playground env (impl jax), 10 deterministic "
                            "episodes reset with PRNGKey(10000 + i)",
        "steady_window": [steady_start(args.learning_starts, s["mark_every"]),
                          args.total_env_steps],
    }


def cartpole_balance_header(report: dict[str, Any]) -> list[str]:
    """The CartpoleBalance report's title, command, machine and settings."""
    settings = report["settings"]
    every = settings["mark_every"]
    return [
        "# SAC on MuJoCo Playground's CartpoleBalance: jaxsac and brax",
        "",
        f"Generated {report['date']} by `{report['command']}`. How it is measured: "
        "[docs/peers.md](../peers.md#mujoco-playground-cartpolebalance-against-brax).",
        "",
        harness.conditions_line(report),
        "",
        "Settings (MuJoCo Playground's brax SAC config for the dm_control suite, cut to a "
        f"CPU budget): {settings['total_env_steps']:,} env steps over "
        f"{settings['num_envs']} envs, {settings['gradient_steps_per_iteration']} gradient "
        f"steps of batch {settings['batch_size']} per step of the envs "
        f"({settings['utd_ratio']:g} per env step), learning starts "
        f"{settings['learning_starts']:,}, buffer {settings['buffer_size']:,}, "
        f"{'×'.join(map(str, settings['hidden']))} {settings['activation']} actor and "
        f"critics, LayerNorm in the critics, normalized observations, Adam "
        f"{settings['lr']:g} (actor, critics), γ {settings['gamma']:g}, τ "
        f"{settings['tau']:g} every gradient step, learned α (initial 1, Adam 3e-4, "
        "target −0.5·|A| = −0.5: brax's fixed choices, given to jaxsac too). In-run "
        f"evaluation: each library's own, every {every:,} env steps, "
        f"{settings['eval_episodes']} deterministic episodes of 1,000 steps. Final "
        f"return: the common evaluation, {settings['eval_episodes']} deterministic "
        "episodes of the raw Playground env (MJX impl \"jax\"), episode i reset with "
        "PRNGKey(10000 + i), the same for both libraries. Steady env steps/s: env steps "
        f"{settings['steady_window'][0]:,}–{settings['steady_window'][1]:,} over the "
        "time between them; gradient steps/s = env steps/s × "
        f"{settings['utd_ratio']:g}. Medians over the seeds; each seed's value follows.",
        "",
    ]


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def cartpole_balance_summary(records: list[dict], args: argparse.Namespace
                             ) -> dict[str, Any]:
    """Per library, from its one-seed runs: each seed's timings, rates, own in-run
    evaluations and final return, and their medians over the seeds."""
    utd = peer_tasks.CARTPOLE_BALANCE["utd_ratio"]
    out: dict[str, Any] = {}
    for lib in args.libraries:
        runs = [r for r in records if r["library"] == lib and r.get("num_seeds") == 1]
        ok = sorted((r for r in runs if "error" not in r), key=lambda r: r["seed"])
        rates = [r["steady_env_steps_per_s"] for r in ok]
        per_seed = {
            "wall_s": [r["wall_s"] for r in ok],
            "compile_s": [r["compile_s"] for r in ok],
            "startup_s": [r["startup_s"] for r in ok],
            "steady_env_steps_per_s": rates,
            "gradient_steps_per_s": [round(x * utd, 2) for x in rates],
            "final_return": [r["final_return"][0] for r in ok],
        }
        evals: dict[int, list[float]] = {}
        for r in ok:
            for step, x in zip(r["own_eval_env_steps"], r["own_eval_returns"][0],
                               strict=True):
                evals.setdefault(step, []).append(x)
        out[lib] = {
            "runs": len(runs), "failed": len(runs) - len(ok), "seeds": [r["seed"] for r in ok],
            "per_seed": per_seed,
            "median": {k: median(v) for k, v in per_seed.items()},
            "own_eval": {str(step): {"per_seed": xs, "median": median(xs)}
                         for step, xs in sorted(evals.items())},
        }
    return out


def cartpole_balance_tables(report: dict[str, Any]) -> list[str]:
    """Speed per library, then the returns at equal env steps."""
    summary = report["summary"]["by_library"]
    rounds = len(report["seeds"])
    ref = summary.get("jaxsac-jax", {}).get("median", {}).get("steady_env_steps_per_s")
    per_seed = lambda xs, digits: ", ".join(number(x, digits) for x in xs) or "—"  # noqa: E731
    rows = []
    for lib, s in summary.items():
        m, p = s["median"], s["per_seed"]
        runs = f"{s['runs']}" + (f" ({s['failed']} failed)" if s["failed"] else "")
        rows.append([lib, runs] + [
            f"{number(m[name], digits)} ({per_seed(p[name], digits)})"
            for name, digits in (("wall_s", 1), ("compile_s", 1), ("startup_s", 1),
                                 ("steady_env_steps_per_s", 0), ("gradient_steps_per_s", 0))
        ] + [times(ratio(ref, m["steady_env_steps_per_s"]))])
    lines = [f"## Speed: one seed per run ({rounds} round{'s' if rounds != 1 else ''}, "
             "libraries alternating), medians (per seed)", "",
             *harness.markdown_table(["library", "runs", "wall s", "compile s", "start-up s",
                                      "steady env steps/s", "gradient steps/s",
                                      "jaxsac-jax ÷ this"], rows)]
    others = [lib for lib in summary if lib != "jaxsac-jax"]
    for lib in others:
        rounds_ratio = per_round(report["runs"], "jaxsac-jax", lib)
        if rounds_ratio:
            lines += ["", f"jaxsac-jax ÷ {lib}, steady env steps/s of each round (same seed, "
                          f"run one after the other): "
                          + ", ".join(f"{x:.2f}" for x in rounds_ratio) + "."]
    libs = list(summary)
    steps = sorted({int(step) for s in summary.values() for step in s["own_eval"]})
    lines += ["", "## Return at equal env steps: medians (per seed)", "",
              "Each library's own in-run evaluation at each mark, then the common final "
              "evaluation. jaxsac's at "
              f"{report['settings']['learning_starts']:,} ends its random warm-up, before "
              "learning; brax's first after its prefill is a mark later (its evaluation "
              "before the prefill, at env step 0, is in the JSON: "
              "`own_eval_before_training`).", ""]
    returns = lambda xs: ", ".join(signed(x) for x in xs)  # noqa: E731
    rows = []
    for step in steps:
        evals = [summary[lib]["own_eval"].get(str(step)) for lib in libs]
        rows.append([f"{step:,}"] + ["—" if e is None else
                                     f"{signed(e['median'])} ({returns(e['per_seed'])})"
                                     for e in evals])
    finals = [summary[lib]["per_seed"]["final_return"] for lib in libs]
    rows.append(["final, common evaluation"] + [
        "—" if not xs else f"**{signed(median(xs))}** ({returns(xs)})" for xs in finals])
    lines += harness.markdown_table(["env steps", *libs], rows)
    bar = report["settings"]["return_bar"]
    lines += ["", "Final returns ≥ " + signed(bar) + ": " + "; ".join(
        f"{lib} {sum(x >= bar for x in summary[lib]['per_seed']['final_return'])}/"
        f"{len(summary[lib]['per_seed']['final_return'])}" for lib in libs) + ".", ""]
    return lines


REPORTS = {
    "pendulum": Report(settings=pendulum_settings, header=pendulum_header, bars=pendulum_bars),
    "cartpole": Report(settings=cartpole_settings, header=cartpole_header, curves=True),
    "cartpole_balance": Report(settings=cartpole_balance_settings,
                               header=cartpole_balance_header,
                               summary=cartpole_balance_summary,
                               tables=cartpole_balance_tables),
}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    task, form = TASKS[args.task], REPORTS[args.task]
    command = harness.command_line(".venv/bin/python -m experiments.benchmarks.compare_peers",
                                   sys.argv[1:] if argv is None else argv)
    for lib, hint in pythons(args).missing(args.libraries).items():
        raise SystemExit(f"compare_peers: {pythons(args).of(lib)} is missing for {lib}; {hint}")

    plan = schedule(args)
    load_before = harness.load_average()
    records = []
    for i, (lib, seed, num_seeds) in enumerate(plan, 1):
        label = f"[{i}/{len(plan)}] {lib} seed {seed}" + (
            f" ×{num_seeds} vmapped" if num_seeds > 1 else "")
        print(label + " ...", file=sys.stderr, flush=True)
        record = peer_tasks.run_peer(peer_run(args, lib, seed, num_seeds),
                                     pythons=pythons(args), timeout=args.timeout)
        records.append(record)
        if "error" in record:
            print(f"    FAILED: {record['error']}\n{record.get('stderr_tail', '')}",
                  file=sys.stderr, flush=True)
        else:
            print(f"    wall {record['wall_s']:.1f} s, compile {number(record['compile_s'])} s, "
                  f"start-up {record['startup_s']:.1f} s, steady "
                  f"{record['steady_env_steps_per_s']:.0f} env steps/s, final return "
                  f"{', '.join(f'{x:.0f}' for x in record['final_return'])}",
                  file=sys.stderr, flush=True)

    single = summarize(records, 1, args.task)
    vmapped = summarize(records, args.vmap_seeds, args.task) if args.vmap_seeds > 1 else {}
    report = {
        **harness.provenance(command, load_before, jax_platform="cpu"),
        "seeds": args.seeds,
        "vmap_seeds": args.vmap_seeds,
        "settings": form.settings(args),
        "summary": {"single": single, "vmapped": vmapped,
                    **({"by_library": form.summary(records, args)} if form.summary else {})},
        "bars": form.bars(single, vmapped, records, task.return_bar) if form.bars else [],
        "versions": peer_tasks.versions(records),
        "runs": records,
    }
    harness.publish_report(report, markdown(report, args.task), peer_tasks.ROOT / args.out_json,
                           peer_tasks.ROOT / args.out_md)


if __name__ == "__main__":
    main()
