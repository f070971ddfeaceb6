"""Side-by-side SAC comparison on Pendulum-v1: jaxsac against stable-baselines3, sbx, rejax.

    make bench-peers          # creates .venv-peers, then runs this with the defaults
    .venv/bin/python -m experiments.benchmarks.compare_peers [--seeds 0 1 2] [--vmap-seeds 8]
    .venv/bin/python -m experiments.benchmarks.compare_peers --task cartpole
    .venv/bin/python -m experiments.benchmarks.compare_peers --task cartpole_balance

--task pendulum (the default) is the comparison described below. --task cartpole runs
discrete SAC on CartPole-v1 with jaxsac (both backends) and rejax only, in rejax's own
CartPole setting (CARTPOLE below), and writes docs/benchmarks/peers_cartpole.json and .md.
--task cartpole_balance runs jaxsac (JAX backend) and brax's SAC on MuJoCo Playground's
CartpoleBalance in Playground's own brax SAC setting (CARTPOLE_BALANCE below), one seed
per run (no vmapped runs), and writes docs/benchmarks/peers_cartpole_balance.json and .md.

Every run is a fresh process: jaxsac's runner under jaxsac's `.venv`, the peers' under
`.venv-peers` (made by experiments/benchmarks/setup_peers.sh; never a dependency of
jaxsac). The libraries alternate: round r runs every library once with seed r, starting
one library later than round r - 1, so drift on a noisy machine hits all of them alike.
Then jaxsac and rejax train --vmap-seeds seeds vmapped in one assembly, in alternating order.

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
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiments.benchmarks.peer_runners.common import steady_start

ROOT = Path(__file__).resolve().parents[2]

LIBRARIES = {
    # name: (virtualenv, runner module, extra runner arguments)
    "jaxsac-jax": (".venv", "jaxsac_sac", ["--backend", "jax"]),
    "jaxsac-gymnasium": (".venv", "jaxsac_sac", ["--backend", "gymnasium"]),
    "rejax": (".venv-peers", "rejax_sac", []),
    "sbx": (".venv-peers", "sbx_sac", []),
    "sb3": (".venv-peers", "sb3_sac", []),
    "brax": (".venv-peers", "brax_sac", []),
}
VMAPPED = ("jaxsac-jax", "rejax")
DESCRIPTIONS = {
    "jaxsac-jax": "jaxsac, JAX Pendulum inside the jitted program",
    "jaxsac-gymnasium": "jaxsac, gymnasium Pendulum-v1 from a host loop",
    "rejax": "rejax SAC, gymnax Pendulum, one jitted program",
    "sbx": "sbx SAC (SB3 loop, JAX networks), gymnasium Pendulum-v1",
    "sb3": "stable-baselines3 SAC (torch CPU), gymnasium Pendulum-v1",
    "brax": "brax SAC (brax.training.agents.sac), MuJoCo Playground task, pmapped epochs",
}


@dataclasses.dataclass(frozen=True)
class Task:
    """One comparison (TASKS): its libraries, defaults, runner settings and outputs."""

    libraries: tuple[str, ...]
    total_env_steps: int
    learning_starts: int
    buffer_size: int
    return_bar: float
    """A final return at or above it counts as solved."""
    out: str
    """Outputs <out>.json and <out>.md (relative to the repository)."""
    settings: Callable[[argparse.Namespace], dict[str, Any]]
    """The report's settings (what every runner ran with)."""
    header: Callable[[dict[str, Any]], list[str]]
    """The markdown's title, command, machine and settings."""
    bars: Callable[..., list[dict[str, Any]]] | None = None
    """(single, vmapped, records, return_bar) -> the bars jaxsac is held to."""
    runner_settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Every runner's settings beyond the shared ones (`flags` makes them arguments)."""
    jaxsac_settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    """jaxsac's runner's own further settings."""
    curves: bool = False
    """The tables add each seed's best in-run evaluation and when it reached return_bar."""
    vmap_seeds: int = 8
    """The default of --vmap-seeds (0: no vmapped runs)."""
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


