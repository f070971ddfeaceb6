"""Learning on gymnasium MuJoCo: jaxsac's critic families against jaxsac's vanilla SAC
and sbx's SAC, TQC and CrossQ, at equal env steps, one (task, agent, seed) per process.

    .venv/bin/python -m experiments.benchmarks.learn_mujoco --budget-minutes 120
    .venv/bin/python -m experiments.benchmarks.learn_mujoco --tasks Hopper-v5 \\
        --agents jaxsac-crossq sbx-crossq --seeds 0 1 2
    .venv/bin/python -m experiments.benchmarks.learn_mujoco --report

Each run is its own subprocess (jaxsac's runner under jaxsac's .venv, sbx's under the
peers' .venv-peers, both from peer_runners/), evaluated every --eval-every env steps by
the same function (`peer_runners.common.evaluate`: deterministic episodes of gymnasium's
env, reset seeds 10000, 10001, ...). Each finished run appends one JSON line to --out
(docs/benchmarks/mujoco_families.jsonl): the curve, wall-clock, training time without
the evaluations, env steps/s, the commit, the machine and its load. Runs already in
--out (same task, agent, seed and env steps) are skipped, so the grid is run piecewise
and resumed: --budget-minutes stops starting new runs after that long. The order is
seed by seed, task by task, the libraries alternating (jaxsac, sbx, jaxsac, ... and the
other way round in the next block), so a partial grid stays a fair comparison. Failed
runs are printed, not recorded (the next invocation retries them).

--report writes the table (final return mean ± std over the recorded seeds at
--total-env-steps, per task and agent) to docs/benchmarks/mujoco_families.md and starts
no run.

The settings of every agent, and where they come from, are in AGENTS below and in
docs/BENCHMARKS.md ("Learning on gymnasium MuJoCo").
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from experiments.benchmarks import harness, peer_tasks

ROOT = peer_tasks.ROOT
OUT = "docs/benchmarks/mujoco_families.jsonl"
REPORT_MD = "docs/benchmarks/mujoco_families.md"

TASKS = {
    # The categorical critic's support [v_min, v_max] per task (jaxsac requires one; no
    # paper gives these for gymnasium's MuJoCo tasks). Chosen here from the reward
    # scales at γ = 0.99: returns of a 1,000-step episode of about 3,500 (Hopper), 5,000
    # (Walker2d) and 12,000 (HalfCheetah) are about 3.5, 5 and 12 per step, discounted
    # sums of about 350, 500 and 1,200; the margins take the entropy bonus and early
    # negative rewards.
    "Hopper-v5": {"v_min": -100.0, "v_max": 600.0},
    "Walker2d-v5": {"v_min": -100.0, "v_max": 800.0},
    "HalfCheetah-v5": {"v_min": -500.0, "v_max": 1_500.0},
}

# --- the agents ------------------------------------------------------------------------

SAC_MUJOCO = {
    # RL Zoo's hyperparams/sac.yml, "mujoco-defaults" (HalfCheetah, Hopper, Walker2d;
    # DLR-RM/rl-baselines3-zoo at c94924e5): learning_starts 10,000, the rest SB3's / sbx's
    # SAC defaults: learning rate 3e-4 (actor, critics, α), buffer 10^6, batch 256, τ 0.005,
    # γ 0.99, one gradient step per env step, 256x256 ReLU, α learned from 1 toward -|A|.
    "learning_starts": 10_000, "buffer_capacity": 1_000_000, "batch_size": 256,
    "hidden_sizes": [256, 256], "activation": "relu", "actor_lr": 3e-4, "critic_lr": 3e-4,
    "alpha_lr": 3e-4, "tau": 0.005, "gamma": 0.99, "utd_ratio": 1.0, "initial_alpha": 1.0,
    "target_entropy": "auto", "num_q": 2,
}
CROSSQ_MUJOCO = {
    # RL Zoo's hyperparams/crossq.yml, "mujoco-defaults" (DLR-RM/rl-baselines3-zoo at
    # 208b6fdf): learning rate 1e-3, learning_starts 5,000, policy_delay 3 (also sbx's
    # CrossQ default); sbx's CrossQ defaults: batch renormalization momentum 0.99, 100,000
    # steps of batch normalization before renormalization, no target network.
    "learning_starts": 5_000, "actor_lr": 1e-3, "critic_lr": 1e-3, "alpha_lr": 1e-3,
}


@dataclasses.dataclass(frozen=True)
class Agent:
    """One agent of the grid: its library's runner and its settings."""

    library: str
    """"jaxsac" (runner jaxsac_families, jaxsac's .venv) or "sbx" (runner sbx_families,
    .venv-peers)."""
    settings: dict[str, Any]
    """jaxsac: SACConfig fields; sbx: the algorithm class's keyword arguments."""
    source: str
    """Where the settings come from, and how they differ from the paper / the peer."""
    algo: str | None = None
    """sbx: "sac", "tqc" or "crossq"."""
    categorical_support: bool = False
    """jaxsac's categorical critic: v_min, v_max from TASKS."""
    default: bool = True
    """In the default grid (else only when named with --agents)."""

    def settings_for(self, env_id: str) -> dict[str, Any]:
        return {**self.settings, **(TASKS[env_id] if self.categorical_support else {})}


