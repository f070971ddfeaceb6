"""Compile time and run time of one `make_train` program: a tuned example, vmapped over
seeds, compiled once (`lower().compile()`) and run twice with the same keys.

    .venv/bin/python -m experiments.benchmarks.bench_compile [--env-id Pendulum-v1]
        [--seeds 5] [--total-env-steps 3000]

Prints one JSON line: the compile seconds and both runs' seconds (each ended by
`block_until_ready`). For an A/B of two commits, run it from each checkout in turn,
alternating, on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json

from experiments.benchmarks import harness


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env-id", default="Pendulum-v1", help="an env with a tuned example")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--total-env-steps", type=int, default=3_000)
    args = p.parse_args()

    import jax

    import jaxsac

    config = jaxsac.tuned(args.env_id, total_env_steps=args.total_env_steps)
    program = jax.jit(jax.vmap(jaxsac.make_train(config)))
    keys = jax.random.split(jax.random.key(0), args.seeds)
    compiled, compile_s = harness.compile_timed(program, keys)
    runs = [round(harness.timed(compiled, keys)[1], 2) for _ in range(2)]
    print(json.dumps({"env_id": args.env_id, "seeds": args.seeds,
                      "total_env_steps": args.total_env_steps,
                      "compile_s": round(compile_s, 2), "run_s": runs}))


if __name__ == "__main__":
    main()
