"""Float64 NumPy references of the distributional critic families (TQC, categorical),
written from docs/semantics.md independently of jaxsac's JAX code: loops where the JAX
code broadcasts, the textbook floor/ceil form of the C51 projection, and HL-Gauss from
scipy's normal CDF."""

from __future__ import annotations

import numpy as np

from tests.support import numpy_sac


def critic_outputs(params: dict, x: np.ndarray) -> np.ndarray:
    """Every output of each stacked critic [N, B, out_dim], float64, from the critics'
    input x [B, in] (concat(obs, action) for Box actions, obs for Discrete ones)."""
    layers = numpy_sac._dense_layers(params["params"]["VmapMLP_0"])
    num_q = np.asarray(layers[0]["kernel"]).shape[0]
    return np.stack([
        numpy_sac.mlp([{"kernel": np.asarray(lyr["kernel"])[i],
                        "bias": np.asarray(lyr["bias"])[i]} for lyr in layers], x)
        for i in range(num_q)])


def huber(x: np.ndarray) -> np.ndarray:
    return np.where(np.abs(x) <= 1.0, 0.5 * x**2, np.abs(x) - 0.5)


def quantile_huber(quantiles: np.ndarray, target: np.ndarray) -> np.ndarray:
    """[N, B]: for each critic i and sample b, the mean over current quantiles m and
    target atoms k of |τ_m − 1{y_k < θ_m}| huber(y_k − θ_m), τ_m = (m + ½)/M, by loops."""
    num_q, batch, num_quantiles = quantiles.shape
    out = np.zeros((num_q, batch))
    for i in range(num_q):
        for b in range(batch):
            total = 0.0
            for m in range(num_quantiles):
                tau = (m + 0.5) / num_quantiles
                for y in target[b]:
                    delta = y - quantiles[i, b, m]
                    total += abs(tau - (1.0 if delta < 0 else 0.0)) * float(huber(delta))
            out[i, b] = total / (num_quantiles * target.shape[1])
    return out


def tqc_losses(actor_params, critic_params, target_params, log_alpha, batch, next_noise,
               policy_noise, target_entropy, drop_per_net):
    """TQC's target atoms, the three losses and the TD error (docs/semantics.md, "TQC")."""
    f64 = {k: np.asarray(v, np.float64) for k, v in batch._asdict().items()}
    alpha = np.exp(float(log_alpha))
    next_mean, next_log_std = numpy_sac.actor(actor_params, f64["next_obs"])
    next_action, next_log_prob = numpy_sac.squashed_sample(next_mean, next_log_std, next_noise)
    next_quantiles = critic_outputs(target_params,
                                    np.concatenate([f64["next_obs"], next_action], -1))
    num_q, batch_size, num_quantiles = next_quantiles.shape
    kept = num_q * (num_quantiles - drop_per_net)
    target = np.stack([
        f64["reward"][b] + f64["discount"][b]
        * (sorted(next_quantiles[:, b].ravel())[:kept] - alpha * next_log_prob[b])
        for b in range(batch_size)])

    quantiles = critic_outputs(critic_params, np.concatenate([f64["obs"], f64["action"]], -1))
    qf_loss = np.mean(f64["weights"] * quantile_huber(quantiles, target).sum(axis=0))
    td_error = np.abs(quantiles.mean(-1) - target.mean(-1)).mean(axis=0)

    mean, log_std = numpy_sac.actor(actor_params, f64["obs"])
    action, log_prob = numpy_sac.squashed_sample(mean, log_std, policy_noise)
    policy_q = critic_outputs(critic_params, np.concatenate([f64["obs"], action], -1))
    policy_loss = np.mean(alpha * log_prob - policy_q.mean(axis=(0, 2)))
    alpha_loss = -np.mean(float(log_alpha) * (log_prob + target_entropy))
    return {"target": target, "qf_loss": qf_loss, "td_error": td_error,
            "policy_loss": policy_loss, "alpha_loss": alpha_loss, "log_prob": log_prob,
            "q": quantiles.mean(-1)}
