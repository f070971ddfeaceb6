"""Start-up: how long before `train()` logs its first rows, cold, warm and repeated.

    .venv/bin/python -m experiments.benchmarks.bench_startup [--rounds 3]
    (rejax, sbx and stable-baselines3 too when .venv-peers exists:
    bash experiments/benchmarks/setup_peers.sh)

The run is the issue's short one: Pendulum-v1, 1,000 env steps, learning starts 500,
log periods of 500 env steps (the first period is all warm-up, the second takes the
first gradient steps), 10 evaluation episodes per period, the default networks.

- cold: a fresh process with an empty cache folder (`train`'s default cache,
  `jaxsac.compilation.enable_default_cache`, in $JAXSAC_CACHE_DIR: JAX's persistent
  compilation cache and the kept programs of `train`; nothing is called to turn it on);
- warm: a fresh process again, with the folder the cold run filled (what the CLI and
  `make train` do by default);
- repeated: the same config again in the same process (`train` keeps its compiled
  programs, jaxsac.jax_loop.kept_jax_loop), alternating with one jitted `make_train` program of
  the same config run again in that process.

Each fresh process (experiments/benchmarks/peer_runners/startup.py) reports, from its
first line (before `import jax`): the imports, the end of the first log period (first
env steps logged), the end of the second (first gradient steps logged) and the whole
`train()` call. Rounds alternate cold and warm;
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

import argparse
import json
import os
import statistics
import sys
import tempfile

from experiments.benchmarks import harness


def fresh_process(python: str, library: str, cache_dir: str, repeats: int) -> dict:
    """`library`'s record from a fresh process of peer_runners.startup."""
    return harness.child_record(python, "experiments.benchmarks.peer_runners.startup",
                                ["--library", library, "--cache-dir", cache_dir,
                                 "--repeats", repeats])


def median(records: list[dict], name: str) -> float:
    values = [r[name] if not isinstance(r[name], list) else statistics.median(r[name])
              for r in records]
    return round(statistics.median(values), 2)


def summarize(records: list[dict]) -> dict[str, float]:
    return {name: median(records, name) for name in records[0]
            if name not in ("make_train_first_s",)}


LIBRARIES = ("jaxsac", "rejax", "sbx", "sb3")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3,
                   help="repeated train() calls and make_train runs in each process")
    p.add_argument("--peers-python", default=".venv-peers/bin/python")
    p.add_argument("--libraries", nargs="+", choices=LIBRARIES, default=list(LIBRARIES),
                   help="the peers need --peers-python (left out when it does not exist)")
    args = p.parse_args(argv)
    peers = os.path.exists(args.peers_python)
    pythons = {lib: sys.executable if lib == "jaxsac" else args.peers_python
               for lib in args.libraries if lib == "jaxsac" or peers}
    runs = {(lib, kind): [] for lib in pythons for kind in ("cold", "warm")}
    for r in range(args.rounds):
        for library, python in pythons.items():
            with tempfile.TemporaryDirectory(prefix="startup-cache-") as cache_dir:
                for kind in ("cold", "warm"):
                    runs[library, kind].append(
                        fresh_process(python, library, cache_dir, args.repeats))
                    print(json.dumps({"round": r, "library": library, "kind": kind,
                                      **runs[library, kind][-1]}), flush=True)
    summary = {f"{library} {kind}": summarize(records)
               for (library, kind), records in runs.items()}
    summary["machine"] = {**harness.machine(devices=False),
                          "load_average": harness.load_average()}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
