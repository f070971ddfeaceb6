"""A float64 NumPy re-implementation of the SAC networks and losses, for tests.

Written from docs/semantics.md, independently of jaxsac's JAX code: it reads flax
parameter
dicts and recomputes forward passes, log-probabilities and losses in float64.
"""

from __future__ import annotations

import numpy as np


def _dense_layers(tree: dict) -> list[dict]:
    """Dense_0, Dense_1, ... in order (flax names layers by creation index)."""
    names = sorted((k for k in tree if k.startswith("Dense_")), key=lambda k: int(k[6:]))
    return [tree[name] for name in names]


def mlp(layers: list[dict], x: np.ndarray) -> np.ndarray:
    """ReLU MLP, linear last layer, float64."""
    for i, layer in enumerate(layers):
        x = x @ np.asarray(layer["kernel"], np.float64) + np.asarray(layer["bias"], np.float64)
        if i < len(layers) - 1:
            x = np.maximum(x, 0.0)
    return x


def actor(params: dict, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    out = mlp(_dense_layers(params["params"]["MLP_0"]), obs)
    mean, log_std = np.split(out, 2, axis=-1)
    return mean, np.clip(log_std, -5.0, 2.0)


def critics(params: dict, obs: np.ndarray, action: np.ndarray) -> np.ndarray:
    """Q [N, B] from the stacked critic parameters (leading axis N)."""
    layers = _dense_layers(params["params"]["VmapMLP_0"])
    num_q = np.asarray(layers[0]["kernel"]).shape[0]
    x = np.concatenate([obs, action], axis=-1)
    qs = []
    for i in range(num_q):
        own = [{"kernel": np.asarray(lyr["kernel"])[i], "bias": np.asarray(lyr["bias"])[i]}
               for lyr in layers]
        qs.append(mlp(own, x)[:, 0])
    return np.stack(qs)


def squashed_sample(mean, log_std, noise):
    """a = tanh(u), u = mean + std·noise; log π(a) by change of variables (naive form)."""
    std = np.exp(log_std)
    u = mean + std * noise
    a = np.tanh(u)
    log_normal = -0.5 * noise**2 - log_std - 0.5 * np.log(2 * np.pi)
    log_prob = np.sum(log_normal - np.log(1.0 - a**2), axis=-1)
    return a, log_prob


def sac_losses(actor_params, critic_params, target_params, log_alpha, batch, next_noise,
               policy_noise, target_entropy, critic_loss="mse"):
    """Critic target, the three losses and the TD error (docs/semantics.md, "Losses")."""
    f64 = {k: np.asarray(v, np.float64) for k, v in batch._asdict().items()}
    alpha = np.exp(float(log_alpha))
    next_mean, next_log_std = actor(actor_params, f64["next_obs"])
    next_action, next_log_prob = squashed_sample(next_mean, next_log_std, next_noise)
    next_q = critics(target_params, f64["next_obs"], next_action).min(axis=0)
    target = f64["reward"] + f64["discount"] * (next_q - alpha * next_log_prob)

    q = critics(critic_params, f64["obs"], f64["action"])
    err = q - target
    if critic_loss == "huber":
        ell = np.where(np.abs(err) <= 1.0, 0.5 * err**2, np.abs(err) - 0.5)
    else:
        ell = 0.5 * err**2
    qf_loss = np.mean(f64["weights"] * ell.sum(axis=0))
    td_error = np.abs(err).mean(axis=0)

    mean, log_std = actor(actor_params, f64["obs"])
    action, log_prob = squashed_sample(mean, log_std, policy_noise)
    policy_q = critics(critic_params, f64["obs"], action).min(axis=0)
    policy_loss = np.mean(alpha * log_prob - policy_q)
    alpha_loss = -np.mean(float(log_alpha) * (log_prob + target_entropy))
    return {"target": target, "qf_loss": qf_loss, "td_error": td_error,
            "policy_loss": policy_loss, "alpha_loss": alpha_loss, "log_prob": log_prob, "q": q}


# --- discrete actions (SAC-Discrete: exact expectations over the actions) -------------


def categorical_actor(params: dict, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(π [B, |A|], log π [B, |A|]): softmax of the actor's logits, log-softmax computed
    after subtracting the largest logit."""
    logits = mlp(_dense_layers(params["params"]["MLP_0"]), obs)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return np.exp(log_probs), log_probs


def discrete_critics(params: dict, obs: np.ndarray) -> np.ndarray:
    """Q(s, ·) [N, B, |A|] from the stacked critic parameters (leading axis N)."""
    layers = _dense_layers(params["params"]["VmapMLP_0"])
    num_q = np.asarray(layers[0]["kernel"]).shape[0]
    return np.stack([
        mlp([{"kernel": np.asarray(lyr["kernel"])[i], "bias": np.asarray(lyr["bias"])[i]}
             for lyr in layers], obs)
        for i in range(num_q)])


def element_loss(error: np.ndarray, critic_loss: str) -> np.ndarray:
    """ℓ(x): x²/2 ("mse") or Huber with δ = 1 ("huber")."""
    if critic_loss == "huber":
        return np.where(np.abs(error) <= 1.0, 0.5 * error**2, np.abs(error) - 0.5)
    return 0.5 * error**2


def discrete_sac_losses(actor_params, critic_params, target_params, log_alpha, batch,
                        target_entropy, critic_loss="mse"):
    """SAC-Discrete's critic target, three losses, TD error and Σ_a π log π [B] (the
    "log_prob" term, minus the entropy), every expectation an exact sum over actions."""
    f64 = {k: np.asarray(v, np.float64) for k, v in batch._asdict().items()}
    rows, action = np.arange(len(f64["reward"])), np.asarray(batch.action)
    alpha = np.exp(float(log_alpha))
    next_probs, next_log_probs = categorical_actor(actor_params, f64["next_obs"])
    next_q = discrete_critics(target_params, f64["next_obs"]).min(axis=0)
    soft_value = np.sum(next_probs * (next_q - alpha * next_log_probs), axis=-1)
    target = f64["reward"] + f64["discount"] * soft_value

    all_q = discrete_critics(critic_params, f64["obs"])  # [N, B, |A|]
    q = all_q[:, rows, action]
    err = q - target
    qf_loss = np.mean(f64["weights"] * element_loss(err, critic_loss).sum(axis=0))
    td_error = np.abs(err).mean(axis=0)

    probs, log_probs = categorical_actor(actor_params, f64["obs"])
    policy_loss = np.mean(np.sum(probs * (alpha * log_probs - all_q.min(axis=0)), axis=-1))
    log_prob = np.sum(probs * log_probs, axis=-1)
    alpha_loss = -np.mean(float(log_alpha) * (log_prob + target_entropy))
    return {"target": target, "qf_loss": qf_loss, "td_error": td_error, "error": err,
            "policy_loss": policy_loss, "alpha_loss": alpha_loss, "log_prob": log_prob,
            "entropy": -np.mean(log_prob), "q": q}
