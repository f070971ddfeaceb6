"""Start-up: how long before `train()` logs its first rows, cold, warm and repeated.

    .venv/bin/python -m experiments.benchmarks.bench_startup [--rounds 3]
    (rejax, sbx and stable-baselines3 too when .venv-peers exists:
    bash experiments/benchmarks/setup_peers.sh)

The run is the issue's short one: Pendulum-v1, 1,000 env steps, learning starts 500,
log periods of 500 env steps (the first period is all warm-up, the second takes the
first gradient steps), 10 evaluation episodes per period, the default networks.

- cold: a fresh process with an empty cache folder (`jaxsac.compilation.enable_cache`:
  JAX's persistent compilation cache and the kept programs of `train`);
- warm: a fresh process again, with the folder the cold run filled (what the CLI and
  `make train` do by default);
- repeated: the same config again in the same process (`train` keeps its compiled
  programs, jaxsac.jax_loop.kept_jax_loop), alternating with one jitted `make_train` program of
  the same config run again in that process.

Each fresh process reports, from its first line (before `import jax`): the imports,
the end of the first log period (first env steps logged), the end of the second (first
gradient steps logged) and the whole `train()` call. Rounds alternate cold and warm;
figures are medians over the rounds. Writes one JSON line per process and a summary.

rejax (under .venv-peers' Python) runs the same config, `jax.jit(SAC.train)` with JAX's
persistent cache in the same way (cold: empty, warm: filled by the cold run): its
figures are the whole jitted call (compile and run, its own evaluation every 500 env
steps) and the same call repeated in the process.

sbx and stable-baselines3 (under .venv-peers' Python) train the same config through
their SAC class (SB3's collection loop, one gradient step per env step), with 10
deterministic episodes of gymnasium's Pendulum-v1 at the end of each 500 env steps
(`peer_runners.common.evaluate`), as jaxsac evaluates each log period; their period
ends are timed like jaxsac's. Repeated: a new model of the same config trained again in
the process. sbx compiles with JAX's persistent cache set as rejax's; stable-baselines3
(torch, one thread as in the peer comparison) compiles nothing, so its warm process
differs from its cold one only by the operating system's file cache.
"""

from __future__ import annotations

import time

START = time.perf_counter()

import argparse  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

CONFIG = dict(env_id="Pendulum-v1", total_env_steps=1_000, learning_starts=500, log_every=500)


def since_start() -> float:
    return round(time.perf_counter() - START, 3)


def child(cache_dir: str, repeats: int) -> dict:
    """One fresh process: `train()` once (timed from the process's start), then
    `repeats` more `train()` calls and as many `make_train` runs."""
    import jax

    import jaxsac

    jaxsac.compilation.enable_cache(cache_dir)
    record = {"imports_s": since_start()}
    rows = []
    config = jaxsac.SACConfig(**CONFIG)
    begin = time.perf_counter()
    jaxsac.train(config, progress=False,
                 callback=lambda row, state: rows.append(since_start()))
    record.update(first_period_s=rows[0], first_gradient_period_s=rows[1],
                  train_s=round(time.perf_counter() - begin, 3), process_s=since_start())

    def timed(fn) -> float:
        begin = time.perf_counter()
        jax.block_until_ready(fn())
        return round(time.perf_counter() - begin, 3)

    program = jax.jit(jaxsac.make_train(config))
    record["make_train_first_s"] = timed(lambda: program(jax.random.key(0)))
    pairs = [(timed(lambda: jaxsac.train(config, progress=False).state),
              timed(lambda: program(jax.random.key(0)))) for _ in range(repeats)]
    record["repeated_train_s"], record["make_train_s"] = map(list, zip(*pairs, strict=True))
    return record


def rejax_child(cache_dir: str, repeats: int) -> dict:
    """One fresh process of rejax's SAC on the same config (default 256x256 networks,
    batch 256, Adam 3e-4, learning starts 500, 1,000 env steps)."""
    import jax
    from rejax import SAC

    jax.config.update("jax_compilation_cache_dir", cache_dir)
    # Every program cached, as jaxsac.compilation.enable_cache does by default.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    record = {"imports_s": since_start()}
    algo = SAC.create(env=CONFIG["env_id"], total_timesteps=CONFIG["total_env_steps"],
                      fill_buffer=CONFIG["learning_starts"], eval_freq=CONFIG["log_every"],
                      batch_size=256, learning_rate=3e-4, hidden_layer_sizes=(256, 256))
    train = jax.jit(algo.train)

    def timed() -> float:
        begin = time.perf_counter()
        jax.block_until_ready(train(jax.random.PRNGKey(0)))
        return round(time.perf_counter() - begin, 3)

    record["train_s"] = timed()
    record["process_s"] = since_start()
    record["repeated_train_s"] = [timed() for _ in range(repeats)]
    return record


