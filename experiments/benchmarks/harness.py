"""What every benchmark shares: timing, the machine it ran on, the standard workloads,
and its reports (JSON and markdown, markdown tables, number formats).

Benchmarks import jaxsac, this module and the peer tasks' registry (peer_tasks.py),
never each other. Only the standard library is imported here at module level (jax and
jaxsac inside the functions that need them), so that a parent process that must not
start JAX before its children (bench_scaling) and the peers' virtualenv can import it.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import random
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("JAXSAC_COMPILATION_CACHE", "0")
"""Benchmarks time compilation: no program comes from jaxsac's default cache on disk
(bench_startup's runs turn the cache on themselves, in their own folders)."""

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root, where benchmarks run their child processes."""

OBS_DIM, ACT_DIM, BATCH = 3, 1, 256
"""Pendulum-v1's sizes and the batch of the standard update workload."""

# --- timing -----------------------------------------------------------------------------


def timed(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """(fn(*args), seconds until its result is ready)."""
    import jax

    start = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return out, time.perf_counter() - start


def best_time(fn: Callable[..., Any], *args: Any, repeats: int) -> float:
    """Fastest of `repeats` calls (after one warm-up call), seconds."""
    timed(fn, *args)
    return min(timed(fn, *args)[1] for _ in range(repeats))


def child_record(python: str, module: str, args: Sequence[Any],
                 env: dict[str, str] | None = None) -> dict[str, Any]:
    """The JSON record a benchmark's child process prints last: `python -m module *args`
    run from the repository root (env: its environment, None: this one's). A child that
    fails raises RuntimeError with the end of its stderr."""
    argv = [str(a) for a in args]
    proc = subprocess.run([python, "-m", module, *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    if proc.returncode:
        raise RuntimeError(f"{module} {' '.join(argv)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compile_timed(jitted: Any, *args: Any) -> tuple[Any, float]:
    """(`jitted` lowered and compiled for `args`, seconds that took)."""
    start = time.perf_counter()
    compiled = jitted.lower(*args).compile()
    return compiled, time.perf_counter() - start


def compiled_flops(fn: Callable[..., Any], *args: Any) -> float:
    """FLOPs of `jax.jit(fn)` for `args`, from XLA's cost analysis (a loop's body is
    counted once)."""
    import jax

    analysis = jax.jit(fn).lower(*args).compile().cost_analysis()
    if isinstance(analysis, list):  # older jax returns one dict per device
        analysis = analysis[0]
    return float(analysis["flops"])


def compiled_updates(learner: Any, state: Any, batch: Any, keys: Any
                     ) -> tuple[Callable[[], Any], float]:
    """(a call that runs len(keys) learner updates on `batch` from `state` in one jitted
    `lax.scan`, the seconds its compilation took). The batch is an argument of the
    program, as a sampled batch is in training: closed over, it would be a constant that
    XLA folds into the program, and the timing would not be training's."""
    import jax

    def many_updates(state, batch, keys):
        def body(s, key):
            s, metrics, _ = learner.update(s, batch, key)
            return s, metrics["qf_loss"]
        return jax.lax.scan(body, state, keys)[0]

    run, seconds = compile_timed(jax.jit(many_updates), state, batch, keys)
    return (lambda: run(state, batch, keys)), seconds


def time_steady_periods(run_period: Callable[[Any, int], tuple[Any, Any]], state: Any,
                        periods: int) -> tuple[float, float]:
    """(mean seconds of `periods` steady log periods, seconds of the first one, which
    includes compiling) for `run_period(state, period) -> (state, metrics)`, from
    period 1."""
    (state, _), first = timed(run_period, state, 1)
    seconds = []
    for period in range(2, 2 + periods):
        (state, _), t = timed(run_period, state, period)
        seconds.append(t)
    return statistics.fmean(seconds), first


def interleaved_ms(calls: dict[str, Callable[[], Any]], rounds: int, per_call: int,
                   seed: int = 0) -> dict[str, list[float]]:
    """Milliseconds per unit of work of each call in each round, the calls in a random
    order each round (one warm-up call each first), so that drift and other tenants'
    load hit them alike; `per_call`: units of work (iterations, updates) one call does."""
    for call in calls.values():
        timed(call)
    order, rng = list(calls), random.Random(seed)
    ms: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            ms[name].append(timed(calls[name])[1] / per_call * 1e3)
    return ms


def quantiles(ms: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Minimum, 10th and 25th percentiles and median of each call's timings (the low
    quantiles are the least disturbed by load)."""
    import numpy as np

    return {name: {q: round(float(np.quantile(v, p)), 3)
                   for q, p in (("min", 0.0), ("q10", 0.1), ("q25", 0.25), ("median", 0.5))}
            for name, v in ms.items()}


# --- the machine --------------------------------------------------------------------------


def machine(jax_platform: str | None = None, *, devices: bool = True) -> dict[str, Any]:
    """The host (CPU model, cores, memory, OS, Python) and, unless `devices` is False,
    the JAX devices of `jax_platform` (None: JAX's default backend): their kind, count
    and JAX's version; "gpu" names the GPU when the devices are one. (devices=False:
    for a parent process that must not start JAX, which would claim the GPU's memory
    before its children.)"""
    info: dict[str, Any] = {"cpu": _proc_field("/proc/cpuinfo", "model name")
                            or platform.processor() or platform.machine(),
                            "cores": os.cpu_count()}
    memory_kib = _proc_field("/proc/meminfo", "MemTotal")
    if memory_kib:
        info["memory_gib"] = round(int(memory_kib.split()[0]) / 2**20, 1)
    info.update(os=platform.platform(), python=platform.python_version())
    if not devices:
        return info
    import jax

    found = jax.devices(jax_platform)
    info.update(jax=jax.__version__, backend=found[0].platform,
                device_kind=found[0].device_kind, device_count=len(found))
    if found[0].platform == "gpu":
        info["gpu"] = found[0].device_kind
    return info


def _proc_field(path: str, name: str) -> str | None:
    """The value of the first `name: value` line of a /proc file; None where there is
    none (or no /proc)."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith(name)),
                None)


def machine_line(machine: dict[str, Any]) -> str:
    """`machine()` in one sentence."""
    devices = ""
    if "backend" in machine:
        gpu = f"{machine['gpu']} ×{machine['device_count']}, " if "gpu" in machine else ""
        devices = f", {gpu}jax {machine['jax']} ({machine['backend']})"
    return (f"{machine['cpu']}, {machine['cores']} cores, "
            f"{machine.get('memory_gib', '?')} GiB, {machine['os']}, Python "
            f"{machine['python']}{devices}")


def load_average() -> list[float]:
    """The load average over 1, 5 and 15 minutes."""
    return [round(x, 2) for x in os.getloadavg()]


# --- the standard workloads ---------------------------------------------------------------


def pendulum_config(**changes: Any) -> Any:
    """The benchmarks' training workload: Pendulum-v1, one env, batch 256, 256×256
    networks, one gradient step per env step, learning starts 1,000, log periods of
    1,000 env steps, a buffer of 100,000 (the peer comparison's settings but for its
    buffer of 20,000); `changes` replace any of them."""
    import jaxsac

    settings = dict(env_id="Pendulum-v1", learning_starts=1_000, log_every=1_000,
                    total_env_steps=100_000, batch_size=256, hidden_sizes=(256, 256),
                    utd_ratio=1.0, buffer_capacity=100_000)
    return jaxsac.SACConfig(**{**settings, **changes})


def state_after(config: Any, periods: int) -> tuple[Any, Any]:
    """(config's assembly, its training state after `periods` log periods)."""
    import jax

    from jaxsac.assembly import assemble, init_state
    from jaxsac.jax_loop import run_period
    from jaxsac.learner import Hyperparams

    assembly = assemble(config)
    state = jax.jit(lambda k: init_state(assembly, k, Hyperparams.from_config(config)))(
        jax.random.key(0))
    for period in range(periods):
        state, _ = jax.jit(lambda s, p=period: run_period(assembly, s, p))(state)
    return assembly, state


def random_batch(key: Any, batch_size: int = BATCH, obs_dim: int = OBS_DIM,
                 act_dim: int = ACT_DIM) -> Any:
    """A Batch of `batch_size` random transitions: obs [batch_size, obs_dim], actions
    [batch_size, act_dim] (the update workload's input)."""
    import jax
    import jax.numpy as jnp

    from jaxsac.types import Batch

    k = jax.random.split(key, 4)
    return Batch(
        obs=jax.random.normal(k[0], (batch_size, obs_dim)),
        action=jax.random.uniform(k[1], (batch_size, act_dim), minval=-1, maxval=1),
        reward=jax.random.normal(k[2], (batch_size,)),
        next_obs=jax.random.normal(k[3], (batch_size, obs_dim)),
        discount=jnp.full((batch_size,), 0.99),
        n_step=jnp.ones((batch_size,), jnp.int32),
        weights=jnp.ones((batch_size,)),
        indices=jnp.arange(batch_size, dtype=jnp.int32),
    )


NATURE_DQN = dict(conv_channels=(32, 64, 64), conv_kernel_sizes=(8, 4, 3),
                  conv_strides=(4, 2, 1), encoder_features=512)
"""NatureCNN's convolutions and features (stable-baselines3's `CnnPolicy` encoder), as
SACConfig fields."""
IMAGE_UPDATES = {"jaxsac (separate encoders)": dict(encoder_sharing="separate"),
                 "jaxsac (critic's encoder)": dict(encoder_sharing="critic"),
                 "jaxsac (NatureCNN's sizes, separate)": dict(encoder_sharing="separate",
                                                              **NATURE_DQN)}
"""The image update's variants, as SACConfig changes: DrQ's encoder (the default) owned
by each network or by the critics, and NatureCNN's sizes with an encoder per network
(stable-baselines3's networks)."""


def image_batch(key: Any, batch_size: int, shape: tuple[int, int, int],
                act_dim: int = ACT_DIM) -> Any:
    """A Batch of `batch_size` random transitions from images: obs and next_obs
    [batch_size, *shape] uint8, actions [batch_size, act_dim] (the image update's input)."""
    import jax
    import jax.numpy as jnp

    def images(key):
        return jax.random.randint(key, (batch_size, *shape), 0, 256).astype(jnp.uint8)

    k = jax.random.split(key, 2)
    return random_batch(k[0], batch_size, 1, act_dim)._replace(
        obs=images(k[1]), next_obs=images(jax.random.fold_in(k[1], 1)))


def field_overrides(items: Sequence[str]) -> dict[str, Any]:
    """Config fields from command-line items FIELD=JSON, e.g. ["learn_alpha=false",
    "target_entropy_scale=0.89"] -> {"learn_alpha": False, "target_entropy_scale": 0.89}."""
    overrides = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set item {item!r} is not FIELD=JSON")
        overrides[name] = json.loads(value)
    return overrides


def learning_curve(env_id: str, seeds: int, root: int, **overrides: Any) -> dict[str, Any]:
    """Metrics [seeds, periods] (env steps, evaluation return, α, entropy) of the tuned
    `env_id` (with `overrides`) over `seeds` vmapped seeds, and "seconds": the wall time
    of the whole program, compile included."""
    import jax
    import numpy as np

    import jaxsac

    config = jaxsac.tuned(env_id, **overrides)
    start = time.perf_counter()
    _, metrics = jax.jit(jax.vmap(jaxsac.make_train(config)))(
        jax.random.split(jax.random.key(root), seeds))
    out = {name: np.asarray(metrics[name]) for name in ("env_steps", "eval_return", "alpha",
                                                         "entropy")}
    out["seconds"] = np.float64(time.perf_counter() - start)
    return out


def print_curve(curve: dict[str, Any]) -> None:
    """One line per log period: env steps, each seed's evaluation return, α, entropy."""
    import numpy as np

    for p, steps in enumerate(curve["env_steps"][0]):
        print(f"  {int(steps):>6}  eval {np.round(curve['eval_return'][:, p]).astype(int)}"
              f"  alpha {np.round(curve['alpha'][:, p], 3)}"
              f"  entropy {np.round(curve['entropy'][:, p], 3)}")


# --- reports ------------------------------------------------------------------------------


def utc_date() -> str:
    """Now, as reports date themselves."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def command_line(program: str, argv: Sequence[str]) -> str:
    """The command that ran: `program` and its arguments, quoted for a shell."""
    return " ".join([program, *(shlex.quote(a) for a in argv)])


def write_report(report: dict[str, Any], markdown: str, out_json: str | Path | None,
                 out_md: str | Path | None) -> list[Path]:
    """Writes the JSON report and its markdown where asked (None: not written; a
    relative path: from the working directory); the paths written."""
    written = []
    for path, text in ((out_json, json.dumps(report, indent=1)), (out_md, markdown)):
        if path is None:
            continue
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text.rstrip("\n") + "\n")
        written.append(target)
    return written


def publish_report(report: dict[str, Any], markdown: str, out_json: str | Path,
                   out_md: str | Path) -> None:
    """Prints the markdown, writes it and the JSON report (`write_report`) and says where
    on stderr."""
    print(markdown)
    for path in write_report(report, markdown, out_json, out_md):
        print(f"wrote {path}", file=sys.stderr)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]],
                   align: str | None = None) -> list[str]:
    """A markdown table's lines; `align`: "l" or "r" per column (None: all left)."""
    rule = {"l": "---", "r": "---:"}
    line = lambda cells: "| " + " | ".join(cells) + " |"  # noqa: E731
    return [line(header), "|" + "|".join(rule[a] for a in align or "l" * len(header)) + "|",
            *(line(row) for row in rows)]


def number(x: float | None, digits: int = 1) -> str:
    """`x` with thousands separators and `digits` decimals; "—" for None or not finite."""
    if x is None or not math.isfinite(x):
        return "—"
    return f"{x:,.{digits}f}"


def signed(x: float) -> str:
    """A return as the tables print it: no decimals, a real minus sign."""
    return f"{x:.0f}".replace("-", "−")


def times(x: float | None) -> str:
    """A ratio: "2.31×"; "—" for None."""
    return "—" if x is None else f"{x:.2f}×"


def provenance(command: str, load_before: list[float],
               jax_platform: str | None = None) -> dict[str, Any]:
    """A report's first fields: when and by which command it was made, on which machine
    (its devices of `jax_platform`), and the load average before and now."""
    return {"date": utc_date(), "command": command, "machine": machine(jax_platform),
            "load_before": load_before, "load_after": load_average()}


def conditions_line(report: dict[str, Any]) -> str:
    """The machine and load of a report with `provenance`, in one sentence."""
    return (f"Machine: {machine_line(report['machine'])}; load average "
            f"{report['load_before']} before, {report['load_after']} after (1, 5, 15 min; "
            "timings are comparable only when nothing else ran).")