AGENTS = {
    "jaxsac-sac": Agent("jaxsac", {**SAC_MUJOCO, "critic": "ensemble"},
                        "vanilla SAC (critic \"ensemble\", twin critics), with RL Zoo's SAC "
                        "settings for MuJoCo: those of sbx-sac"),
    "jaxsac-tqc": Agent("jaxsac", {**SAC_MUJOCO, "critic": "tqc", "num_q": 5,
                                   "num_quantiles": 25, "quantiles_to_drop_per_net": 2},
                        "TQC: 5 critics x 25 quantiles, 2 dropped per critic (Kuznetsov et al. "
                        "2020's N = 5 and M = 25; d = 2 is sbx's default, the paper tunes d "
                        "per task); 256x256 actor and critics (the paper's critics are "
                        "3x512); the rest as jaxsac-sac"),
    "jaxsac-crossq": Agent("jaxsac", {**SAC_MUJOCO, **CROSSQ_MUJOCO, "critic": "crossq",
                                      "policy_update_every": 3, "batch_norm_momentum": 0.99,
                                      "batch_renorm_warmup": 100_000, "adam_b1": 0.5,
                                      "actor_batch_renorm": True},
                           "CrossQ (Bhatt et al. 2024): no target network, batch-renormalized "
                           "critics, policy delay 3, learning rate 1e-3, learning starts "
                           "5,000 (RL Zoo's crossq.yml). Differs from sbx-crossq: 256x256 "
                           "critics (jaxsac's actor and critics share hidden_sizes; sbx uses "
                           "1024x1024, RL Zoo and the paper 2048x2048); Adam beta1 0.5 and a "
                           "batch-renormalized actor, as sbx and the paper"),
    "jaxsac-categorical": Agent("jaxsac", {**SAC_MUJOCO, "critic": "categorical",
                                           "num_atoms": 101, "categorical_target": "c51"},
                                "twin categorical critics, 101 atoms, C51 projection (jaxsac's "
                                "defaults), support per task (TASKS); the rest as jaxsac-sac",
                                categorical_support=True),
    "sbx-sac": Agent("sbx", {"learning_starts": 10_000}, "sbx's SAC defaults (lr 3e-4, "
                     "buffer 10^6, batch 256, tau 0.005, gamma 0.99, 256x256, ent_coef auto) "
                     "with RL Zoo's MuJoCo learning_starts 10,000 (sac.yml)", algo="sac"),
    "sbx-tqc": Agent("sbx", {"learning_starts": 10_000}, "sbx's TQC defaults (2 critics x 25 "
                     "quantiles, 2 dropped per critic, lr 3e-4, batch 256, 256x256) with "
                     "learning_starts 10,000 (RL Zoo's SAC MuJoCo setting; its tqc.yml MuJoCo "
                     "entries were not checked here)", algo="tqc"),
    "sbx-crossq": Agent("sbx", {"learning_starts": 5_000, "learning_rate": 1e-3,
                                "policy_delay": 3},
                        "sbx's CrossQ defaults (actor 256x256, critics 1024x1024, batch "
                        "renormalization in actor and critics, Adam beta1 0.5, no target "
                        "network) with RL Zoo's crossq.yml MuJoCo lr 1e-3, learning_starts "
                        "5,000, policy_delay 3; RL Zoo's 2048x2048 critics are left at sbx's "
                        "1024 for the CPU's sake", algo="crossq"),
    # Not in the default grid (name them with --agents):
    "jaxsac-simbav2": Agent("jaxsac", {**SAC_MUJOCO, "critic": "categorical",
                                       "network": "simbav2", "num_atoms": 101,
                                       "categorical_target": "c51"},
                            "categorical critics on SimbaV2 bodies, width 256, 2 blocks "
                            "(actor and critics alike; the paper's critic is 512 wide), "
                            "without SimbaV2's reward scaling; the rest as jaxsac-sac",
                            categorical_support=True, default=False),
    "sbx-sac-simba": Agent("sbx", {"learning_starts": 10_000, "policy": "SimbaPolicy"},
                           "sbx's SAC with its SimbaPolicy (SimBa, Lee et al. 2024, the first "
                           "version: sbx 0.28 has no SimbaV2), its defaults otherwise, "
                           "learning_starts 10,000", algo="sac", default=False),
    "sbx-crossq-256": Agent("sbx", {"learning_starts": 5_000, "learning_rate": 1e-3,
                                    "policy_delay": 3, "policy_kwargs": {"net_arch": [256, 256]}},
                            "sbx-crossq with 256x256 critics, the width of jaxsac-crossq",
                            algo="crossq", default=False),
}
DEFAULT_AGENTS = [name for name, agent in AGENTS.items() if agent.default]

