"""stable-baselines3's SAC gradient updates from pixels (`CnnPolicy`): ms per update;
prints JSON.

Run with the peers' virtualenv, from the repository root:

    .venv-peers/bin/python -m experiments.benchmarks.peer_runners.sb3_image_update \
        [--size 84] [--channels 9] [--batch 256] [--updates 4] [--rounds 1]

The counterpart of experiments/benchmarks/bench_image_update.py: observations
[size, size, channels] uint8 (random pixels, channels last as gymnasium gives them; SB3
moves the channels first for its encoder), Box actions of 1, SB3's default `CnnPolicy`
for SAC (NatureCNN: 32 8x8/4, 64 4x4/2 and 64 3x3/1 convolutions and 512 features, the
actor's and the critics' encoders apart, 256x256 heads, twin critics). One call is
`model.train(gradient_steps=updates)`: the replay sample of every step's batch and the
steps. One warm-up call, then `--rounds` timed calls.
"""

from __future__ import annotations

import argparse
import json

import gymnasium
import numpy as np

from experiments.benchmarks import harness


def image_env(size: int, channels: int) -> gymnasium.Env:
    """Random uint8 images [size, size, channels], actions in [-1, 1], episodes of 1,000."""

    class ImageEnv(gymnasium.Env):
        observation_space = gymnasium.spaces.Box(0, 255, (size, size, channels), np.uint8)
        action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)

        def _obs(self):
            return self.np_random.integers(0, 256, (size, size, channels), np.uint8)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self._t = 0
            return self._obs(), {}

        def step(self, action):
            self._t += 1
            return self._obs(), float(self.np_random.normal()), False, self._t >= 1000, {}

    return ImageEnv()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=84)
    parser.add_argument("--channels", type=int, default=9)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--updates", type=int, default=4, help="updates per timed call")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()

    import stable_baselines3
    import torch
    from stable_baselines3 import SAC

    model = SAC("CnnPolicy", image_env(args.size, args.channels), batch_size=args.batch,
                learning_starts=1_000, buffer_size=2_000, seed=0, device="cpu")
    model.learn(total_timesteps=1_000)  # random actions into the buffer, no update
    ms = harness.interleaved_ms(
        {"sb3": lambda: model.train(gradient_steps=args.updates, batch_size=args.batch)},
        args.rounds, args.updates)["sb3"]
    print(json.dumps({"ms_per_update": ms, "torch_threads": torch.get_num_threads(),
                      "versions": {"stable-baselines3": stable_baselines3.__version__,
                                   "torch": torch.__version__}}))


if __name__ == "__main__":
    main()