def sb3_api_child(library: str, cache_dir: str, repeats: int) -> dict:
    """One fresh process of sbx's ("sbx") or stable-baselines3's ("sb3") SAC on the same
    config (256x256 networks, batch 256, Adam 3e-4, learning starts 500, 1,000 env
    steps, a buffer holding them all)."""
    if library == "sbx":
        import jax
        from sbx import SAC

        jax.config.update("jax_compilation_cache_dir", cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    else:
        import torch
        from stable_baselines3 import SAC

        torch.set_num_threads(1)
    from stable_baselines3.common.callbacks import BaseCallback

    from experiments.benchmarks.peer_runners.common import evaluate

    record = {"imports_s": since_start()}
    period_ends: list[float] = []

    class PeriodEnds(BaseCallback):
        """At every log_every env steps: 10 deterministic episodes, then a timestamp."""

        def _on_step(self) -> bool:
            if self.num_timesteps % CONFIG["log_every"] == 0:
                evaluate(lambda obs: self.model.predict(obs, deterministic=True)[0],
                         CONFIG["env_id"], 10)
                period_ends.append(since_start())
            return True

    def train() -> float:
        begin = time.perf_counter()
        model = SAC("MlpPolicy", CONFIG["env_id"], learning_rate=3e-4,
                    buffer_size=CONFIG["total_env_steps"],
                    learning_starts=CONFIG["learning_starts"], batch_size=256, train_freq=1,
                    gradient_steps=1, policy_kwargs=dict(net_arch=[256, 256]), seed=0,
                    verbose=0, **({"device": "cpu"} if library == "sb3" else {}))
        model.learn(total_timesteps=CONFIG["total_env_steps"], callback=PeriodEnds())
        return round(time.perf_counter() - begin, 3)

    record["train_s"] = train()
    record.update(first_period_s=period_ends[0], first_gradient_period_s=period_ends[1],
                  process_s=since_start())
    record["repeated_train_s"] = [train() for _ in range(repeats)]
    return record


def fresh_process(python: str, child_flag: str, cache_dir: str, repeats: int) -> dict:
    out = subprocess.run([python, "-m", "experiments.benchmarks.bench_startup",
                          child_flag, cache_dir, "--repeats", str(repeats)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def median(records: list[dict], name: str) -> float:
    values = [r[name] if not isinstance(r[name], list) else statistics.median(r[name])
              for r in records]
    return round(statistics.median(values), 2)


def summarize(records: list[dict]) -> dict[str, float]:
    return {name: median(records, name) for name in records[0]
            if name not in ("make_train_first_s",)}


CHILDREN = {
    "jaxsac": child,
    "rejax": rejax_child,
    "sbx": functools.partial(sb3_api_child, "sbx"),
    "sb3": functools.partial(sb3_api_child, "sb3"),
}
"""Each library's fresh-process run: (cache folder, repeats) -> its record."""
LIBRARIES = tuple(CHILDREN)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3,
                   help="repeated train() calls and make_train runs in each process")
    p.add_argument("--peers-python", default=".venv-peers/bin/python")
    p.add_argument("--libraries", nargs="+", choices=LIBRARIES, default=list(LIBRARIES),
                   help="the peers need --peers-python (left out when it does not exist)")
    for library in LIBRARIES:
        p.add_argument(f"--{library}-child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for library, run in CHILDREN.items():
        cache_dir = getattr(args, f"{library}_child")
        if cache_dir is not None:
            print(json.dumps(run(cache_dir, args.repeats)))
            return
    peers = os.path.exists(args.peers_python)
    pythons = {lib: (sys.executable if lib == "jaxsac" else args.peers_python, f"--{lib}-child")
               for lib in args.libraries if lib == "jaxsac" or peers}
    runs = {(lib, kind): [] for lib in pythons for kind in ("cold", "warm")}
    for r in range(args.rounds):
        for library, (python, flag) in pythons.items():
            with tempfile.TemporaryDirectory(prefix="startup-cache-") as cache_dir:
                for kind in ("cold", "warm"):
                    runs[library, kind].append(
                        fresh_process(python, flag, cache_dir, args.repeats))
                    print(json.dumps({"round": r, "library": library, "kind": kind,
                                      **runs[library, kind][-1]}), flush=True)
    summary = {f"{library} {kind}": summarize(records)
               for (library, kind), records in runs.items()}
    summary["machine"] = {"cpus": os.cpu_count(), "load_average": os.getloadavg()}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
