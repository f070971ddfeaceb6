"""Float64 NumPy references of the distributional critic families (TQC, categorical),
written from docs/semantics.md independently of jaxsac's JAX code: loops where the JAX
code broadcasts, the textbook floor/ceil form of the C51 projection, and HL-Gauss from
scipy's normal CDF."""

from __future__ import annotations

import numpy as np
from scipy import stats

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


# --- categorical critics -------------------------------------------------------------


def support(v_min: float, v_max: float, num_atoms: int) -> np.ndarray:
    return v_min + (v_max - v_min) / (num_atoms - 1) * np.arange(num_atoms)


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def brute_force_projection(atoms, probs, v_min: float, v_max: float, num_atoms: int):
    """C51's projection [K] of one distribution (atoms [M], probs [M]), the textbook way:
    each clipped atom at b = (z − v_min)/Δ gives (u − b) of its probability to atom
    l = ⌊b⌋ and (b − l) to u = ⌈b⌉, all of it to l when b is a whole number."""
    spacing = (v_max - v_min) / (num_atoms - 1)
    out = np.zeros(num_atoms)
    for z, p in zip(atoms, probs, strict=True):
        b = (min(max(z, v_min), v_max) - v_min) / spacing
        low, up = min(int(np.floor(b)), num_atoms - 1), min(int(np.ceil(b)), num_atoms - 1)
        if low == up:
            out[low] += p
        else:
            out[low] += p * (up - b)
            out[up] += p * (b - low)
    return out


def hl_gauss(y: float, v_min: float, v_max: float, num_atoms: int, sigma: float):
    """HL-Gauss [K]: N(clip(y), (σΔ)²)'s mass on each bin [z_j − Δ/2, z_j + Δ/2] from
    scipy's normal CDF, normalised over the bins."""
    spacing = (v_max - v_min) / (num_atoms - 1)
    edges = v_min - spacing / 2 + spacing * np.arange(num_atoms + 1)
    cdf = stats.norm.cdf(edges, loc=min(max(y, v_min), v_max), scale=sigma * spacing)
    return np.diff(cdf) / (cdf[-1] - cdf[0])


def categorical_target(reward, discount, next_logits, entropy, policy, v_min, v_max,
                       kind="c51", sigma=0.75):
    """The target distributions [B, K], one sample and one next action at a time.

    next_logits: the target critics' logits [N, B, K] (at a' ~ π) or [N, B, |A|, K] (at
    every action); entropy: α log π [B] or [B, |A|]; policy: None or π(·|s') [B, |A|].
    Each (s', a') uses the critic whose expected return is the lowest."""
    num_atoms = next_logits.shape[-1]
    z = support(v_min, v_max, num_atoms)
    rows = []
    for b in range(len(reward)):
        if policy is None:
            choices = [(1.0, next_logits[:, b], entropy[b])]
        else:
            choices = [(policy[b, a], next_logits[:, b, a], entropy[b, a])
                       for a in range(next_logits.shape[2])]
        atoms, probs, soft_value = [], [], 0.0
        for weight, logits, ent in choices:
            per_critic = softmax(logits)  # [N, K]
            lowest = int(np.argmin(per_critic @ z))
            atoms.append(reward[b] + discount[b] * (z - ent))
            probs.append(weight * per_critic[lowest])
            soft_value += weight * (per_critic[lowest] @ z - ent)
        if kind == "hl_gauss":
            rows.append(hl_gauss(reward[b] + discount[b] * soft_value, v_min, v_max,
                                 num_atoms, sigma))
        else:
            rows.append(brute_force_projection(np.concatenate(atoms), np.concatenate(probs),
                                               v_min, v_max, num_atoms))
    return np.stack(rows)


def cross_entropy_fit(logits, target, weights, z):
    """(loss, td_error [B]) of logits [N, B, K] against target distributions [B, K]."""
    log_p = np.log(softmax(logits))
    cross_entropy = -(target * log_p).sum(axis=-1)  # [N, B]
    expected = softmax(logits) @ z  # [N, B]
    return (np.mean(weights * cross_entropy.sum(axis=0)),
            np.abs(expected - target @ z).mean(axis=0))


def categorical_losses(actor_params, critic_params, target_params, log_alpha, batch,
                       next_noise, policy_noise, target_entropy, v_min, v_max, kind):
    """Box actions: the categorical critic's target, the three losses and the TD error."""
    f64 = {k: np.asarray(v, np.float64) for k, v in batch._asdict().items()}
    alpha = np.exp(float(log_alpha))
    next_mean, next_log_std = numpy_sac.actor(actor_params, f64["next_obs"])
    next_action, next_log_prob = numpy_sac.squashed_sample(next_mean, next_log_std, next_noise)
    next_logits = critic_outputs(target_params,
                                 np.concatenate([f64["next_obs"], next_action], -1))
    z = support(v_min, v_max, next_logits.shape[-1])
    target = categorical_target(f64["reward"], f64["discount"], next_logits,
                                alpha * next_log_prob, None, v_min, v_max, kind)
    logits = critic_outputs(critic_params, np.concatenate([f64["obs"], f64["action"]], -1))
    qf_loss, td_error = cross_entropy_fit(logits, target, f64["weights"], z)

    mean, log_std = numpy_sac.actor(actor_params, f64["obs"])
    action, log_prob = numpy_sac.squashed_sample(mean, log_std, policy_noise)
    policy_logits = critic_outputs(critic_params, np.concatenate([f64["obs"], action], -1))
    policy_loss = np.mean(alpha * log_prob - (softmax(policy_logits) @ z).min(axis=0))
    alpha_loss = -np.mean(float(log_alpha) * (log_prob + target_entropy))
    return {"target": target, "qf_loss": qf_loss, "td_error": td_error,
            "policy_loss": policy_loss, "alpha_loss": alpha_loss, "q": softmax(logits) @ z}


def discrete_categorical_losses(actor_params, critic_params, target_params, log_alpha, batch,
                                target_entropy, v_min, v_max, num_atoms, kind):
    """Discrete actions: the same with exact sums over the |A| actions (the target a
    mixture over a' ~ π)."""
    f64 = {k: np.asarray(v, np.float64) for k, v in batch._asdict().items()}
    rows, taken = np.arange(len(f64["reward"])), np.asarray(batch.action)
    alpha = np.exp(float(log_alpha))

    def logits_at(params, obs):  # [N, B, |A|, K]
        out = critic_outputs(params, obs)
        return out.reshape(out.shape[:2] + (-1, num_atoms))

    z = support(v_min, v_max, num_atoms)
    next_policy, next_log_policy = numpy_sac.categorical_actor(actor_params, f64["next_obs"])
    target = categorical_target(f64["reward"], f64["discount"],
                                logits_at(target_params, f64["next_obs"]),
                                alpha * next_log_policy, next_policy, v_min, v_max, kind)
    all_logits = logits_at(critic_params, f64["obs"])
    qf_loss, td_error = cross_entropy_fit(all_logits[:, rows, taken], target, f64["weights"], z)

    policy, log_policy = numpy_sac.categorical_actor(actor_params, f64["obs"])
    value = (softmax(all_logits) @ z).min(axis=0)  # [B, |A|]
    policy_loss = np.mean(np.sum(policy * (alpha * log_policy - value), axis=-1))
    log_prob = np.sum(policy * log_policy, axis=-1)
    alpha_loss = -np.mean(float(log_alpha) * (log_prob + target_entropy))
    return {"target": target, "qf_loss": qf_loss, "td_error": td_error,
            "policy_loss": policy_loss, "alpha_loss": alpha_loss}