# --- the plan ---------------------------------------------------------------------------


def plan(tasks: list[str], agents: list[str], seeds: list[int]) -> list[tuple[str, str, int]]:
    """(task, agent, seed) in run order: seed by seed, task by task; within a block the
    libraries alternate, jaxsac first in even blocks and sbx first in odd ones."""
    out = []
    for block, (seed, task) in enumerate(itertools.product(seeds, tasks)):
        by_library = [[a for a in agents if AGENTS[a].library == lib] for lib in ("jaxsac", "sbx")]
        if block % 2:
            by_library.reverse()
        for pair in itertools.zip_longest(*by_library):
            out += [(task, agent, seed) for agent in pair if agent is not None]
    return out


def run_key(record: dict[str, Any]) -> tuple[str, str, int, int]:
    return (record["task"], record["agent"], int(record["seed"]),
            int(record["total_env_steps"]))


def load_records(path: Path) -> list[dict[str, Any]]:
    """The records of `path` (one JSON object a line; none if it does not exist)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def pending(runs: list[tuple[str, str, int]], records: list[dict[str, Any]],
            total_env_steps: int) -> list[tuple[str, str, int]]:
    """The runs of `runs` not yet recorded at `total_env_steps`."""
    done = {run_key(r) for r in records}
    return [r for r in runs if (*r, total_env_steps) not in done]


def append_record(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")


# --- one run -----------------------------------------------------------------------------


def runner_command(args: argparse.Namespace, task: str, agent_name: str,
                   seed: int) -> list[str]:
    agent = AGENTS[agent_name]
    settings = agent.settings_for(task)
    if args.learning_starts is not None:
        settings["learning_starts"] = args.learning_starts
    python = args.python if agent.library == "jaxsac" else args.peers_python
    module = f"experiments.benchmarks.peer_runners.{agent.library}_families"
    return [python, "-m", module, *(["--algo", agent.algo] if agent.algo else []),
            "--env-id", task, "--seed", str(seed),
            "--total-env-steps", str(args.total_env_steps),
            "--eval-every", str(args.eval_every), "--eval-episodes", str(args.eval_episodes),
            "--settings", json.dumps(settings, sort_keys=True)]


def child_env() -> dict[str, str]:
    """JAX on the CPU, no compilation cache (peer_tasks.child_env), and the caller's
    PYTHONPATH after the repository's."""
    env = peer_tasks.child_env("cpu")
    extra = os.environ.get("PYTHONPATH")
    if extra:
        env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{extra}"
    return env


