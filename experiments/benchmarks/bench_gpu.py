"""jaxsac's throughput on an accelerator (or the CPU): learner updates/s (from vectors
and from images), training env steps/s by env count, vmapped seeds and a MuJoCo
Playground task, and a humanoid's return against wall-clock seconds; one JSON and one
Markdown table.

    .venv/bin/python -m experiments.benchmarks.bench_gpu [--smallest] [--plain]
        [--out-json docs/benchmarks/gpu.json] [--out-md docs/benchmarks/gpu.md]
        [--budget-s SECONDS] [--sections NAME ...]

It imports only jaxsac's public API (and jax, numpy, and the benchmarks' harness.py), so
it also runs as a plain script next to a copy of the package and of harness.py
(`PYTHONPATH=src python3 bench_gpu.py ...`).

Sections, each a function returning rows of plain numbers:

1. `bench_updates`: one learner (batch 256, 256×256 networks, obs 3, act 1, twin Q),
   a jitted `lax.scan` of K updates on a fixed random batch; median of R timed calls
   after a warm-up call, each ended by `block_until_ready`.
1b. `bench_image_updates`: the image update (84×84×9 uint8 observations at the GPU
   size, DrQ's shifts; harness.IMAGE_UPDATES: DrQ's encoder owned by each network or by
   the critics, and NatureCNN's sizes), timed as section 1 (the figures
   bench_image_update.py compares with stable-baselines3's on the CPU).
2. `bench_envs`: Pendulum-v1 training through `jax.jit(make_train(config))` at several
   `num_envs`, a fixed number of gradient steps per iteration (`utd_ratio` =
   steps / num_envs; one per env step with one env). Compile time (`lower().compile()`),
   then two timed runs with different keys (no untimed warm-up run: a run is as long as
   the program); rates come from their median (their mean), and the spread between them
   is recorded. A run is the whole program: warm-up iterations, learning iterations and
   one evaluation (the run is one log period), so env steps/s = total_env_steps / seconds
   of the run.
3. `bench_seeds`: `jax.jit(jax.vmap(make_train(config)))(split(key, S))` for S seeds of
   one config, timed the same way; env steps/s summed over seeds. Each seed count has
   its own iteration count, so that every timed run lasts long enough.
4. `bench_playground`: a MuJoCo Playground task's tuned example (Playground's brax SAC
   settings; CheetahRun, CartpoleBalance at the smallest size) at several `num_envs`,
   timed as section 2. Needs the `playground` extra.
5. `bench_brax` (default sizes only): jaxsac and brax's SAC on that task, one run each,
   through the peer comparisons' runners (experiments/benchmarks/peer_tasks.py; brax
   from .venv-peers, made by setup_peers.sh), on the same JAX backend.
6. `bench_locomotion`: the FastSAC / FastTD3 recipe (jaxsac/tuned/playground/
   T1JoystickFlatTerrain.json; its "-cpu" entry at the smallest size) trained through
   `jaxsac.train` until a log period ends at or past a budget of training seconds: the
   deterministic evaluation return of each log period against wall-clock seconds and
   env steps, with JAX's tracing, lowering and compiling (its monitoring events) counted
   apart, beside FastTD3's published curve for the task (an NVIDIA A100 figure, not
   measured here). brax's SAC is not run beside it: brax 0.14.2's
   `brax.training.agents.sac.train` raises NotImplementedError for a dict observation,
   and the humanoids' is one ("state", "privileged_state"); the record says so,
   checked at run time (`brax_sac_refusal`).

`--sections` picks sections by name (`SECTIONS`: updates, images, envs, seeds,
playground, brax, locomotion; all by default). The locomotion section alone is sized for one call
of a 15-minute device budget, a fresh machine's start and the humanoid's compile
included (an estimate: it has not run on a GPU yet):

    .venv/bin/python -m experiments.benchmarks.bench_gpu --sections locomotion

(writes docs/benchmarks/gpu_locomotion.json and .md: a selection of sections writes
files named after it, never the whole script's gpu.json and gpu.md).

The default (GPU) sizes make every timed call last about 3 s or more on an NVIDIA H200
(0.09 ms per bare update, about 0.15 ms per gradient step in training with one seed),
so one-off costs of a few tens of milliseconds stay near 1%; the 9 compiled programs
(about 25 s each there) still dominate the script's time.

The training config is the tuned Pendulum-v1 (prioritized replay, n-step 2–4), or with
`--plain` uniform replay and n-step 1 (the settings of bench_train.py). `--smallest`
runs the tiniest size of each section (under a minute on 2 CPU cores) and writes files
only where --out-json / --out-md say; the default sizes are for a GPU. `--budget-s`
skips the measurements that would start after that many seconds (they are listed as
skipped); the outputs are rewritten after every measurement, so a run cut short still
leaves what it measured, and a measurement that fails is recorded and the rest run.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from typing import Any

import jax
import numpy as np

import jaxsac

try:
    from experiments.benchmarks import harness
except ImportError:  # run as a plain script next to a copy of harness.py
    import harness

BATCH = harness.BATCH

HIDDEN = (256, 256)
BUFFER = 100_000  # the tuned Pendulum-v1's capacity (rounded up to a multiple of num_envs)
EVAL_EPISODES = 2
DEFAULT_OUT = (os.path.join("docs", "benchmarks", "gpu.json"),
               os.path.join("docs", "benchmarks", "gpu.md"))
PLAYGROUND_BUFFER = 1_048_576  # replay capacity of the Playground runs (env steps)
SECTIONS = ("updates", "images", "envs", "seeds", "playground", "brax", "locomotion")
"""The sections by name, in the order they run; `--sections` (run_all's `sections`)
picks some."""
THROUGHPUT_SECTIONS = SECTIONS[:-1]
"""The sections but the humanoid's (whose compile alone takes minutes on a CPU)."""


@dataclasses.dataclass(frozen=True)
class LocomotionRun:
    """Section 6: a tuned example trained until a log period ends at or past a budget."""

    tuned_id: str  # the recipe's tuned example
    log_every: int  # env steps per log period (each ends with an evaluation)
    budget_s: float  # training seconds (compilation apart) after which no period starts
    total_env_steps: int  # the run's end when the budget lasts longer


@dataclasses.dataclass(frozen=True)
class Sizes:
    updates: int  # updates per jitted scan (section 1)
    repeats: int  # timed calls of that scan
    image_updates: tuple[int, int, int]  # section 1b: (updates per scan, batch, image side)
    env_runs: tuple[tuple[int, int], ...]  # (num_envs, iterations) of section 2
    grad_steps_per_iteration: int  # section 2 with num_envs > 1
    seed_runs: tuple[tuple[int, int], ...]  # (seeds, iterations) of section 3
    seed_num_envs: int  # section 3: one gradient step per env step
    learning_starts: int
    playground_task: str  # section 4: a MuJoCo Playground task, its tuned example
    playground_runs: tuple[tuple[int, int], ...]  # (num_envs, iterations) of section 4
    peer_run: tuple[int, int, int] | None  # section 5: (num_envs, mark_every, marks)
    locomotion: LocomotionRun  # section 6


# Sized from the rates of an earlier H200 run with shorter sizes (1,000 updates; 3,000
# iterations with one env, 400 with more, 250 for every seed count): 0.091 ms per update,
# 0.15-0.20 ms per gradient step with one seed, 1.8 ms per iteration of 8 envs with 8
# vmapped seeds and 6.0 ms with 64. At those rates each timed call takes 3.3-4.0 s and
# the whole script about 260 s, of which about 195 s are the 9 compiles. The image
# updates (section 1b, not yet run on a GPU) are sized from their FLOPs: 137-182 GFLOP an
# update at batch 256 (XLA's count on the CPU), 500 updates a few seconds a call.
GPU = Sizes(updates=36_000, repeats=3, image_updates=(500, 256, 84),
            env_runs=((1, 20_000), (64, 3_000), (1024, 3_000), (4096, 3_000)),
            grad_steps_per_iteration=8, seed_runs=((1, 3_000), (8, 2_000), (64, 600)),
            seed_num_envs=8, learning_starts=256,
            playground_task="CheetahRun", playground_runs=((128, 2_000), (1024, 1_000)),
            peer_run=(128, 8_192, 11),
            # 200 iterations of 1,024 envs per log period; 300 s of training, the humanoid's
            # compile and a fresh machine's start sized for a 15-minute device budget.
            locomotion=LocomotionRun("playground/T1JoystickFlatTerrain", log_every=204_800,
                                     budget_s=300.0, total_env_steps=102_400_000))
SMALLEST = Sizes(updates=20, repeats=3, image_updates=(2, 8, 36), env_runs=((1, 320),),
                 grad_steps_per_iteration=8,
                 seed_runs=((2, 40),), seed_num_envs=8, learning_starts=256,
                 playground_task="CartpoleBalance", playground_runs=((16, 40),),
                 peer_run=None,
                 locomotion=LocomotionRun("playground/T1JoystickFlatTerrain-cpu",
                                          log_every=128, budget_s=3_600.0,
                                          total_env_steps=384))
TIMED_RUNS = 2  # timed runs of each training program, each with its own key


# --- configs and the counts they imply --------------------------------------------------


def train_config(num_envs: int, iterations: int, grad_steps: int, *, plain: bool = False,
                 learning_starts: int = 256) -> jaxsac.SACConfig:
    """Pendulum-v1 with `num_envs` envs for `iterations` iterations as one log period;
    `grad_steps` gradient steps per learning iteration (one per env step with one env)."""
    utd = 1.0 if num_envs == 1 else grad_steps / num_envs
    total = num_envs * iterations
    capacity = num_envs * -(-max(BUFFER, BATCH) // num_envs)
    overrides: dict[str, Any] = dict(
        backend="jax", num_envs=num_envs, utd_ratio=utd, batch_size=BATCH, hidden_sizes=HIDDEN,
        total_env_steps=total, log_every=total, learning_starts=learning_starts,
        buffer_capacity=capacity, eval_episodes=EVAL_EPISODES)
    if plain:
        overrides.update(prioritized=False, n_step=1)
    return jaxsac.tuned("Pendulum-v1", **overrides)


def playground_config(task: str, num_envs: int, iterations: int,
                      learning_starts: int = 256) -> jaxsac.SACConfig:
    """The tuned "playground/<task>" (Playground's brax SAC settings: 8 gradient steps of
    batch 512 per iteration whatever the env count, LayerNorm critics) with `num_envs`
    envs for `iterations` iterations as one log period."""
    tuned = jaxsac.tuned(f"playground/{task}")
    grad_steps = round(tuned.utd_ratio * tuned.num_envs)
    total = num_envs * iterations
    return tuned.replace(num_envs=num_envs, utd_ratio=grad_steps / num_envs, total_env_steps=total,
                        log_every=total, learning_starts=learning_starts,
                        buffer_capacity=num_envs * -(-PLAYGROUND_BUFFER // num_envs),
                        eval_episodes=EVAL_EPISODES)


def expected_counts(config: jaxsac.SACConfig) -> tuple[int, int]:
    """(env steps, gradient steps) a run of `config` takes: random actions for
    ceil(learning_starts / num_envs) iterations, the last of which already learns, then
    round(utd_ratio * num_envs) gradient steps per iteration (README, "What it computes")."""
    iterations = config.total_env_steps // config.num_envs
    warmup = -(-config.learning_starts // config.num_envs)
    per_iteration = round(config.utd_ratio * config.num_envs)
    assert per_iteration >= 1, "bench_gpu uses at least one gradient step per iteration"
    learning = min(iterations, max(iterations - warmup + 1, 0))
    return config.total_env_steps, learning * per_iteration


def config_summary(config: jaxsac.SACConfig) -> dict[str, Any]:
    keys = ("env_id", "num_envs", "utd_ratio", "total_env_steps", "log_every",
            "learning_starts", "buffer_capacity", "batch_size", "hidden_sizes", "prioritized",
            "n_step", "critic_layer_norm", "normalize_obs", "eval_episodes")
    return {k: (list(v) if isinstance(v, tuple) else v)
            for k in keys for v in [getattr(config, k)]}


# --- timing -------------------------------------------------------------------------------


def final(metrics: dict, name: str) -> np.ndarray:
    """Last log period's `name`: a scalar, or one value per seed when vmapped."""
    return np.asarray(jax.device_get(metrics[name]))[..., -1]


# --- section 1: learner updates -----------------------------------------------------------


def bench_updates(updates: int, repeats: int) -> dict[str, Any]:
    """Median seconds of a jitted scan of `updates` learner updates on one fixed batch."""
    config = jaxsac.SACConfig(batch_size=BATCH, hidden_sizes=HIDDEN)
    learner = jaxsac.make_learner(config, harness.OBS_DIM, harness.ACT_DIM)
    state = jax.jit(learner.init)(jax.random.key(0))
    batch = harness.random_batch(jax.random.key(1))
    keys = jax.random.split(jax.random.key(2), updates)

    def many_updates(state, batch, keys):
        def body(s, key):
            s, metrics, _ = learner.update(s, batch, key)
            return s, metrics["qf_loss"]
        return jax.lax.scan(body, state, keys)

    run, compile_s = harness.compile_timed(jax.jit(many_updates), state, batch, keys)
    (_, losses), first_s = harness.timed(run, state, batch, keys)  # warm-up
    return {**scan_timing(lambda: run(state, batch, keys), updates, repeats),
            "compile_s": compile_s, "first_call_s": first_s,
            "losses_finite": bool(np.all(np.isfinite(np.asarray(losses))))}


def scan_timing(call: Any, updates: int, repeats: int) -> dict[str, Any]:
    """`repeats` timed calls of `call`, a scan of `updates` updates: the seconds, their
    median, ms per update and updates/s."""
    times = [harness.timed(call)[1] for _ in range(repeats)]
    median = statistics.median(times)
    return {"updates": updates, "repeats": repeats, "seconds": times, "median_s": median,
            "update_ms": median / updates * 1e3, "updates_per_s": updates / median}


def bench_image_updates(updates: int, batch_size: int, side: int, repeats: int
                        ) -> list[dict[str, Any]]:
    """Section 1b: per variant of harness.IMAGE_UPDATES, a jitted scan of `updates`
    image updates on one batch of [side, side, 9] uint8 images, timed as section 1."""
    shape = (side, side, 9)
    batch = harness.image_batch(jax.random.key(1), batch_size, shape)
    keys = jax.random.split(jax.random.key(2), updates)
    rows = []
    for name, changes in harness.IMAGE_UPDATES.items():
        config = jaxsac.SACConfig(batch_size=batch_size, hidden_sizes=HIDDEN, **changes)
        learner = jaxsac.make_learner(config, jaxsac.observations.ObsSpec.image(shape), 1)
        state = jax.jit(learner.init)(jax.random.key(0))
        call, compile_s = harness.compiled_updates(learner, state, batch, keys)
        _, first_s = harness.timed(call)  # warm-up
        rows.append({"variant": name, "batch": batch_size, "shape": list(shape),
                     **scan_timing(call, updates, repeats), "compile_s": compile_s,
                     "first_call_s": first_s})
    return rows


# --- sections 2 and 3: training -----------------------------------------------------------


def bench_training(config: jaxsac.SACConfig, seeds: int | None,
                   runs: int = TIMED_RUNS) -> dict[str, Any]:
    """Compile `make_train(config)` (vmapped over `seeds` keys unless None), then time
    `runs` runs, each with its own key; rates come from the median run (summed over seeds),
    counts and returns from the last run, and `spread_pct` is (slowest - fastest) / fastest."""
    train_fn = jaxsac.make_train(config)
    if seeds is None:
        fn, keys = train_fn, [jax.random.key(k) for k in range(1, runs + 1)]
    else:
        fn = jax.vmap(train_fn)
        keys = [jax.random.split(jax.random.key(k), seeds) for k in range(1, runs + 1)]
    run, compile_s = harness.compile_timed(jax.jit(fn), keys[0])
    seconds, counts = [], []
    for key in keys:
        (_, metrics), s = harness.timed(run, key)
        seconds.append(s)
        counts.append((int(np.sum(final(metrics, "env_steps"))),
                       int(np.sum(final(metrics, "grad_steps")))))
    assert len(set(counts)) == 1, f"runs took different step counts: {counts}"
    env_steps, grad_steps = counts[-1]
    run_s = statistics.median(seconds)
    n = 1 if seeds is None else seeds
    expected_env, expected_grad = expected_counts(config)
    return {"num_envs": config.num_envs, "seeds": n, "config": config_summary(config),
            "compile_s": compile_s, "run_seconds": seconds, "run_s": run_s,
            "spread_pct": (max(seconds) - min(seconds)) / min(seconds) * 100,
            "env_steps": env_steps, "grad_steps": grad_steps,
            "expected_env_steps": n * expected_env, "expected_grad_steps": n * expected_grad,
            "env_steps_per_s": env_steps / run_s, "env_steps_per_s_per_seed": env_steps / n / run_s,
            "grad_steps_per_s": grad_steps / run_s,
            "env_steps_per_s_each_run": [env_steps / s for s in seconds],
            "eval_return": [float(x) for x in np.ravel(final(metrics, "eval_return"))]}


def bench_envs(num_envs: int, iterations: int, grad_steps: int, *, plain: bool = False,
               learning_starts: int = 256) -> dict[str, Any]:
    """Section 2: one seed, `num_envs` envs, `iterations` iterations."""
    config = train_config(num_envs, iterations, grad_steps, plain=plain,
                          learning_starts=learning_starts)
    return bench_training(config, seeds=None)


def bench_seeds(seeds: int, num_envs: int, iterations: int, *, plain: bool = False,
                learning_starts: int = 256) -> dict[str, Any]:
    """Section 3: `seeds` vmapped runs of one config (one gradient step per env step)."""
    config = train_config(num_envs, iterations, num_envs, plain=plain,
                          learning_starts=learning_starts)
    return bench_training(config, seeds=seeds)


def bench_playground(task: str, num_envs: int, iterations: int,
                     learning_starts: int = 256) -> dict[str, Any]:
    """Section 4: one seed of the tuned Playground task with `num_envs` envs."""
    return bench_training(playground_config(task, num_envs, iterations, learning_starts),
                          seeds=None)


def brax_runs(task: str, num_envs: int, mark_every: int, marks: int) -> list[Any]:
    """Section 5's runs (see `bench_brax`): jaxsac's and brax's, on the peer comparisons'
    cartpole_balance settings with `task`, `num_envs` and 8 gradient steps per
    iteration, learning from the first mark on, `marks` marks in all."""
    from experiments.benchmarks import peer_tasks

    overrides = {"env_id": f"playground/{task}", "num_envs": num_envs,
                 "utd_ratio": 8 / num_envs, "mark_every": mark_every}
    return [peer_tasks.PeerRun("cartpole_balance", library, seed=0,
                               total_env_steps=mark_every * marks, learning_starts=mark_every,
                               buffer_size=mark_every * marks, overrides=overrides)
            for library in ("jaxsac-jax", "brax")]


def bench_brax(task: str, num_envs: int, mark_every: int, marks: int) -> list[dict[str, Any]]:
    """Section 5: jaxsac and brax's SAC, one run each, on the Playground task in
    Playground's brax SAC settings (`brax_runs`), through the peer comparisons' runners
    (jaxsac from .venv, brax from .venv-peers), on this JAX backend. Raises
    FileNotFoundError when a virtualenv is missing."""
    from experiments.benchmarks import peer_tasks

    runs = brax_runs(task, num_envs, mark_every, marks)
    pythons = peer_tasks.Pythons()
    for library, hint in pythons.missing([run.library for run in runs]).items():
        raise FileNotFoundError(f"{pythons.of(library)} is missing ({library}): {hint}")
    rows = []
    for run in runs:
        record = peer_tasks.run_peer(run, platform=jax.default_backend())
        if "error" in record:
            raise RuntimeError(f"{run.library}: {record['error']}: "
                               f"{record.get('stderr_tail', '')}")
        rate = record["steady_env_steps_per_s"]
        rows.append({"library": run.library, "env_id": f"playground/{task}",
                     "num_envs": num_envs, "env_steps": mark_every * marks,
                     "env_steps_per_s": rate, "grad_steps_per_s": rate * 8 / num_envs,
                     "compile_s": record["compile_s"], "wall_s": record["wall_s"],
                     "own_eval_returns": record["own_eval_returns"][0],
                     "final_return": record["final_return"][0]})
    return rows


# --- section 6: a humanoid's return against wall-clock seconds ----------------------------

FASTTD3_PUBLISHED = {
    "T1JoystickFlatTerrain": {
        "source": "FastTD3 (Seo et al. 2025), github.com/younggyoseo/FastTD3, "
                  "data/playground_result.json (its README: one NVIDIA A100 80GB per run)",
        "device": "NVIDIA A100 80GB",
        # (wall-clock seconds, env steps, evaluation return), as published
        "points": [(336.4, 5_120_000, 17.50), (672.8, 10_240_000, 23.36),
                   (1009.2, 15_360_000, 29.22), (1345.6, 20_480_000, 32.47),
                   (1682.0, 25_600_000, 33.60), (2018.4, 30_720_000, 34.10),
                   (2354.8, 35_840_000, 34.49), (2691.2, 40_960_000, 34.65),
                   (3027.5, 46_080_000, 34.80)],
    },
}
"""FastTD3's published learning curves (A100 figures, not measured here) by task."""

COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                  "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration")
_COMPILE_SECONDS = [0.0]
"""Seconds JAX spent tracing, lowering and compiling in this process (COMPILE_EVENTS)."""


def _count_compile(event: str, duration: float, **kwargs: Any) -> None:
    if event in COMPILE_EVENTS:
        _COMPILE_SECONDS[0] += duration


jax.monitoring.register_event_duration_secs_listener(_count_compile)


def locomotion_config(run: LocomotionRun) -> jaxsac.SACConfig:
    """The tuned example of `run` with its log period and length."""
    return jaxsac.tuned(run.tuned_id, log_every=run.log_every,
                        total_env_steps=run.total_env_steps)


def brax_sac_refusal(env_id: str) -> str | None:
    """Why brax's SAC cannot train the Playground task `env_id`, or None when its
    observation is an array (brax.training.agents.sac.train raises NotImplementedError
    for a dict observation)."""
    size = jaxsac.envs.make(env_id).unwrapped.env.observation_size
    if not isinstance(size, dict):
        return None
    return (f"brax.training.agents.sac.train raises NotImplementedError ('Dictionary "
            f"observations not implemented in SAC') for {env_id}'s dict observation "
            f"({', '.join(f'{k}: {v}' for k, v in sorted(size.items()))})")


def bench_locomotion(run: LocomotionRun) -> dict[str, Any]:
    """Section 6: one seed of `run`'s tuned example through `jaxsac.train`, stopped after
    the first log period that ends at or past `run.budget_s` training seconds (wall-clock
    seconds since the call less the tracing, lowering and compiling in them), else at
    its total_env_steps. A point per log period: its wall-clock and training seconds,
    compile seconds so far, env and gradient steps, deterministic evaluation return."""
    config = locomotion_config(run)
    task = config.env_id.removeprefix("playground/")
    points: list[dict[str, Any]] = []
    compile_start, start = _COMPILE_SECONDS[0], time.perf_counter()

    def after_period(row: dict[str, Any], state: Any) -> bool:
        wall_s = time.perf_counter() - start  # the row is on the host: the period is done
        compile_s = _COMPILE_SECONDS[0] - compile_start
        points.append({"wall_s": wall_s, "compile_s": compile_s, "train_s": wall_s - compile_s,
                       "env_steps": int(row["env_steps"]), "grad_steps": int(row["grad_steps"]),
                       "eval_return": float(row["eval_return"])})
        return wall_s - compile_s >= run.budget_s

    jaxsac.train(config, progress=False, callback=after_period)
    last = points[-1]
    published = FASTTD3_PUBLISHED.get(task)
    return {"tuned_id": run.tuned_id, "env_id": config.env_id, "budget_s": run.budget_s,
            "config": config.to_dict(), "points": points,
            "stopped_by": "budget" if last["train_s"] >= run.budget_s else "total_env_steps",
            "compile_s": last["compile_s"], "train_s": last["train_s"],
            "env_steps": last["env_steps"], "final_return": last["eval_return"],
            "env_steps_per_s": last["env_steps"] / last["train_s"],
            "published": None if published is None else {
                **published, "points": [dict(zip(("wall_s", "env_steps", "eval_return"), p,
                                                 strict=True)) for p in published["points"]]},
            "brax": {"library": "brax", "run": False,
                     "reason": brax_sac_refusal(config.env_id)
                     or "brax's SAC accepts this task's observation; this section does not "
                        "run it (yet)"}}


# --- report -------------------------------------------------------------------------------


def environment() -> dict[str, Any]:
    """The machine and its JAX devices, and jaxsac's version."""
    return {**harness.machine(), "jaxsac": getattr(jaxsac, "__version__", "?")}


def _runs(row: dict[str, Any]) -> str:
    return " / ".join(f"{s:.2f}" for s in row["run_seconds"]) + " s"


def _training_cells(r: dict[str, Any]) -> list[str]:
    """A training row's compile, runs, spread and rates."""
    return [f"{r['compile_s']:.1f} s", _runs(r), f"{r['spread_pct']:.1f}%",
            harness.number(r["env_steps_per_s"], 0)]


def markdown(result: dict[str, Any]) -> str:
    env, sections, n = result["environment"], result["sections"], harness.number
    lines = [f"# jaxsac throughput: {env['device_kind']}", "",
             f"Machine: {harness.machine_line(env)}, {env['device_count']} device(s). "
             f"Sizes: {result['sizes_name']}; training config: {result['config_name']}. "
             f"Command: `{result['command']}`.", ""]
    u = sections.get("updates")
    lines += ["## Learner updates (batch 256, 256×256, obs 3, act 1, twin Q; one seed)", ""]
    if u:
        lines += [*harness.markdown_table(
            ["updates per scan", "median of", "update", "updates/s", "compile"],
            [[f"{u['updates']:,}", str(u["repeats"]), f"{u['update_ms']:.3f} ms",
              n(u["updates_per_s"], 0), f"{u['compile_s']:.1f} s"]], "rrrrr"), ""]
    else:
        lines += ["(not run)", ""]
    image_rows = sections.get("images", [])
    lines += ["## Image updates (uint8 observations, DrQ's shifts; 256×256 networks, act 1)", ""]
    if image_rows:
        r = image_rows[0]
        lines += [f"Batch {r['batch']} of {' × '.join(map(str, r['shape']))} images; "
                  "NatureCNN's sizes: channels 32, 64, 64, kernels 8, 4, 3, strides 4, 2, 1, "
                  "512 features.", ""]
    lines += [*harness.markdown_table(
        ["update", "updates per scan", "median of", "update", "updates/s", "compile"],
        [[r["variant"], f"{r['updates']:,}", str(r["repeats"]), f"{r['update_ms']:.3f} ms",
          n(r["updates_per_s"], 1), f"{r['compile_s']:.1f} s"] for r in image_rows],
        "lrrrrr"), ""]
    lines += ["## Pendulum-v1 training by env count (one seed, `jax.jit(make_train(config))`)", "",
              "One log period per run (its evaluation included); two timed runs with different "
              "keys after the compile; rates from their median (their mean); spread = "
              "(slower - faster) / faster.", ""]
    lines += harness.markdown_table(
        ["envs", "grad steps / iteration", "env steps", "grad steps", "compile", "runs",
         "spread", "env steps/s", "grad steps/s"],
        [[f"{r['num_envs']:,}", str(round(r["config"]["utd_ratio"] * r["num_envs"])),
          f"{r['env_steps']:,}", f"{r['grad_steps']:,}", *_training_cells(r),
          n(r["grad_steps_per_s"], 0)] for r in sections.get("envs", [])], "r" * 9)
    lines += ["", "## Vmapped seeds (`jax.jit(jax.vmap(make_train(config)))`)", ""]
    seed_rows = sections.get("seeds", [])
    if seed_rows:
        c = seed_rows[0]["config"]
        lines += [f"{c['num_envs']} envs per seed, {round(c['utd_ratio'] * c['num_envs'])} "
                  "gradient steps per iteration; timed as above.", ""]
    lines += harness.markdown_table(
        ["seeds", "env steps per seed", "env steps (all seeds)", "compile", "runs", "spread",
         "env steps/s (all seeds)", "per seed", "grad steps/s (all seeds)"],
        [[str(r["seeds"]), f"{r['config']['total_env_steps']:,}", f"{r['env_steps']:,}",
          *_training_cells(r), n(r["env_steps_per_s_per_seed"], 0),
          n(r["grad_steps_per_s"], 0)] for r in seed_rows], "r" * 9)
    lines += ["", "## MuJoCo Playground training by env count (one seed, "
              "`jax.jit(make_train(config))`)", ""]
    playground_rows = sections.get("playground", [])
    if playground_rows:
        c = playground_rows[0]["config"]
        lines += [f"The tuned `{c['env_id']}` (Playground's brax SAC settings: "
                  f"{round(c['utd_ratio'] * c['num_envs'])} gradient steps of batch "
                  f"{c['batch_size']} per iteration, LayerNorm critics, normalized "
                  "observations); MJX with its JAX implementation; timed as above.", ""]
    lines += harness.markdown_table(
        ["envs", "env steps", "grad steps", "compile", "runs", "spread", "env steps/s",
         "grad steps/s", "eval return"],
        [[f"{r['num_envs']:,}", f"{r['env_steps']:,}", f"{r['grad_steps']:,}",
          *_training_cells(r), n(r["grad_steps_per_s"], 0), n(r["eval_return"][0], 1)]
         for r in playground_rows], "r" * 9)
    lines += ["", "## jaxsac and brax's SAC side by side (one run each, the peer "
              "comparisons' runners)", ""]
    peer_rows = sections.get("brax", [])
    if peer_rows:
        r = peer_rows[0]
        lines += [f"`{r['env_id']}`, {r['num_envs']} envs, Playground's brax SAC settings "
                  f"(8 gradient steps of batch 512 per iteration), {r['env_steps']:,} env "
                  "steps; steady rates from the second mark on; final return: 10 "
                  "deterministic episodes of the raw Playground env.", ""]
        lines += harness.markdown_table(
            ["library", "compile", "wall", "env steps/s", "grad steps/s", "final return"],
            [[r["library"], f"{r['compile_s']:.1f} s", f"{r['wall_s']:.1f} s",
              n(r["env_steps_per_s"], 0), n(r["grad_steps_per_s"], 0),
              n(r["final_return"], 1)] for r in peer_rows], "lrrrrr")
    else:
        lines += ["(not run)"]
    lines += ["", *locomotion_markdown(sections.get("locomotion")), ""]
    for name, error in result["errors"].items():
        lines += [f"Failed: {name}: `{error.splitlines()[0][:300]}`", ""]
    if result["skipped"]:
        lines += ["Skipped (time budget): " + ", ".join(result["skipped"]) + ".", ""]
    return "\n".join(lines)


def locomotion_markdown(r: dict[str, Any] | None) -> list[str]:
    """Section 6's heading, its points and the published curve beside them."""
    lines = ["## A humanoid's return against wall-clock seconds (one seed, `jaxsac.train`)", ""]
    if not r:
        return [*lines, "(not run)"]
    c, n = r["config"], harness.number
    lines += [f"`{r['tuned_id']}` (`{r['env_id']}`: {c['num_envs']:,} envs, "
              f"{round(c['utd_ratio'] * c['num_envs'])} gradient steps of batch "
              f"{c['batch_size']:,} per iteration, the actor every "
              f"{c['policy_update_every']}, {c['critic']} critic, γ {c['gamma']}, domain "
              f"randomization {'on' if c['domain_randomization'] else 'off'}); a log period "
              f"of {c['log_every']:,} env steps ends with {c['eval_episodes']} deterministic "
              f"episodes. Stopped by {r['stopped_by'].replace('_', ' ')} (budget "
              f"{r['budget_s']:,.0f} training seconds). Tracing, lowering and compiling: "
              f"{r['compile_s']:.1f} s, apart from the training seconds; "
              f"{n(r['env_steps_per_s'], 0)} env steps per training second.", ""]
    lines += harness.markdown_table(
        ["wall-clock s", "compile s", "training s", "env steps", "grad steps", "eval return"],
        [[f"{p['wall_s']:.1f}", f"{p['compile_s']:.1f}", f"{p['train_s']:.1f}",
          f"{p['env_steps']:,}", f"{p['grad_steps']:,}", n(p["eval_return"], 2)]
         for p in r["points"]], "rrrrrr")
    published = r["published"]
    if published:
        lines += ["", f"Published, not measured here ({published['device']}): "
                  f"{published['source']}.", ""]
        lines += harness.markdown_table(
            ["wall-clock s", "env steps", "eval return"],
            [[f"{p['wall_s']:,.0f}", f"{p['env_steps']:,}", n(p["eval_return"], 2)]
             for p in published["points"]], "rrr")
    lines += ["", f"brax's SAC: not run: {r['brax']['reason']}."]
    return lines


def write(result: dict[str, Any], out_json: str | None, out_md: str | None) -> None:
    harness.write_report(result, markdown(result), out_json, out_md)


def run_all(sizes: Sizes, *, plain: bool = False, budget_s: float | None = None,
            out_json: str | None = None, out_md: str | None = None,
            sizes_name: str = "", command: str = "", log=print,
            keep_going: bool = False, sections: tuple[str, ...] = SECTIONS) -> dict[str, Any]:
    """The measurements of `sections` (names from SECTIONS) in order, the outputs
    rewritten after each one. keep_going: a measurement that raises is recorded under
    "errors" and the rest still run (else the exception propagates)."""
    unknown = [name for name in sections if name not in SECTIONS]
    if unknown or not sections:
        raise ValueError(f"run_all: sections={sections!r} is invalid: must be a non-empty "
                         f"selection of {list(SECTIONS)}")
    start = time.perf_counter()
    result: dict[str, Any] = {
        "environment": environment(), "sizes_name": sizes_name,
        "sizes": dataclasses.asdict(sizes),
        "config_name": "plain (uniform replay, n-step 1)" if plain
        else "tuned Pendulum-v1 (prioritized replay, n-step 2–4)",
        "command": command,
        "sections": {"updates": None, "images": [], "envs": [], "seeds": [], "playground": [],
                     "brax": [], "locomotion": None},
        "selected_sections": list(sections),
        "skipped": [], "errors": {}}
    log(f"device: {result['environment']['device_kind']}, jax {jax.__version__}")
    common = dict(plain=plain, learning_starts=sizes.learning_starts)
    jobs: list[tuple[str, str, Any]] = [
        ("updates", "updates", lambda: bench_updates(sizes.updates, sizes.repeats)),
        ("images", "image updates", lambda: bench_image_updates(*sizes.image_updates,
                                                                sizes.repeats))]
    jobs += [("envs", f"envs={e}", lambda e=e, i=i: bench_envs(
        e, i, sizes.grad_steps_per_iteration, **common)) for e, i in sizes.env_runs]
    jobs += [("seeds", f"seeds={s}", lambda s=s, i=i: bench_seeds(
        s, sizes.seed_num_envs, i, **common)) for s, i in sizes.seed_runs]
    jobs += [("playground", f"playground {sizes.playground_task} envs={e}",
              lambda e=e, i=i: bench_playground(sizes.playground_task, e, i,
                                                sizes.learning_starts))
             for e, i in sizes.playground_runs]
    if sizes.peer_run is not None:
        jobs += [("brax", f"brax {sizes.playground_task} envs={sizes.peer_run[0]}",
                  lambda: bench_brax(sizes.playground_task, *sizes.peer_run))]
    jobs += [("locomotion", f"locomotion {sizes.locomotion.tuned_id}",
              lambda: bench_locomotion(sizes.locomotion))]
    for section, name, job in [job for job in jobs if job[0] in sections]:
        elapsed = time.perf_counter() - start
        if budget_s is not None and elapsed > budget_s:
            result["skipped"].append(name)
            log(f"[{elapsed:6.1f} s] {name}: skipped (budget {budget_s:.0f} s)")
            continue
        try:
            row = job()
        except Exception as error:  # noqa: BLE001 - recorded, the rest still measured
            if not keep_going:
                raise
            result["errors"][name] = f"{type(error).__name__}: {error}"[:2000]
            log(f"[{time.perf_counter() - start:6.1f} s] {name}: FAILED {result['errors'][name]}")
            write(result, out_json, out_md)
            continue
        if section in ("brax", "images"):
            result["sections"][section] = row
            log(f"[{time.perf_counter() - start:6.1f} s] {name}: " + ", ".join(
                f"{r['library']} {r['env_steps_per_s']:,.0f} env steps/s" if section == "brax"
                else f"{r['variant']} {r['updates_per_s']:,.1f} updates/s" for r in row))
        elif section == "locomotion":
            result["sections"]["locomotion"] = row
            log(f"[{time.perf_counter() - start:6.1f} s] {name}: return {row['final_return']:.2f}"
                f" after {row['env_steps']:,} env steps, {row['train_s']:.1f} training s "
                f"(compile {row['compile_s']:.1f} s)")
        elif section == "updates":
            result["sections"]["updates"] = row
            log(f"[{time.perf_counter() - start:6.1f} s] {name}: {row['updates_per_s']:,.0f} "
                f"updates/s (compile {row['compile_s']:.1f} s)")
        else:
            result["sections"][section].append(row)
            log(f"[{time.perf_counter() - start:6.1f} s] {name}: {row['env_steps_per_s']:,.0f} "
                f"env steps/s, {row['grad_steps_per_s']:,.0f} grad steps/s (compile "
                f"{row['compile_s']:.1f} s, runs {_runs(row)}, spread {row['spread_pct']:.1f}%)")
        result["total_s"] = time.perf_counter() - start
        write(result, out_json, out_md)
    result["total_s"] = time.perf_counter() - start
    write(result, out_json, out_md)
    return result


def default_outputs(sections: tuple[str, ...]) -> tuple[str, str]:
    """The JSON and markdown a run of `sections` writes by default: DEFAULT_OUT for
    every section, else files named after the selection (gpu_locomotion.json for
    the locomotion section alone), so that a selection never overwrites the record of
    the whole script."""
    if set(sections) == set(SECTIONS):
        return DEFAULT_OUT
    stem = os.path.join("docs", "benchmarks", "gpu_" + "_".join(
        name for name in SECTIONS if name in sections))
    return stem + ".json", stem + ".md"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smallest", action="store_true",
                        help="the tiniest size of each section (CPU smoke run)")
    parser.add_argument("--plain", action="store_true",
                        help="uniform replay and n-step 1 instead of the tuned Pendulum-v1")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="skip measurements that would start after this many seconds")
    parser.add_argument("--out-json", default=None,
                        help=f"default: {DEFAULT_OUT[0]}, gpu_<section>_....json for a "
                        "selection of sections (with --smallest: none, printed only)")
    parser.add_argument("--out-md", default=None,
                        help=f"default: {DEFAULT_OUT[1]}, gpu_<section>_....md for a "
                        "selection of sections (with --smallest: none, printed only)")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS),
                        metavar="NAME", help="the sections to run, by name: "
                        + ", ".join(SECTIONS) + " (default: all)")
    args = parser.parse_args(argv)
    if not args.smallest:  # a smoke run never overwrites the recorded figures by default
        out_json, out_md = default_outputs(tuple(args.sections))
        args.out_json, args.out_md = args.out_json or out_json, args.out_md or out_md
    command = "python " + " ".join([os.path.basename(sys.argv[0]), *(argv or sys.argv[1:])])
    result = run_all(SMALLEST if args.smallest else GPU, plain=args.plain,
                     budget_s=args.budget_s, out_json=args.out_json, out_md=args.out_md,
                     sizes_name="smallest" if args.smallest else "default (GPU)",
                     command=command, keep_going=True, sections=tuple(args.sections))
    print()
    print(markdown(result))
    if result["errors"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
