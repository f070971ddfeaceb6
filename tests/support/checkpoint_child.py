"""A fresh process for the checkpoint tests (run as a script, not collected by pytest).

    python tests/support/checkpoint_child.py train CONFIG_JSON [CONFIG_JSON ...]
        jaxsac.train(SACConfig.from_json(c)) for each config in turn; the last stdout line
        is a JSON list with, per config, {"env_steps": [...], "grad_steps": [...]} of the
        log periods that call ran, or {"error": type, "message": ...} when it raised.
    python tests/support/checkpoint_child.py policy DIRECTORY SEED NUM_EPISODES
        drives NUM_EPISODES gymnasium Pendulum-v1 envs (env i reset with seed SEED + i)
        with jaxsac.load_policy(DIRECTORY); the last stdout line is JSON
        {"returns": [...]}.
"""

from __future__ import annotations

import json
import sys


def train(config_json: str) -> dict:
    import numpy as np

    import jaxsac

    config = jaxsac.SACConfig.from_json(config_json)
    try:
        result = jaxsac.train(config, progress=False)
    except Exception as e:  # noqa: BLE001 - reported to the parent test
        return {"error": type(e).__name__, "message": str(e)}
    return {name: np.asarray(result.metrics.get(name, [])).tolist()
            for name in ("env_steps", "grad_steps")}


def policy_returns(directory: str, seed: int, num_episodes: int) -> dict:
    """Episodes run side by side, the policy called on the batch of their observations."""
    import gymnasium
    import numpy as np

    from jaxsac import load_policy

    policy = load_policy(directory)
    envs = [gymnasium.make("Pendulum-v1") for _ in range(num_episodes)]
    obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(envs)])
    totals = np.zeros(num_episodes)
    done = np.zeros(num_episodes, bool)
    while not done.all():
        actions = policy(obs)
        for i, env in enumerate(envs):
            if not done[i]:
                obs[i], reward, terminated, truncated, _ = env.step(actions[i])
                totals[i] += float(np.float32(reward))
                done[i] = terminated or truncated
    for env in envs:
        env.close()
    return {"returns": totals.tolist()}


def main(argv: list[str]) -> None:
    mode, *args = argv
    if mode == "train":
        out = [train(config_json) for config_json in args]
    elif mode == "policy":
        out = policy_returns(args[0], int(args[1]), int(args[2]))
    else:
        raise SystemExit(f"checkpoint_child: unknown mode {mode!r}; modes: train, policy")
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