def python_for(library: str, args: argparse.Namespace) -> str:
    return args.jaxsac_python if LIBRARIES[library][0] == ".venv" else args.peers_python


def flags(settings: dict[str, Any]) -> list[str]:
    """Runner arguments: {"num_envs": 5, "hidden": [64, 64]} -> --num-envs 5 --hidden 64 64;
    a bool is a switch: {"normalize_obs": True} -> --normalize-obs (False: left out)."""
    out = []
    for key, value in settings.items():
        if isinstance(value, bool):
            out += [f"--{key.replace('_', '-')}"] if value else []
            continue
        values = value if isinstance(value, list) else [value]
        out += [f"--{key.replace('_', '-')}", *map(str, values)]
    return out


def runner_command(library: str, seed: int, num_seeds: int,
                   args: argparse.Namespace) -> list[str]:
    task = TASKS[args.task]
    _, module, extra = LIBRARIES[library]
    if library == "sb3":
        extra = [*extra, "--torch-threads", str(args.torch_threads)]
    jaxsac = task.jaxsac_settings if module == "jaxsac_sac" else {}
    settings = {**task.runner_settings, **jaxsac, **getattr(args, "runner_overrides", {})}
    return [python_for(library, args), "-m", f"experiments.benchmarks.peer_runners.{module}",
            *extra, "--seed", str(seed), "--num-seeds", str(num_seeds),
            "--total-env-steps", str(args.total_env_steps),
            "--learning-starts", str(args.learning_starts),
            "--buffer-size", str(args.buffer_size), *flags(settings)]


def child_env(platform: str = "cpu") -> dict[str, str]:
    """The same environment for every run: JAX on `platform` (the CPU here; bench_gpu
    runs the runners on its accelerator), no persistent compilation cache (each run
    compiles from scratch, as a first run does)."""
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = platform
    if platform == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    for name in ("JAX_COMPILATION_CACHE_DIR", "JAX_ENABLE_COMPILATION_CACHE", "XLA_FLAGS"):
        env.pop(name, None)
    env["PYTHONPATH"] = str(ROOT)
    return env


def run_one(library: str, seed: int, num_seeds: int, args: argparse.Namespace,
            platform: str = "cpu") -> dict:
    """Runs one runner process; its record, or a record of the failure. `args` may carry
    `runner_overrides`, settings that replace the task's runner settings."""
    command = runner_command(library, seed, num_seeds, args)
    launch_unix = time.time()
    start = time.perf_counter()
    try:
        proc = subprocess.run(command, cwd=ROOT, env=child_env(platform), capture_output=True,
                              text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"library": library, "seed": seed, "num_seeds": num_seeds,
                "error": f"timed out after {args.timeout:.0f} s", "command": command}
    process_s = time.perf_counter() - start
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"library": library, "seed": seed, "num_seeds": num_seeds,
                "error": f"exit status {proc.returncode}",
                "stderr_tail": proc.stderr[-3000:], "command": command}
    record = json.loads(lines[-1])
    record["library"] = library
    record["process_s"] = round(process_s, 3)  # including imports and the evaluation
    record["launch_unix"] = launch_unix  # the marks are from record["clock_start_unix"]
    record["command"] = " ".join(shlex.quote(c) for c in command)
    return record


def schedule(args: argparse.Namespace) -> list[tuple[str, int, int]]:
    """(library, seed, num_seeds) in run order: rotated rounds, then the vmapped pairs."""
    libs = list(args.libraries)
    plan = []
    for r, seed in enumerate(args.seeds):
        k = r % len(libs)
        plan += [(lib, seed, 1) for lib in libs[k:] + libs[:k]]
    vmapped = [lib for lib in VMAPPED if lib in libs]
    if args.vmap_seeds > 0:
        for r in range(args.vmap_rounds):
            order = vmapped if r % 2 == 0 else vmapped[::-1]
            plan += [(lib, args.seeds[0] + r, args.vmap_seeds) for lib in order]
    return plan


# --- summaries ---------------------------------------------------------------------


def mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def first_at(steps: list[int], returns: list[float], bar: float) -> int | None:
    """The env steps of the first evaluation at or above `bar`; None if none is."""
    return next((step for step, x in zip(steps, returns, strict=True) if x >= bar), None)


