"""Float64 NumPy references of the network bodies (BRO, SimbaV2), batch renormalization
and CrossQ's losses, written from docs/semantics.md ("Network bodies", "CrossQ") and
the papers, independently of jaxsac's JAX code: explicit loops over critics, the
normalizations written out, the flax parameter dicts read by name."""

from __future__ import annotations

import numpy as np

from tests.support import numpy_sac

LAYER_NORM_EPS = 1e-6  # flax.linen.LayerNorm's
RENORM_EPS = 1e-3
R_MAX, D_MAX = 3.0, 5.0


def f64(x) -> np.ndarray:
    return np.asarray(x, np.float64)


def ordered(tree: dict, prefix: str) -> list[dict]:
    """tree[prefix_0], tree[prefix_1], ... in creation order."""
    names = [k for k in tree if k.rsplit("_", 1)[0] == prefix]
    return [tree[k] for k in sorted(names, key=lambda k: int(k.rsplit("_", 1)[1]))]


def layer_norm(x: np.ndarray, p: dict) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + LAYER_NORM_EPS) * f64(p["scale"]) + f64(p["bias"])


def dense(x: np.ndarray, p: dict) -> np.ndarray:
    return x @ f64(p["kernel"]) + f64(p["bias"])


def bro(params: dict, x: np.ndarray, blocks: int) -> np.ndarray:
    """BRO's body: ReLU(LN(Dense(x))), then `blocks` times x + LN(Dense(ReLU(LN(Dense(x))))),
    then a Dense readout."""
    dense_layers, norms = ordered(params, "Dense"), ordered(params, "LayerNorm")
    assert len(dense_layers) == 2 * blocks + 2 and len(norms) == 2 * blocks + 1
    x = np.maximum(layer_norm(dense(x, dense_layers[0]), norms[0]), 0.0)
    for b in range(blocks):
        inner = np.maximum(layer_norm(dense(x, dense_layers[1 + 2 * b]), norms[1 + 2 * b]), 0.0)
        x = x + layer_norm(dense(inner, dense_layers[2 + 2 * b]), norms[2 + 2 * b])
    return dense(x, dense_layers[-1])


def unit(x: np.ndarray) -> np.ndarray:
    """Each row (last axis) divided by its Euclidean norm, by a loop over rows."""
    flat = x.reshape(-1, x.shape[-1])
    out = np.stack([row / max(np.sqrt(np.sum(row**2)), 1e-8) for row in flat])
    return out.reshape(x.shape)


def unit_columns(kernel: np.ndarray) -> np.ndarray:
    """A kernel [..., in, out] whose every column (one output unit's weights) has norm 1."""
    return np.swapaxes(unit(np.swapaxes(f64(kernel), -1, -2)), -1, -2)


def simbav2(params: dict, x: np.ndarray, width: int, blocks: int,
            unit_readout: bool = False) -> np.ndarray:
    """SimbaV2's body (Lee et al. 2025): embedding of [x; 3] on the sphere, `blocks` LERP
    blocks with a 4·width inverted bottleneck, scaled readout. A scaler's value is its
    stored parameter times initial/scale: 1 for every scaler but the LERP's α, whose
    initial value is 1/(blocks + 1) and whose stored value starts at 1/√width.
    `unit_readout`: the last layer is the last unit-norm kernel plus `readout_bias`
    (SimbaV2's categorical value head) instead of a Dense."""
    kernels = [f64(p["unit_kernel"]) for p in ordered(params, "UnitDense")]
    last = kernels.pop() if unit_readout else None
    scalers = [f64(p["scaler"]) for p in ordered(params, "Scaler")]
    alpha_ratio = (1.0 / (blocks + 1)) / (1.0 / np.sqrt(width))
    x = unit(np.concatenate([x, np.full(x.shape[:-1] + (1,), 3.0)], axis=-1))
    h = unit(scalers[0] * (x @ kernels[0]))
    for b in range(blocks):
        inner = np.maximum(scalers[1 + 2 * b] * (h @ kernels[1 + 2 * b]), 0.0) + 1e-8
        update = unit(inner @ kernels[2 + 2 * b])
        h = unit(h + alpha_ratio * scalers[2 + 2 * b] * (update - h))
    readout = scalers[-1] * (h @ kernels[-1])
    if unit_readout:
        return readout @ last + f64(params["readout_bias"])
    return dense(readout, params["Dense_0"])


