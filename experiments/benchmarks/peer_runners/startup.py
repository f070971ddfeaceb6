"""The fresh processes of experiments/benchmarks/bench_startup.py: one library's run of
the start-up config, timed from the process's first line; prints one JSON line.

    .venv/bin/python -m experiments.benchmarks.peer_runners.startup --library jaxsac \
        --cache-dir DIR [--repeats 3]
    .venv-peers/bin/python -m experiments.benchmarks.peer_runners.startup --library rejax ...

jaxsac runs under jaxsac's `.venv`, rejax, sbx and stable-baselines3 under `.venv-peers`.
What each measures: bench_startup's docstring.
"""

from __future__ import annotations

import time

START = time.perf_counter()

import argparse  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402

from experiments.benchmarks import harness  # noqa: E402
from experiments.benchmarks.peer_runners import common  # noqa: E402

CONFIG = dict(env_id="Pendulum-v1", total_env_steps=1_000, learning_starts=500, log_every=500)


def since_start() -> float:
    return round(time.perf_counter() - START, 3)


def jaxsac_child(cache_dir: str, repeats: int) -> dict:
    """One fresh process: `train()` once (timed from the process's start), then
    `repeats` more `train()` calls and as many `make_train` runs. Nothing is called to
    turn the compilation cache on: `train`'s default does, in $JAXSAC_CACHE_DIR, as in a
    notebook."""
    os.environ.update(JAXSAC_CACHE_DIR=cache_dir, JAXSAC_COMPILATION_CACHE="1")
    import jax

    import jaxsac

    record = {"imports_s": since_start()}
    rows = []
    config = jaxsac.SACConfig(**CONFIG)
    begin = time.perf_counter()
    jaxsac.train(config, progress=False,
                 callback=lambda row, state: rows.append(since_start()))
    record.update(first_period_s=rows[0], first_gradient_period_s=rows[1],
                  train_s=round(time.perf_counter() - begin, 3), process_s=since_start())

    def timed(fn) -> float:
        return round(harness.timed(fn)[1], 3)

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
        return round(harness.timed(train, jax.random.PRNGKey(0))[1], 3)

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

    record = {"imports_s": since_start()}
    period_ends: list[float] = []

    class PeriodEnds(BaseCallback):
        """At every log_every env steps: 10 deterministic episodes, then a timestamp."""

        def _on_step(self) -> bool:
            if self.num_timesteps % CONFIG["log_every"] == 0:
                common.evaluate(lambda obs: self.model.predict(obs, deterministic=True)[0],
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


CHILDREN = {
    "jaxsac": jaxsac_child,
    "rejax": rejax_child,
    "sbx": functools.partial(sb3_api_child, "sbx"),
    "sb3": functools.partial(sb3_api_child, "sb3"),
}
"""Each library's fresh-process run: (cache folder, repeats) -> its record."""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--library", choices=list(CHILDREN), required=True)
    p.add_argument("--cache-dir", required=True, help="JAX's persistent cache folder")
    p.add_argument("--repeats", type=int, default=3,
                   help="repeated train() calls (and make_train runs) in the process")
    args = p.parse_args()
    print(json.dumps(CHILDREN[args.library](args.cache_dir, args.repeats)))


if __name__ == "__main__":
    main()
