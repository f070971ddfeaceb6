"""sbx's gradient updates of SAC, TQC and CrossQ at HalfCheetah's sizes; prints JSON.

Run with the peers' virtualenv, from the repository root:

    .venv-peers/bin/python -m experiments.benchmarks.peer_runners.sbx_update \
        [--updates 20] [--rounds 9]

The counterpart of experiments/benchmarks/bench_families.py: batch 256, 256x256 actor
and critics, observations of 17 entries, Box actions of 6 (an env of those sizes with
random observations fills the replay buffer; the update's cost does not depend on
them), one actor update per critic update (CrossQ's policy_delay set to 1, as jaxsac's
policy_update_every=1; sbx's CrossQ keeps its batch-renormalized actor). One call is
`model.train(gradient_steps=updates)`: the replay buffer's sample of every step's batch
(numpy) and the jitted steps. The algorithms alternate in a random order each round
(`harness.interleaved_ms`); reported per algorithm: ms per update, minimum, 10th and
25th percentiles and median over the rounds.
"""

from __future__ import annotations

import argparse
import json

import gymnasium
import numpy as np

from experiments.benchmarks import harness

OBS_DIM, ACT_DIM = 17, 6


class SizedEnv(gymnasium.Env):
    """Random observations [17], actions in [-1, 1]^6, episodes of 1,000 steps."""

    observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    action_space = gymnasium.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self.np_random.normal(size=OBS_DIM).astype(np.float32), {}

    def step(self, action):
        self._t += 1
        obs = self.np_random.normal(size=OBS_DIM).astype(np.float32)
        return obs, float(self.np_random.normal()), False, self._t >= 1000, {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=20, help="updates per timed call")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()

    import jax
    from sbx import SAC, TQC, CrossQ

    jax.devices()
    common = dict(batch_size=harness.BATCH, learning_starts=2_000, buffer_size=10_000,
                  seed=0)
    algorithms = {"sac": (SAC, {}), "tqc": (TQC, {}), "crossq": (CrossQ, dict(policy_delay=1))}
    calls = {}
    for name, (cls, extra) in algorithms.items():
        # a dict of its own each: sbx's TQC adds its settings to the one it is given
        model = cls("MlpPolicy", SizedEnv(), policy_kwargs=dict(net_arch=[256, 256]),
                    **common, **extra)
        model.learn(total_timesteps=2_000)  # random actions into the buffer, no update
        calls[name] = (lambda m=model: m.train(gradient_steps=args.updates,
                                               batch_size=harness.BATCH))
    load_before = harness.load_average()
    ms = harness.interleaved_ms(calls, args.rounds, args.updates)
    print(json.dumps({"machine": harness.machine(), "load_average_before": load_before,
                      "load_average_after": harness.load_average(), "rounds": args.rounds,
                      "updates_per_call": args.updates,
                      "versions": {"jax": jax.__version__},
                      "ms_per_update": harness.quantiles(ms)}, indent=2))


if __name__ == "__main__":
    main()
