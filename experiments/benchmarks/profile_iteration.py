"""Where one training iteration's time goes: a breakdown by timing its pieces alone.

    .venv/bin/python -m experiments.benchmarks.profile_iteration [--iterations 1000]

Pendulum-v1, batch 256, 256×256 networks, one env, uniform replay (20,000 steps held),
the peers' comparison settings. Every piece runs as a jitted `lax.scan` of
`--iterations` steps on a state after 2,000 env steps, best of `--repeats` calls:

- iteration: a whole LEARN iteration (env step, policy action, add, sample, update);
- collect: the same iteration with one gradient step per 1,000 iterations (env step,
  policy action, add, episode bookkeeping);
- sample + update: the gradient step of an iteration (`gradient_steps`, one step);
- update: `learner.update` alone on a fixed batch;
- sample: `buffer.sample` alone;
- random: the iteration's key derivations alone (`iteration_keys` and the splits).

The rest (iteration − collect − sample + update) is what joining them costs. Also the
XLA operations in the compiled loop body of an iteration and of an update (each fusion,
copy, dot or nested loop is one step the CPU runtime dispatches), and the compile time
of the steady log-period program with 1, 8 and 32 gradient steps per iteration
(`--compile-utd`): the steps are a `lax.scan`, so it should stay flat.
"""

from __future__ import annotations

import argparse
import collections
import json
import re

import jax
import jax.numpy as jnp

import jaxsac
from experiments.benchmarks import harness, peer_tasks
from jaxsac.assembly import assemble, init_state, iteration_keys
from jaxsac.iteration import gradient_steps
from jaxsac.jax_loop import run_iterations, run_period
from jaxsac.learner import Hyperparams

PEERS_BUFFER = peer_tasks.TASKS["pendulum"].buffer_size  # holds the comparison's whole run


def loop_body_ops(compiled_text: str) -> dict[str, int]:
    """Operations of the largest `while` body in XLA's optimized HLO, by kind."""
    bodies: dict[str, list[str]] = {}
    current = None
    for line in compiled_text.splitlines():
        header = re.match(r"^(?:ENTRY )?(%[\w.\-]+) .*\{$", line)
        if header:
            current = header.group(1)
            bodies[current] = []
        elif line.startswith("}"):
            current = None
        elif current and " = " in line:
            bodies[current].append(line)
    names = re.findall(r"body=(%[\w.\-]+)", compiled_text)
    largest = max((bodies[name] for name in names), key=len)
    kinds = collections.Counter(
        m.group(1) for m in (re.search(r"= (?:\([^)]*\)|\S+) ([\w-]+)\(", op) for op in largest)
        if m)
    return {"total": len(largest), "while": kinds["while"], **dict(kinds.most_common(6))}


def compile_seconds(config: jaxsac.SACConfig) -> float:
    """Seconds to lower and compile the steady log-period program of `config`."""
    assembly = assemble(config)
    state = jax.eval_shape(lambda k: init_state(assembly, k, Hyperparams.from_config(config)),
                           jax.random.key(0))
    return harness.compile_timed(jax.jit(lambda s: run_period(assembly, s, jnp.int32(2))),
                                 state)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--compile-utd", type=int, nargs="*", default=[1, 8, 32])
    args = parser.parse_args()
    n, repeats = args.iterations, args.repeats

    config = harness.pendulum_config(buffer_capacity=PEERS_BUFFER)
    assembly, state = harness.state_after(config, 2)
    collect_program, _ = harness.state_after(config.replace(utd_ratio=1e-3), 0)
    stats = state.runner.obs_norm
    batch = jax.jit(assembly.buffer.sample)(state.buffer, jax.random.key(1))

    def scan(body, carry):
        return jax.lax.scan(lambda c, k: (body(c, k), None), carry,
                            jax.random.split(jax.random.key(2), n))[0]

    pieces = {
        "iteration": jax.jit(lambda s: run_iterations(assembly, s, s.iteration, n)[0]),
        "collect": jax.jit(lambda s: run_iterations(collect_program, s, s.iteration, n)[0]),
        "sample + update": jax.jit(lambda s: scan(lambda c, k: gradient_steps(
            assembly, c[0], c[1], stats, k, 1)[:2], (s.learner, s.buffer))),
        "update": jax.jit(lambda s: scan(
            lambda ls, k: assembly.learner.update(ls, batch, k)[0], s.learner)),
        "sample": jax.jit(lambda s: scan(
            lambda acc, k: acc + assembly.buffer.sample(s.buffer, k).reward[0],
            jnp.zeros(()))),
        "random": jax.jit(lambda s: scan(
            lambda acc, k: acc + jax.random.key_data(jax.random.split(
                iteration_keys(k, s.iteration)[1], 2)).sum(), jnp.zeros((), jnp.uint32))),
    }
    micros = {name: 1e6 * harness.best_time(fn, state, repeats=repeats) / n
              for name, fn in pieces.items()}
    ops = {name: loop_body_ops(pieces[name].lower(state).compile().as_text())
           for name in ("iteration", "update")}
    micros["joining"] = micros["iteration"] - micros["collect"] - micros["sample + update"]
    compile_s = {utd: round(compile_seconds(config.replace(utd_ratio=float(utd))), 2)
                 for utd in args.compile_utd}
    print(json.dumps({
        "machine": harness.machine(),
        "load_average": harness.load_average(),
        "iterations": n,
        "microseconds_per_iteration": {k: round(v, 1) for k, v in micros.items()},
        "env_steps_per_s": round(1e6 / micros["iteration"], 1),
        "loop_body_operations": ops,
        "compile_s_by_gradient_steps_per_iteration": compile_s,
    }, indent=2))


if __name__ == "__main__":
    main()