def git_commit() -> dict[str, Any]:
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout
    return {"commit": git("rev-parse", "HEAD").strip() or None,
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no").strip())}


def cpu_seconds(pid: int) -> float | None:
    """User and system CPU seconds of process `pid` (Linux's /proc; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_process(command: list[str], timeout: float, stall_s: float
                ) -> tuple[int | None, str, str, str | None]:
    """Runs `command` (from the repository, child_env()); (exit status, stdout, stderr,
    None), or the process killed and why: after `timeout` seconds, or once it has taken
    less than one CPU second in `stall_s` seconds (a stalled XLA runtime waits forever,
    see docs/semantics.md "Network bodies")."""
    proc = subprocess.Popen(command, cwd=ROOT, env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    start = last_progress = time.perf_counter()
    last_cpu = cpu_seconds(proc.pid)
    while True:
        try:
            stdout, stderr = proc.communicate(timeout=min(30.0, stall_s / 2))
            return proc.returncode, stdout, stderr, None
        except subprocess.TimeoutExpired:
            now, cpu = time.perf_counter(), cpu_seconds(proc.pid)
            if cpu is None or last_cpu is None or cpu - last_cpu >= 1.0:
                last_cpu, last_progress = cpu, now
            error = (f"timed out after {timeout:.0f} s" if now - start > timeout else
                     f"stalled: under 1 CPU second in {stall_s:.0f} s, killed"
                     if now - last_progress > stall_s else None)
            if error:
                proc.kill()
                stdout, stderr = proc.communicate()
                return proc.returncode, stdout, stderr, error


def run_one(args: argparse.Namespace, task: str, agent: str, seed: int,
            harness_command: str) -> dict[str, Any]:
    """Runs one (task, agent, seed); its record, or {"error": ...}."""
    command = runner_command(args, task, agent, seed)
    identity = {"task": task, "agent": agent, "seed": seed,
                "total_env_steps": args.total_env_steps}
    load_before, commit = harness.load_average(), git_commit()  # the code the run starts with
    start = time.perf_counter()
    returncode, stdout, stderr, error = run_process(command, args.timeout,
                                                    args.stall_minutes * 60)
    if error:
        return {**identity, "error": error, "stderr_tail": stderr[-3000:]}
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if returncode != 0 or not lines:
        return {**identity, "error": f"exit status {returncode}",
                "stderr_tail": stderr[-3000:]}
    return {**identity, **json.loads(lines[-1]),
            "process_s": round(time.perf_counter() - start, 3),
            "date": harness.utc_date(), **commit,
            "machine": harness.machine(devices=False),
            "load_before": load_before, "load_after": harness.load_average(),
            "command": portable(" ".join(shlex.quote(c) for c in command), args),
            "harness_command": portable(harness_command, args)}


def portable(command: str, args: argparse.Namespace) -> str:
    """`command` as recorded: the interpreters named as the repository's virtualenvs
    (wherever --python and --peers-python pointed)."""
    for given, name in ((args.python, ".venv/bin/python"),
                        (args.peers_python, ".venv-peers/bin/python")):
        command = command.replace(shlex.quote(given), name).replace(given, name)
    return command


# --- the report ----------------------------------------------------------------------------


def mean_std(xs: list[float]) -> str:
    if not xs:
        return "—"
    std = f" ± {statistics.stdev(xs):,.0f}" if len(xs) > 1 else ""
    return f"{statistics.fmean(xs):,.0f}{std}"


def summary(records: list[dict[str, Any]], total_env_steps: int
            ) -> dict[str, dict[str, dict[str, Any]]]:
    """{task: {agent: seeds, final returns per seed, their mean, env steps/s, the mean
    curve over the seeds}} of the records at `total_env_steps` (one per (task, agent,
    seed): the last recorded)."""
    latest: dict[tuple, dict[str, Any]] = {}
    for r in records:
        if int(r["total_env_steps"]) == total_env_steps and "error" not in r:
            latest[run_key(r)] = r
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for (task, agent, _, _), r in sorted(latest.items(), key=lambda kv: kv[0][2]):
        s = out.setdefault(task, {}).setdefault(agent, {"seeds": [], "final": [],
                                                        "rate": [], "curves": []})
        s["seeds"].append(int(r["seed"]))
        s["final"].append(float(r["final_return"]))
        s["rate"].append(r.get("env_steps_per_s"))
        s["curves"].append(dict(zip(r["eval_env_steps"], r["eval_mean"], strict=True)))
    for agents in out.values():
        for s in agents.values():
            s["mean"] = statistics.fmean(s["final"])
            steps = sorted(set.intersection(*(set(c) for c in s["curves"])))
            s["curve"] = {step: statistics.fmean(c[step] for c in s["curves"]) for step in steps}
    return out


def verdict(agents: dict[str, dict[str, Any]]) -> str:
    """The issue's target on one task, on the seeds recorded."""
    best = lambda lib: max(((a, s["mean"]) for a, s in agents.items()  # noqa: E731
                            if a in AGENTS and AGENTS[a].library == lib and a != "jaxsac-sac"),
                           key=lambda x: x[1], default=None)
    ours, theirs = best("jaxsac"), best("sbx")
    parts = []
    if ours and theirs:
        parts.append(f"jaxsac's best family {ours[0]} {ours[1]:,.0f} "
                     f"{'≥' if ours[1] >= theirs[1] else '<'} sbx's best {theirs[0]} "
                     f"{theirs[1]:,.0f}")
    if ours and "jaxsac-sac" in agents:
        parts.append(f"{ours[0]} ÷ jaxsac-sac: {ours[1] / agents['jaxsac-sac']['mean']:.2f}×"
                     if agents["jaxsac-sac"]["mean"] > 0 else "jaxsac-sac's mean ≤ 0")
    return "; ".join(parts) or "not enough agents recorded"


def conditions(records: list[dict[str, Any]]) -> list[str]:
    """Where the records ran: their machines, commits, dates and load averages."""
    if not records:
        return []
    machines = sorted({harness.machine_line(r["machine"]) for r in records if "machine" in r})
    commits = sorted({r["commit"][:10] + ("+" if r.get("dirty") else "")
                      for r in records if r.get("commit")})
    dates = sorted(r["date"] for r in records if "date" in r)
    loads = [r[k][0] for r in records for k in ("load_before", "load_after") if k in r]
    line = (f"Runs from {dates[0]} to {dates[-1]}" if dates else "Runs") + (
        f", commits {', '.join(commits)}" if commits else "") + (
        f"; 1-min load average {min(loads):.1f}–{max(loads):.1f} at their starts and ends"
        if loads else "") + "."
    return [line, "", *(f"- Machine: {m}" for m in machines), ""] if machines else [line, ""]


def markdown(records: list[dict[str, Any]], total_env_steps: int, out: str,
             agents_order: list[str]) -> str:
    table = summary(records, total_env_steps)
    at = [r for r in records if int(r["total_env_steps"]) == total_env_steps]
    episodes = " or ".join(str(e) for e in sorted({r.get("eval_episodes", 10) for r in at})
                           ) or "10"
    lines = [
        f"# Learning on gymnasium MuJoCo at {total_env_steps:,} env steps: jaxsac's critic "
        "families and sbx",
        "",
        f"Generated {harness.utc_date()} by `.venv/bin/python -m "
        f"experiments.benchmarks.learn_mujoco --report` from `{out}` ({len(at)} runs at "
        f"{total_env_steps:,} env steps). How it runs and the agents' settings: "
        "[docs/BENCHMARKS.md](../BENCHMARKS.md#learning-on-gymnasium-mujoco).",
        "",
        f"Final return: mean of {episodes} deterministic episodes of gymnasium's env (episode "
        "i reset with seed 10000 + i, the same evaluation for every library) after the last "
        "env step; mean "
        "± standard deviation over the seeds recorded (n), each seed's value after. Env "
        "steps/s: env steps over the run's wall time without the evaluations (compilation "
        "and warm-up included), median over the seeds; the load averages below say how much "
        "else ran (each record has its own), so rates are indicative. Published anchors "
        "are left out: no figure at this env-step count could be checked exactly.",
        "",
        *conditions(at),
    ]
    if not table:
        lines += ["No run recorded yet at this env-step count.", ""]
    for task in [t for t in TASKS if t in table] + sorted(set(table) - set(TASKS)):
        agents = table[task]
        order = [a for a in agents_order if a in agents] + sorted(set(agents) - set(agents_order))
        rows = [[a, str(len(agents[a]["seeds"])), mean_std(agents[a]["final"]),
                 ", ".join(f"{x:,.0f}" for x in agents[a]["final"]),
                 harness.number(statistics.median(x for x in agents[a]["rate"] if x)
                                if any(agents[a]["rate"]) else None, 0)]
                for a in order]
        lines += [f"## {task}", "",
                  *harness.markdown_table(["agent", "n", "final return", "per seed",
                                           "env steps/s"], rows, "llrrr"),
                  "", f"Target (on the seeds recorded): {verdict(agents)}.", ""]
        steps = sorted(set().union(*(agents[a]["curve"] for a in order)))
        curve_rows = [[f"{step:,}"] + [harness.number(agents[a]["curve"].get(step), 0)
                                       for a in order] for step in steps]
        lines += ["Mean return over the seeds at each evaluation:", "",
                  *harness.markdown_table(["env steps", *order], curve_rows,
                                          "r" * (len(order) + 1)), ""]
    versions: dict[str, dict[str, str]] = {}
    for r in at:
        versions.setdefault(r.get("library", "?"), r.get("versions", {}))
    lines += peer_tasks.versions_lines(versions)
    return "\n".join(lines) + "\n"


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    p.add_argument("--agents", nargs="+", default=DEFAULT_AGENTS, choices=list(AGENTS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--total-env-steps", type=int, default=100_000)
    p.add_argument("--eval-every", type=int, default=5_000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--learning-starts", type=int, default=None,
                   help="override every agent's learning_starts (smoke runs only)")
    p.add_argument("--budget-minutes", type=float, default=None,
                   help="start no run after this many minutes (a started run finishes)")
    p.add_argument("--out", default=OUT, help="the results file (JSON lines), appended to")
    p.add_argument("--report", action="store_true",
                   help="write the report of --out to --report-md and start no run")
    p.add_argument("--report-md", default=REPORT_MD)
    p.add_argument("--dry-run", action="store_true", help="print the pending runs and exit")
    p.add_argument("--python", default=str(ROOT / ".venv/bin/python"),
                   help="jaxsac's interpreter")
    p.add_argument("--peers-python", default=str(ROOT / ".venv-peers/bin/python"),
                   help="the peers' interpreter (experiments/benchmarks/setup_peers.sh)")
    p.add_argument("--timeout", type=float, default=6 * 3600.0, help="seconds per run")
    p.add_argument("--stall-minutes", type=float, default=10.0,
                   help="kill a run that takes under one CPU second in this long")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out = ROOT / args.out if not Path(args.out).is_absolute() else Path(args.out)
    records = load_records(out)
    if args.report:
        md = markdown(records, args.total_env_steps, args.out, list(AGENTS))
        print(md)
        harness.write_report({}, md, None, ROOT / args.report_md)
        print(f"wrote {args.report_md}", file=sys.stderr)
        return
    changed = [flag for flag, value, default in (
        ("--learning-starts", args.learning_starts, None), ("--eval-every", args.eval_every, 5_000),
        ("--eval-episodes", args.eval_episodes, 10)) if value != default]
    if changed and out == ROOT / OUT:
        raise SystemExit(f"learn_mujoco: {', '.join(changed)} change the protocol; such runs "
                         f"(smoke runs) go to another --out than {OUT}")
    todo = pending(plan(args.tasks, args.agents, args.seeds), records, args.total_env_steps)
    print(f"learn_mujoco: {len(todo)} runs pending of the grid, results in {args.out}",
          file=sys.stderr, flush=True)
    if args.dry_run:
        for task, agent, seed in todo:
            print(f"{task} {agent} seed {seed}")
        return
    libraries = {AGENTS[a].library for _, a, _ in todo}
    for lib, python in (("jaxsac", args.python), ("sbx", args.peers_python)):
        if lib in libraries and not Path(python).exists():
            raise SystemExit(f"learn_mujoco: {python} is missing for {lib}")
    harness_command = harness.command_line(
        ".venv/bin/python -m experiments.benchmarks.learn_mujoco",
        sys.argv[1:] if argv is None else argv)
    start = time.perf_counter()
    for i, (task, agent, seed) in enumerate(todo, 1):
        elapsed = (time.perf_counter() - start) / 60
        if args.budget_minutes is not None and elapsed >= args.budget_minutes:
            print(f"learn_mujoco: budget of {args.budget_minutes:g} min spent; "
                  f"{len(todo) - i + 1} runs left", file=sys.stderr)
            break
        print(f"[{i}/{len(todo)}] {task} {agent} seed {seed} ...", file=sys.stderr, flush=True)
        record = run_one(args, task, agent, seed, harness_command)
        if "error" in record:
            print(f"    FAILED: {record['error']}\n{record.get('stderr_tail', '')}",
                  file=sys.stderr, flush=True)
            continue
        append_record(out, record)
        print(f"    final return {record['final_return']:,.1f}, wall {record['wall_s']:.0f} s, "
              f"{record['env_steps_per_s']:.0f} env steps/s without evaluations",
              file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
