"""jaxsac against rejax, piece by piece: the update alone and whole iterations, alternated.

Run with the peers' virtualenv (it has rejax; jaxsac is imported from this checkout),
from the repository root:

    .venv-peers/bin/python -m experiments.benchmarks.compare_rejax [--rounds 40]

The peer comparison times whole runs; this isolates where they differ. Four jitted
scans of `--iterations` steps each, interleaved (`harness.interleaved_ms`):

- rejax iteration: `SAC.train_iteration` (env step, buffer add, sample, update) after
  2,000 iterations, the settings of the peer comparison (batch 256, 256×256 ReLU, one
  gradient step per env step, Polyak every step);
- jaxsac iteration: LEARN iterations (`run_iterations`), after 2,000 env steps (profile_iteration);
- rejax update: `SAC.update` plus its Polyak step on one fixed minibatch;
- jaxsac update: `learner.update` on the same minibatch.

Both updates do the same FLOPs (XLA's cost analysis, printed).
"""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp

from experiments.benchmarks import harness, peer_tasks
from jaxsac.jax_loop import run_iterations

POLYAK = 0.995  # rejax's name for 1 - tau
PEERS_BUFFER = peer_tasks.TASKS["pendulum"].buffer_size  # holds the comparison's whole run


def rejax_setup(iterations: int):
    """(rejax SAC, its train state after 2,000 iterations, iteration scan, update scan)."""
    from rejax import SAC
    from rejax.buffers import Minibatch

    algo = SAC.create(env="Pendulum-v1", num_envs=1, total_timesteps=100_000,
                      learning_rate=3e-4, gamma=0.99, polyak=POLYAK, target_update_freq=1,
                      buffer_size=20_000, fill_buffer=1_000, batch_size=256, num_epochs=1,
                      hidden_layer_sizes=(256, 256), agent_kwargs={"activation": "relu"})

    def iterate(ts, n):
        return jax.lax.fori_loop(0, n, lambda _, t: algo.train_iteration(t), ts)

    ts = jax.jit(iterate, static_argnums=1)(algo.init_state(jax.random.PRNGKey(0)), 2_000)

    def updates(ts, batch):
        mb = Minibatch(obs=batch.obs, action=batch.action, reward=batch.reward,
                       next_obs=batch.next_obs, done=jnp.zeros_like(batch.reward))

        def body(ts, _):
            ts = algo.update(ts, mb)
            target = jax.tree.map(lambda t, o: POLYAK * t + (1 - POLYAK) * o,
                                  ts.critic_target_params, ts.critic_ts.params)
            return ts.replace(critic_target_params=target), None
        return jax.lax.scan(body, ts, None, length=iterations)[0]

    return ts, jax.jit(lambda t: iterate(t, iterations)), jax.jit(updates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--iterations", type=int, default=300, help="iterations per call")
    args = parser.parse_args()
    n = args.iterations

    assembly, state = harness.state_after(
        harness.pendulum_config(buffer_capacity=PEERS_BUFFER), 2)
    batch = jax.jit(assembly.buffer.sample)(state.buffer, jax.random.key(1))
    keys = jax.random.split(jax.random.key(2), n)

    def jaxsac_updates(learner_state, batch):
        return jax.lax.scan(lambda s, k: (assembly.learner.update(s, batch, k)[0], None),
                            learner_state, keys)[0]

    jaxsac_iterations = jax.jit(lambda s: run_iterations(assembly, s, s.iteration, n)[0])
    jaxsac_update_scan = jax.jit(jaxsac_updates)
    ts, rejax_iterations, rejax_update_scan = rejax_setup(n)
    calls = {
        "rejax iteration": lambda: rejax_iterations(ts),
        "jaxsac iteration": lambda: jaxsac_iterations(state),
        "rejax update": lambda: rejax_update_scan(ts, batch),
        "jaxsac update": lambda: jaxsac_update_scan(state.learner, batch),
    }
    ms = harness.interleaved_ms(calls, args.rounds, n)
    # The scans' bodies are counted once by the cost analysis: FLOPs of one update.
    update_flops = {"rejax": harness.compiled_flops(rejax_update_scan, ts, batch),
                    "jaxsac": harness.compiled_flops(jaxsac_updates, state.learner, batch)}
    print(json.dumps({"machine": harness.machine(), "load_average": harness.load_average(),
                      "rounds": args.rounds, "iterations_per_call": n,
                      "gflop_per_update": {k: round(v / 1e9, 4) for k, v in update_flops.items()},
                      "ms_per_iteration_or_update": harness.quantiles(ms)}, indent=2))


if __name__ == "__main__":
    main()
