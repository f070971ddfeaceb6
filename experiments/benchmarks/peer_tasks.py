"""The peer comparisons' registry: the libraries and their runners, each task's env,
budgets, thresholds and settings, and one run of a runner on a task.

compare_peers.py runs every library of a task side by side on the task's shared
settings; time_to_solve.py times how long each takes to reach the task's threshold,
with each library's own settings and with the shared ones. Both launch the runners
(experiments/benchmarks/peer_runners/) through `run_peer`, and so does bench_gpu.py for
its jaxsac-against-brax section.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class Library:
    """A library of the comparisons: where its runner runs and what it is."""

    virtualenv: str
    """".venv" (jaxsac's) or ".venv-peers" (made by setup_peers.sh)."""
    runner: str
    """Its module in experiments/benchmarks/peer_runners/."""
    description: str
    runner_args: tuple[str, ...] = ()
    """Arguments every run of its runner gets."""


LIBRARIES = {
    "jaxsac-jax": Library(".venv", "jaxsac_sac",
                          "jaxsac, JAX Pendulum inside the jitted program", ("--backend", "jax")),
    "jaxsac-gymnasium": Library(".venv", "jaxsac_sac",
                                "jaxsac, gymnasium Pendulum-v1 from a host loop",
                                ("--backend", "gymnasium")),
    "rejax": Library(".venv-peers", "rejax_sac",
                     "rejax SAC, gymnax Pendulum, one jitted program"),
    "sbx": Library(".venv-peers", "sbx_sac",
                   "sbx SAC (SB3 loop, JAX networks), gymnasium Pendulum-v1"),
    "sb3": Library(".venv-peers", "sb3_sac",
                   "stable-baselines3 SAC (torch CPU), gymnasium Pendulum-v1"),
    "brax": Library(".venv-peers", "brax_sac",
                    "brax SAC (brax.training.agents.sac), MuJoCo Playground task, pmapped "
                    "epochs"),
}
VMAPPED = ("jaxsac-jax", "rejax")
"""The libraries that also train seeds vmapped in one program."""

# --- the tasks' settings -------------------------------------------------------------------

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

# --- each library's own settings for the time to solve ---------------------------------------

RL_ZOO_PENDULUM = {
    # RL Zoo's hyperparams/sac.yml, Pendulum-v1: n_timesteps 20,000, learning_rate 1e-3,
    # the rest SB3's defaults (learning starts 100, batch 256, tau 0.005, gamma 0.99,
    # 256x256 ReLU, one gradient step per env step, learned alpha). Its buffer of 10^6
    # never fills in 20,000 env steps, so the run's 20,000 is the same buffer.
    "lr": 1e-3, "learning_starts": 100, "buffer_size": 20_000,
}
PENDULUM_OWN = {
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
    # CARTPOLE_BALANCE_JAXSAC gives jaxsac the same) and 1-step returns.
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
    # Playground's brax SAC config for the dm_control suite, as the side-by-side
    # comparison runs it (128 envs, batch 512, 8 gradient steps per iteration, 256x256,
    # normalized observations, 8,192 warm-up steps); its 5M env steps are cut to the
    # budget.
    "brax": {},
}


@dataclasses.dataclass(frozen=True)
class TimeToSolve:
    """A task's time to solve (time_to_solve.py): its libraries, threshold, evaluation
    period, budget and settings."""

    libraries: tuple[str, ...]
    threshold: float
    """Solved: the first in-run evaluation at or above it."""
    eval_every: int
    total_env_steps: int
    own: dict[str, dict[str, Any]]
    """Each library's own settings: overrides of the task's runner settings."""
    out: str
    """Outputs <out>.json and <out>.md (relative to the repository)."""
    shared: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The shared settings: overrides of the task's runner settings (none: the side-by-side
    comparison's own)."""


@dataclasses.dataclass(frozen=True)
class PeerTask:
    """One task of the peer comparisons: its env, the side-by-side comparison's
    libraries, budgets, return bar, runner settings and outputs (compare_peers.py), and
    its time to solve."""

    env_id: str
    libraries: tuple[str, ...]
    total_env_steps: int
    learning_starts: int
    buffer_size: int
    return_bar: float
    """A final return at or above it counts as solved."""
    out: str
    """Outputs <out>.json and <out>.md (relative to the repository)."""
    solve: TimeToSolve
    runner_settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Every runner's settings beyond the shared ones (`flags` makes them arguments)."""
    jaxsac_settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    """jaxsac's runner's own further settings."""
    vmap_seeds: int = 8
    """Seeds of the vmapped runs by default (0: none)."""


TASKS = {
    "pendulum": PeerTask(
        "Pendulum-v1", ("jaxsac-jax", "jaxsac-gymnasium", "rejax", "sbx", "sb3"),
        total_env_steps=20_000, learning_starts=1_000, buffer_size=20_000, return_bar=-250.0,
        out="docs/benchmarks/peers",
        solve=TimeToSolve(("jaxsac-jax", "rejax", "sbx", "sb3"), threshold=-200.0,
                          eval_every=500, total_env_steps=20_000, own=PENDULUM_OWN,
                          out="docs/benchmarks/time_to_solve")),
    "cartpole": PeerTask(
        "CartPole-v1", ("jaxsac-jax", "jaxsac-gymnasium", "rejax"),
        total_env_steps=50_000, learning_starts=1_000, buffer_size=10_000, return_bar=475.0,
        out="docs/benchmarks/peers_cartpole", runner_settings=CARTPOLE,
        jaxsac_settings=CARTPOLE_JAXSAC,
        solve=TimeToSolve(("jaxsac-jax", "rejax"), threshold=475.0, eval_every=1_000,
                          total_env_steps=50_000, own=CARTPOLE_OWN,
                          out="docs/benchmarks/time_to_solve_cartpole")),
    "cartpole_balance": PeerTask(
        "playground/CartpoleBalance", ("jaxsac-jax", "brax"),
        total_env_steps=163_840, learning_starts=8_192, buffer_size=163_840,
        return_bar=900.0, out="docs/benchmarks/peers_cartpole_balance",
        runner_settings=CARTPOLE_BALANCE, jaxsac_settings=CARTPOLE_BALANCE_JAXSAC,
        vmap_seeds=0,
        solve=TimeToSolve(("jaxsac-jax", "brax"), threshold=900.0, eval_every=2_048,
                          total_env_steps=40_960, own=CARTPOLE_BALANCE_OWN,
                          shared=CARTPOLE_BALANCE_SHARED,
                          out="docs/benchmarks/time_to_solve_cartpole_balance")),
}

# --- one run of a runner ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Pythons:
    """The interpreters of the two virtualenvs (relative to the repository)."""

    jaxsac: str = ".venv/bin/python"
    peers: str = ".venv-peers/bin/python"

    def of(self, library: str) -> str:
        return self.jaxsac if LIBRARIES[library].virtualenv == ".venv" else self.peers

    def missing(self, libraries: list[str]) -> dict[str, str]:
        """{library: what to run} for each library whose interpreter does not exist."""
        return {lib: ("run `bash experiments/benchmarks/setup_peers.sh` (or `make "
                      "bench-peers`)" if LIBRARIES[lib].virtualenv == ".venv-peers"
                      else "run `make install`")
                for lib in libraries if not (ROOT / self.of(lib)).exists()}


@dataclasses.dataclass(frozen=True)
class PeerRun:
    """One run of a library's runner on a task's runner settings."""

    task: str
    library: str
    seed: int
    num_seeds: int = 1
    total_env_steps: int | None = None
    """None: the task's (so for learning_starts and buffer_size)."""
    learning_starts: int | None = None
    buffer_size: int | None = None
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Settings that replace the task's runner settings."""
    torch_threads: int = 1
    """torch intra-op threads of sb3 (0: torch's default, one per core)."""


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


def runner_command(run: PeerRun, pythons: Pythons = Pythons()) -> list[str]:
    """The command line of `run`'s runner (run from the repository)."""
    task, library = TASKS[run.task], LIBRARIES[run.library]
    extra = list(library.runner_args)
    if run.library == "sb3":
        extra += ["--torch-threads", str(run.torch_threads)]
    jaxsac = task.jaxsac_settings if library.runner == "jaxsac_sac" else {}
    settings = {**task.runner_settings, **jaxsac, **run.overrides}
    budget = {name: getattr(task, name) if getattr(run, name) is None else getattr(run, name)
              for name in ("total_env_steps", "learning_starts", "buffer_size")}
    return [pythons.of(run.library), "-m",
            f"experiments.benchmarks.peer_runners.{library.runner}", *extra,
            "--seed", str(run.seed), "--num-seeds", str(run.num_seeds),
            *flags(budget), *flags(settings)]


def child_env(platform: str = "cpu") -> dict[str, str]:
    """The same environment for every run: JAX on `platform` (the CPU unless bench_gpu
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


def run_peer(run: PeerRun, *, pythons: Pythons = Pythons(), timeout: float = 3600.0,
             platform: str = "cpu") -> dict[str, Any]:
    """Runs `run`'s runner in a fresh process; its record, or a record of the failure."""
    command = runner_command(run, pythons)
    identity = {"library": run.library, "seed": run.seed, "num_seeds": run.num_seeds}
    launch_unix = time.time()
    start = time.perf_counter()
    try:
        proc = subprocess.run(command, cwd=ROOT, env=child_env(platform), capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {**identity, "error": f"timed out after {timeout:.0f} s", "command": command}
    process_s = time.perf_counter() - start
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {**identity, "error": f"exit status {proc.returncode}",
                "stderr_tail": proc.stderr[-3000:], "command": command}
    record = json.loads(lines[-1])
    record["library"] = run.library
    record["process_s"] = round(process_s, 3)  # including imports and the evaluation
    record["launch_unix"] = launch_unix  # the marks are from record["clock_start_unix"]
    record["command"] = " ".join(shlex.quote(c) for c in command)
    return record


# --- the runs' records ------------------------------------------------------------------------


def steady_start(learning_starts: int, mark_every: int) -> int:
    """Where every runner's steady window starts (see peer_runners/common.py): the first
    multiple of mark_every at least learning_starts + mark_every."""
    return -(-(learning_starts + mark_every) // mark_every) * mark_every



def first_at(steps: list[int], returns: list[float], bar: float) -> int | None:
    """The env steps of the first evaluation at or above `bar`; None if none is."""
    return next((step for step, x in zip(steps, returns, strict=True) if x >= bar), None)


def versions(records: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Each library's package versions, from its first record that has them."""
    out: dict[str, dict[str, str]] = {}
    for r in records:
        if "versions" in r:
            out.setdefault(r["library"], r["versions"])
    return out


def versions_lines(versions: dict[str, dict[str, str]]) -> list[str]:
    """The reports' "Versions" section."""
    return ["## Versions", "", *(f"- {lib}: " + ", ".join(f"{k} {x}" for k, x in sorted(v.items()))
                                 for lib, v in versions.items())]