def batch_renorm_train(x, stats, p, momentum, warmup):
    """(y [B, F], new mean, new var) of one train-mode call: the batch's statistics,
    corrected by r = clip(σ_B/σ, 1/3, 3), d = clip((μ_B − μ)/σ, −5, 5) once `steps`
    calls have passed `warmup`, then the moving averages of mean and biased variance."""
    mean, var, steps = f64(stats["mean"]), f64(stats["var"]), int(stats["steps"])
    batch_mean = x.mean(0)
    batch_var = ((x - batch_mean) ** 2).mean(0)
    batch_std = np.sqrt(batch_var + RENORM_EPS)
    running_std = np.sqrt(var + RENORM_EPS)
    if steps >= warmup:
        r = np.clip(batch_std / running_std, 1.0 / R_MAX, R_MAX)
        d = np.clip((batch_mean - mean) / running_std, -D_MAX, D_MAX)
    else:
        r, d = np.ones_like(mean), np.zeros_like(mean)
    y = ((x - batch_mean) / batch_std * r + d) * f64(p["scale"]) + f64(p["bias"])
    return (y, momentum * mean + (1 - momentum) * batch_mean,
            momentum * var + (1 - momentum) * batch_var)


def batch_renorm_eval(x, stats, p):
    normalized = (x - f64(stats["mean"])) / np.sqrt(f64(stats["var"]) + RENORM_EPS)
    return normalized * f64(p["scale"]) + f64(p["bias"])


def _slice(tree: dict, i: int) -> dict:
    return {k: (_slice(v, i) if isinstance(v, dict) else np.asarray(v)[i])
            for k, v in tree.items()}


def renorm_mlp(params: dict, stats: dict, x: np.ndarray, train: bool, momentum: float,
               warmup: int):
    """(y, the new statistics of each BRN or None in eval mode) of one network
    BRN -> [Dense -> ReLU -> BRN]* -> Dense."""
    norms, norm_stats = ordered(params, "BatchRenorm"), ordered(stats, "BatchRenorm")
    dense_layers = ordered(params, "Dense")
    updated = []
    h = x
    for k, norm in enumerate(norms):
        if k:
            h = np.maximum(dense(h, dense_layers[k - 1]), 0.0)
        if train:
            h, mean, var = batch_renorm_train(h, norm_stats[k], norm, momentum, warmup)
            updated.append({"mean": mean, "var": var, "steps": norm_stats[k]["steps"] + 1})
        else:
            h = batch_renorm_eval(h, norm_stats[k], norm)
    return dense(h, dense_layers[-1]), (updated if train else None)


def crossq_critics(variables: dict, x: np.ndarray, train: bool, momentum: float = 0.99,
                   warmup: int = 100_000):
    """(q [N, B, out], the new batch_stats of each critic or None in eval mode): each
    critic BRN -> [Dense -> ReLU -> BRN]* -> Dense, by a loop over critics."""
    params = variables["params"]["VmapRenormMLP_0"]
    stats = variables["batch_stats"]["VmapRenormMLP_0"]
    num_q = np.asarray(params["Dense_0"]["kernel"]).shape[0]
    outs, new_stats = [], []
    for i in range(num_q):
        out, updated = renorm_mlp(_slice(params, i), _slice(stats, i), x, train, momentum,
                                  warmup)
        outs.append(out)
        new_stats.append(updated)
    return np.stack(outs), (new_stats if train else None)


def renorm_actor(variables: dict, obs: np.ndarray, train: bool, momentum: float = 0.99,
                 warmup: int = 100_000):
    """(mean, log_std clipped to [-5, 2], the new statistics or None in eval mode) of
    CrossQ's batch-renormalized actor."""
    out, updated = renorm_mlp(variables["params"]["RenormMLP_0"],
                              variables["batch_stats"]["RenormMLP_0"], obs, train, momentum,
                              warmup)
    mean, log_std = np.split(out, 2, axis=-1)
    return mean, np.clip(log_std, -5.0, 2.0), updated


def _categorical_actor(actor_variables, obs, train, momentum, warmup):
    """(π, log π, new statistics or None) of the plain MLP categorical actor or the
    batch-renormalized one (log-softmax after subtracting the largest logit)."""
    if "batch_stats" not in actor_variables:
        return (*numpy_sac.categorical_actor(actor_variables, obs), None)
    logits, updated = renorm_mlp(actor_variables["params"]["RenormMLP_0"],
                                 actor_variables["batch_stats"]["RenormMLP_0"], obs, train,
                                 momentum, warmup)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return np.exp(log_probs), log_probs, updated