def curve_summary(runs: list[dict], bar: float) -> dict[str, list]:
    """Per seed of `runs`: its best in-run evaluation and when it first reached `bar`."""
    curves = [(r["own_eval_env_steps"], seed) for r in runs for seed in r["own_eval_returns"]]
    return {"best_returns": [max(returns) for _, returns in curves],
            "env_steps_to_bar": [first_at(steps, returns, bar) for steps, returns in curves]}


def summarize(records: list[dict], num_seeds: int, task: Task) -> dict[str, dict[str, Any]]:
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
            "seeds_at_bar": sum(x >= task.return_bar for x in finals),
            "seeds": len(finals),
        }
        if task.curves:
            out[lib].update(curve_summary(ok, task.return_bar))
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


def minus(x: float) -> str:
    """A return as the tables print it: no decimals, a real minus sign."""
    return f"{x:.0f}".replace("-", "−")


def fmt(x: float | None, digits: int = 1) -> str:
    return "—" if x is None else f"{x:,.{digits}f}"


def times(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}×"


def fmt_steps(x: int | None) -> str:
    return "—" if x is None else f"{x:,}"


def table(summary: dict[str, dict], vmapped: bool, task: Task) -> list[str]:
    ref_jax = summary.get("jaxsac-jax", {}).get("steady_env_steps_per_s")
    ref_gym = summary.get("jaxsac-gymnasium", {}).get("steady_env_steps_per_s")
    rate_col = "env steps/s (all seeds)" if vmapped else "steady env steps/s"
    bar = minus(task.return_bar)
    head = ["library", "runs", "wall s", "compile s", "start-up s", rate_col,
            "jaxsac-jax ÷ this"]
    if not vmapped:
        head.append("jaxsac-gym ÷ this")
    head += ["final return per seed", f"seeds ≥ {bar}"]
    if task.curves:
        head += ["best in-run eval per seed", f"env steps to ≥ {bar} per seed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for lib, s in summary.items():
        key = "aggregate_env_steps_per_s" if vmapped else "steady_env_steps_per_s"
        rate = s[key]
        if vmapped:
            ref_jax = summary.get("jaxsac-jax", {}).get(key)
        spread = ("" if vmapped or s["runs"] < 2 or rate is None else
                  f" ({fmt(s['steady_env_steps_per_s_min'], 0)}–"
                  f"{fmt(s['steady_env_steps_per_s_max'], 0)})")
        row = [lib, f"{s['runs']}" + (f" ({s['failed']} failed)" if s["failed"] else ""),
               fmt(s["wall_s"]), fmt(s["compile_s"]), fmt(s["startup_s"]),
               fmt(rate, 0) + spread, times(ratio(ref_jax, rate))]
        if not vmapped:
            row.append(times(ratio(ref_gym, rate)))
        row += [", ".join(minus(x) for x in s["final_returns"]) or "—",
                f"{s['seeds_at_bar']}/{s['seeds']}"]
        if task.curves:
            row += [", ".join(minus(x) for x in s["best_returns"]) or "—",
                    ", ".join(fmt_steps(x) for x in s["env_steps_to_bar"]) or "—"]
        lines.append("| " + " | ".join(row) + " |")
    return lines


# --- machine, versions, output -------------------------------------------------------


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                            "python": platform.python_version()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["memory_gib"] = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return info


def versions(records: list[dict]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for r in records:
        if "versions" in r:
            out.setdefault(r["library"], r["versions"])
    return out


def machine_line(report: dict[str, Any]) -> str:
    return (f"Machine: {report['machine'].get('cpu', '?')}, {report['machine']['cpu_count']} "
            f"cores, {report['machine'].get('memory_gib', '?')} GiB, "
            f"{report['machine']['platform']}, Python {report['machine']['python']}; "
            f"load average {report['load_before']} before, {report['load_after']} after "
            "(1, 5, 15 min; timings are comparable only when nothing else ran).")


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
        machine_line(report),
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
        machine_line(report),
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
        f"{minus(settings['return_bar'])}: each library's own evaluation (10 deterministic "
        f"episodes of its JAX CartPole, or of gymnasium's for jaxsac-gymnasium) every "
        f"{every:,} env steps; — where no evaluation reached it. Steady env steps/s: env "
        f"steps {settings['steady_window'][0]:,}–{settings['steady_window'][1]:,} over the "
        "time between them.",
        "",
    ]


def markdown(report: dict[str, Any], task: Task) -> str:
    lines = list(task.header(report))
    if task.tables is not None:
        lines += task.tables(report)
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
        if task.tables is not None:
            lines += ["(Vmapped runs: jaxsac only; the tables above are of the one-seed "
                      "runs.)", ""]
    if report["bars"]:
        lines += bar_lines(report["bars"])
    lines += ["## Versions", ""]
    for lib, v in report["versions"].items():
        lines.append(f"- {lib}: " + ", ".join(f"{k} {x}" for k, x in sorted(v.items())))
    failures = [r for r in report["runs"] if "error" in r]
    if failures:
        lines += ["", "## Failed runs", ""]
        lines += [f"- {r['library']} seed {r['seed']}: {r['error']}" for r in failures]
    return "\n".join(lines) + "\n"


def bar_lines(bars: list[dict[str, Any]]) -> list[str]:
    lines = ["## Bars", "",
             "Speed ratios: of the mean steady env steps/s; each round's own ratio follows.",
             "", "| bar | value | per round | passed |", "|---|---|---|---|"]
    for b in bars:
        passed = {True: "yes", False: "**no**", None: "—"}[b["passed"]]
        rounds = ", ".join(f"{x:.2f}" for x in b.get("per_round", [])) or "—"
        lines.append(f"| {b['bar']} | {b['value'] if b['value'] is not None else '—'} "
                     f"| {rounds} | {passed} |")
    return lines + [""]


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


CARTPOLE = {
    # rejax's CartPole SAC (configs/gymnax/cartpole.yaml: num_envs 5, num_epochs 2,
    # learning_rate 0.001, polyak 0.95, tanh, rejax's default 64x64), the same as jaxsac's
    # tuned CartPole-v1, with the target entropy 0.5 log|A| of jaxsac's "auto" (rejax's
    # config asks for 0.7 log|A|). Every runner gets these.
    "env_id": "CartPole-v1", "num_envs": 5, "utd_ratio": 0.4, "hidden": [64, 64],
    "activation": "tanh", "lr": 1e-3, "tau": 0.05, "target_entropy_scale": 0.5,
    "mark_every": 5_000,
}
CARTPOLE_JAXSAC = {
    # jaxsac's Polyak update once per 2 gradient steps, i.e. once per iteration after its
    # 2 gradient steps, as rejax does it (jaxsac's tuned file: after every gradient step).
    "target_update_every": 2,
}


def cartpole_settings(args: argparse.Namespace) -> dict[str, Any]:
    return {
        **CARTPOLE, "total_env_steps": args.total_env_steps,
        "learning_starts": args.learning_starts, "buffer_size": args.buffer_size,
        "batch_size": 256, "gamma": 0.99,
        "gradient_steps_per_iteration": round(CARTPOLE["utd_ratio"] * CARTPOLE["num_envs"]),
        "alpha": f"learned, initial 1, target {CARTPOLE['target_entropy_scale']:g} log|A|",
        "jaxsac_target_update_every": CARTPOLE_JAXSAC["target_update_every"],
        "eval_episodes": 10, "return_bar": TASKS["cartpole"].return_bar,
        "steady_window": [steady_start(args.learning_starts, CARTPOLE["mark_every"]),
                          args.total_env_steps],
    }



CARTPOLE_BALANCE = {
    # MuJoCo Playground's brax SAC config for the dm_control suite
    # (mujoco_playground/config/dm_control_suite_params.py, brax_sac_config): 128 envs,
    # batch 512, 8 gradient steps per step of the 128 envs, learning rate 1e-3, LayerNorm
    # in the critics, normalized observations, discount 0.99, min replay size 8,192
    # (learning_starts); brax's default 256x256 ReLU networks and tau 0.005. Its 5M env
    # steps and 4M-transition buffer are cut to a CPU budget (the task's total_env_steps,
    # the buffer holding the whole run). Every runner gets these.
    "env_id": "playground/CartpoleBalance", "num_envs": 128, "utd_ratio": 8 / 128,
    "batch_size": 512, "hidden": [256, 256], "activation": "relu", "lr": 1e-3,
    "gamma": 0.99, "tau": 0.005, "normalize_obs": True, "critic_layer_norm": True,
    "mark_every": 8_192, "eval_episodes": 10,
}
CARTPOLE_BALANCE_JAXSAC = {
    # What brax's SAC fixes, given to jaxsac so that both run the same settings: alpha's
    # Adam learning rate 3e-4 and target entropy -0.5 |A| (-0.5 for CartpoleBalance's one
    # action); initial alpha 1 is already jaxsac's runner setting.
    "alpha_lr": 3e-4, "target_entropy": -0.5,
}


def cartpole_balance_settings(args: argparse.Namespace) -> dict[str, Any]:
    s = CARTPOLE_BALANCE
    return {
        **s, "total_env_steps": args.total_env_steps,
        "learning_starts": args.learning_starts, "buffer_size": args.buffer_size,
        "gradient_steps_per_iteration": round(s["utd_ratio"] * s["num_envs"]),
        "alpha": "learned, initial 1, Adam 3e-4, target -0.5 |A| = -0.5 (brax's fixed "
                 "choices; jaxsac given the same)",
        "jaxsac": CARTPOLE_BALANCE_JAXSAC,
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
        machine_line(report),
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
    utd = CARTPOLE_BALANCE["utd_ratio"]
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
    per_seed = lambda xs, digits=0: ", ".join(fmt(x, digits) for x in xs) or "—"  # noqa: E731
    lines = [f"## Speed: one seed per run ({rounds} round{'s' if rounds != 1 else ''}, "
             "libraries alternating), medians (per seed)", "",
             "| library | runs | wall s | compile s | start-up s | steady env steps/s | "
             "gradient steps/s | jaxsac-jax ÷ this |",
             "|---|---|---|---|---|---|---|---|"]
    for lib, s in summary.items():
        m, p = s["median"], s["per_seed"]
        runs = f"{s['runs']}" + (f" ({s['failed']} failed)" if s["failed"] else "")
        lines.append(
            f"| {lib} | {runs} | {fmt(m['wall_s'])} ({per_seed(p['wall_s'], 1)}) "
            f"| {fmt(m['compile_s'])} ({per_seed(p['compile_s'], 1)}) "
            f"| {fmt(m['startup_s'])} ({per_seed(p['startup_s'], 1)}) "
            f"| {fmt(m['steady_env_steps_per_s'], 0)} ({per_seed(p['steady_env_steps_per_s'])}) "
            f"| {fmt(m['gradient_steps_per_s'], 0)} ({per_seed(p['gradient_steps_per_s'])}) "
            f"| {times(ratio(ref, m['steady_env_steps_per_s']))} |")
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
              "`own_eval_before_training`).", "",
              "| env steps | " + " | ".join(libs) + " |", "|---|" + "---|" * len(libs)]
    for step in steps:
        cells = []
        for lib in libs:
            e = summary[lib]["own_eval"].get(str(step))
            cells.append("—" if e is None else
                         f"{minus(e['median'])} ({', '.join(minus(x) for x in e['per_seed'])})")
        lines.append(f"| {step:,} | " + " | ".join(cells) + " |")
    finals = []
    for lib in libs:
        xs = summary[lib]["per_seed"]["final_return"]
        finals.append("—" if not xs else
                      f"**{minus(median(xs))}** ({', '.join(minus(x) for x in xs)})")
    lines.append("| final, common evaluation | " + " | ".join(finals) + " |")
    bar = report["settings"]["return_bar"]
    lines += ["", "Final returns ≥ " + minus(bar) + ": " + "; ".join(
        f"{lib} {sum(x >= bar for x in summary[lib]['per_seed']['final_return'])}/"
        f"{len(summary[lib]['per_seed']['final_return'])}" for lib in libs) + ".", ""]
    return lines

TASKS = {
    "pendulum": Task(libraries=("jaxsac-jax", "jaxsac-gymnasium", "rejax", "sbx", "sb3"),
                     total_env_steps=20_000,
                     learning_starts=1_000, buffer_size=20_000, return_bar=-250.0,
                     out="docs/benchmarks/peers", settings=pendulum_settings,
                     header=pendulum_header, bars=pendulum_bars),
    "cartpole": Task(libraries=("jaxsac-jax", "jaxsac-gymnasium", "rejax"),
                     total_env_steps=50_000, learning_starts=1_000, buffer_size=10_000,
                     return_bar=475.0, out="docs/benchmarks/peers_cartpole",
                     settings=cartpole_settings, header=cartpole_header,
                     runner_settings=CARTPOLE, jaxsac_settings=CARTPOLE_JAXSAC,
                     curves=True),
    "cartpole_balance": Task(libraries=("jaxsac-jax", "brax"), total_env_steps=163_840,
                             learning_starts=8_192, buffer_size=163_840, return_bar=900.0,
                             out="docs/benchmarks/peers_cartpole_balance",
                             settings=cartpole_balance_settings,
                             header=cartpole_balance_header,
                             runner_settings=CARTPOLE_BALANCE,
                             jaxsac_settings=CARTPOLE_BALANCE_JAXSAC, vmap_seeds=0,
                             summary=cartpole_balance_summary,
                             tables=cartpole_balance_tables),
}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    task = TASKS[args.task]
    command = " ".join([".venv/bin/python -m experiments.benchmarks.compare_peers",
                        *(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))])
    for lib in args.libraries:
        python = ROOT / python_for(lib, args)
        if not python.exists():
            hint = ("run `bash experiments/benchmarks/setup_peers.sh` (or `make bench-peers`)"
                    if LIBRARIES[lib][0] == ".venv-peers" else "run `make install`")
            raise SystemExit(f"compare_peers: {python} is missing for {lib}; {hint}")

    plan = schedule(args)
    load_before = [round(x, 2) for x in os.getloadavg()]
    records = []
    for i, (lib, seed, num_seeds) in enumerate(plan, 1):
        label = f"[{i}/{len(plan)}] {lib} seed {seed}" + (
            f" ×{num_seeds} vmapped" if num_seeds > 1 else "")
        print(label + " ...", file=sys.stderr, flush=True)
        record = run_one(lib, seed, num_seeds, args)
        records.append(record)
        if "error" in record:
            print(f"    FAILED: {record['error']}\n{record.get('stderr_tail', '')}",
                  file=sys.stderr, flush=True)
        else:
            print(f"    wall {record['wall_s']:.1f} s, compile {fmt(record['compile_s'])} s, "
                  f"start-up {record['startup_s']:.1f} s, steady "
                  f"{record['steady_env_steps_per_s']:.0f} env steps/s, final return "
                  f"{', '.join(f'{x:.0f}' for x in record['final_return'])}",
                  file=sys.stderr, flush=True)

    single = summarize(records, 1, task)
    vmapped = summarize(records, args.vmap_seeds, task) if args.vmap_seeds > 1 else {}
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "machine": machine(),
        "load_before": load_before,
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "seeds": args.seeds,
        "vmap_seeds": args.vmap_seeds,
        "settings": task.settings(args),
        "summary": {"single": single, "vmapped": vmapped,
                    **({"by_library": task.summary(records, args)} if task.summary else {})},
        "bars": task.bars(single, vmapped, records, task.return_bar) if task.bars else [],
        "versions": versions(records),
        "runs": records,
    }
    write_report(report, markdown(report, task), args.out_json, args.out_md)


def write_report(report: dict[str, Any], text: str, out_json: str, out_md: str) -> None:
    """Prints the markdown and writes it and the JSON report (paths relative to the
    repository)."""
    print(text)
    for path, content in ((out_json, json.dumps(report, indent=1) + "\n"), (out_md, text)):
        target = ROOT / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        print(f"wrote {target}", file=sys.stderr)


if __name__ == "__main__":
    main()