def _actor(actor_variables, obs, train, momentum, warmup):
    """(mean, log_std, new statistics or None): the plain MLP actor (no statistics) or the
    batch-renormalized one."""
    if "batch_stats" not in actor_variables:
        return (*numpy_sac.actor(actor_variables, obs), None)
    return renorm_actor(actor_variables, obs, train, momentum, warmup)


def crossq_losses(actor_params, variables, log_alpha, batch, next_noise, policy_noise,
                  target_entropy, momentum=0.99, warmup=100_000):
    """CrossQ's target, losses, TD error and new statistics (docs/semantics.md,
    "CrossQ"): (s, a) and (s', a') in one train-mode pass over 2B rows of the online
    critics; the actor's loss through the critics in eval mode with the statistics from
    before the step. A batch-renormalized actor (actor_params with "batch_stats") acts in
    eval mode at s' and in train mode in its loss, whose new statistics it returns."""
    b64 = {k: f64(v) for k, v in batch._asdict().items()}
    alpha = np.exp(float(log_alpha))
    size = b64["obs"].shape[0]
    next_mean, next_log_std, _ = _actor(actor_params, b64["next_obs"], False, momentum, warmup)
    next_action, next_log_prob = numpy_sac.squashed_sample(next_mean, next_log_std, next_noise)
    rows = np.concatenate([np.concatenate([b64["obs"], b64["action"]], -1),
                           np.concatenate([b64["next_obs"], next_action], -1)])
    q, new_stats = crossq_critics(variables, rows, True, momentum, warmup)
    taken, following = q[:, :size, 0], q[:, size:, 0]
    target = b64["reward"] + b64["discount"] * (following.min(0) - alpha * next_log_prob)
    error = taken - target
    qf_loss = np.mean(b64["weights"] * np.sum(0.5 * error**2, axis=0))

    mean, log_std, actor_stats = _actor(actor_params, b64["obs"], True, momentum, warmup)
    action, log_prob = numpy_sac.squashed_sample(mean, log_std, policy_noise)
    policy_q, _ = crossq_critics(variables, np.concatenate([b64["obs"], action], -1), False)
    policy_loss = np.mean(alpha * log_prob - policy_q[..., 0].min(0))
    alpha_loss = -np.mean(float(log_alpha) * (log_prob + target_entropy))
    return {"target": target, "qf_loss": qf_loss, "td_error": np.abs(error).mean(0),
            "policy_loss": policy_loss, "alpha_loss": alpha_loss, "q": taken,
            "batch_stats": new_stats, "actor_batch_stats": actor_stats}


def discrete_crossq_losses(actor_params, variables, log_alpha, batch, target_entropy,
                           momentum=0.99, warmup=100_000):
    """CrossQ for Discrete actions: s and s' in one train-mode pass (every action's Q),
    the target the exact expectation over a' ~ π(·|s'), the actor's loss the exact sum
    with the critics in eval mode; a batch-renormalized actor as in `crossq_losses`."""
    b64 = {k: f64(v) for k, v in batch._asdict().items()}
    rows, action = np.arange(len(b64["reward"])), np.asarray(batch.action)
    alpha = np.exp(float(log_alpha))
    size = len(rows)
    q, new_stats = crossq_critics(variables, np.concatenate([b64["obs"], b64["next_obs"]]),
                                  True, momentum, warmup)
    next_probs, next_log_probs, _ = _categorical_actor(actor_params, b64["next_obs"], False,
                                                       momentum, warmup)
    soft_value = np.sum(next_probs * (q[:, size:].min(0) - alpha * next_log_probs), axis=-1)
    target = b64["reward"] + b64["discount"] * soft_value
    error = q[:, rows, action] - target
    qf_loss = np.mean(b64["weights"] * np.sum(0.5 * error**2, axis=0))

    probs, log_probs, actor_stats = _categorical_actor(actor_params, b64["obs"], True,
                                                       momentum, warmup)
    policy_q, _ = crossq_critics(variables, b64["obs"], False)
    policy_loss = np.mean(np.sum(probs * (alpha * log_probs - policy_q.min(0)), axis=-1))
    log_prob = np.sum(probs * log_probs, axis=-1)
    alpha_loss = -np.mean(float(log_alpha) * (log_prob + target_entropy))
    return {"qf_loss": qf_loss, "td_error": np.abs(error).mean(0), "policy_loss": policy_loss,
            "alpha_loss": alpha_loss, "batch_stats": new_stats, "actor_batch_stats": actor_stats}
