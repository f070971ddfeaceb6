"""The SAC learner: one gradient step on the twin-Q, policy and temperature losses.

`make_learner(config, obs, actions)` closes over the static configuration (the
policy head of the action space, network sizes, loss kind, clipping, target update
period) and returns pure `init`, `update` and `act` functions. Values that may vary
under `vmap` in a sweep (learning rates, tau, initial alpha) are leaves of the state
(`LearnerState.hparams`), not Python constants.

Shapes: B batch size, N critics, |A| action dimension (Box) or number of actions
(Discrete).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import flax.struct
import gymnasium
import jax
import jax.numpy as jnp
import optax

from jaxsac import checks, connectors
from jaxsac.agents import AgentLayout
from jaxsac.config import (
    LEARNER,
    LEARNER_ARRAY,
    NETWORKS,
    SACConfig,
    fields_with,
    settings_type,
)
from jaxsac.connectors import ModuleActions
from jaxsac.networks import PolicyHead, policy_head
from jaxsac.networks.augmentation import augmentation
from jaxsac.networks.bodies import project_unit_kernels
from jaxsac.networks.critics import has_target_network, split_state, with_state
from jaxsac.networks.encoders import ENCODER_SHARING
from jaxsac.networks.heads import train_mode
from jaxsac.observations import ObsSpec, obs_spec
from jaxsac.types import Batch

Params = Any

LearnerSettings = settings_type("LearnerSettings", (LEARNER, NETWORKS))
"""What the learner reads of a config (`LearnerSettings.of(config)`): the "learner" and
"networks" parts."""

METRICS = ("qf_loss", "policy_loss", "alpha_loss", "alpha", "log_alpha", "entropy",
           "q_mean", "q_min", "q_max", "td_error_mean", "td_error_nonfinite")
"""The names of the metrics `Learner.update` returns for each gradient step."""


class Hyperparams(NamedTuple("HyperparamFields",
                             [(name, jax.Array) for name in fields_with(LEARNER_ARRAY)])):
    """Scalar hyperparameters held as arrays, so a sweep can `vmap` over them: the
    SACConfig fields with the LEARNER_ARRAY role (actor_lr, critic_lr, alpha_lr, tau,
    initial_alpha), in their declaration order."""

    __slots__ = ()

    @classmethod
    def from_config(cls, config: SACConfig | LearnerSettings, **overrides: Any) -> Hyperparams:
        """The config's (or settings') values as float32 arrays; `overrides` (possibly
        traced) win."""
        values = {name: getattr(config, name) for name in cls._fields}
        values.update(overrides)
        return cls(**{k: jnp.asarray(v, jnp.float32) for k, v in values.items()})


@flax.struct.dataclass
class LearnerState:
    """Everything the learner updates. A pytree: jit, vmap and checkpoint it whole."""

    actor_params: Params  # the actor's variables: {"params": ...} (+ "batch_stats": a
    # batch-renormalized actor's statistics, which only its loss's train-mode pass moves)
    critic_params: Params  # leaves with a leading axis N (one slice per critic)
    target_critic_params: Params  # {} for a family without target critics (CrossQ)
    critic_state: Any  # the critic family's state (CrossQ's batch statistics), else {}
    log_alpha: jax.Array  # []
    actor_opt_state: optax.OptState
    critic_opt_state: optax.OptState
    alpha_opt_state: optax.OptState
    step: jax.Array  # [] int32, gradient steps taken
    hparams: Hyperparams


class LossParams(NamedTuple):
    """The parameters the SAC losses differentiate: actor, critics and log α."""

    actor_params: Params
    critic_params: Params
    log_alpha: jax.Array


class Learner(NamedTuple):
    """Pure functions of one SAC learner (see `make_learner`), B the batch size.

    init(key, hparams=None) -> LearnerState.
    update(state, batch, key) -> (state, metrics {name: []}, td_error [B]).
    act(actor_params, obs [B, ...] (an observation tree), key, deterministic=False,
        noise=None)
        -> module actions [B, *action shape] (noise: ε [B, |A|] for a Box policy,
        jaxsac.noise).
    loss(LossParams, target_critic_params, batch, key, critic_state={}, actor_state={})
        -> (sum of the losses, aux dict); LossParams.actor_params are the actor's
        "params" alone, a batch-renormalized actor's statistics are actor_state.
    """

    init: Callable[..., LearnerState]
    update: Callable[[LearnerState, Batch, jax.Array],
                     tuple[LearnerState, dict[str, jax.Array], jax.Array]]
    act: Callable[..., jax.Array]
    loss: Callable[..., tuple[jax.Array, dict[str, jax.Array]]]


def polyak(params: Params, target_params: Params, tau: jax.Array) -> Params:
    """θ̄ ← τθ + (1 − τ)θ̄, leafwise; no target critics ({}) stay none."""
    if not jax.tree.leaves(target_params):
        return target_params
    return jax.tree.map(lambda p, t: tau * p + (1.0 - tau) * t, params, target_params)


def _optimizer(grad_clip: float | None, b1: float = 0.9) -> optax.GradientTransformation:
    """Adam's moment scaling with β1 = `b1` (clipped first when asked); the learning rate
    is applied by `apply_gradients` from the state, so it can be traced."""
    if grad_clip is None:
        return optax.scale_by_adam(b1=b1)
    return optax.chain(optax.clip_by_global_norm(grad_clip), optax.scale_by_adam(b1=b1))


def target_entropy(config: SACConfig | LearnerSettings, head: PolicyHead) -> float:
    """H̄: the configured float, or the head's "auto" value (−target_entropy_ratio · |A|
    for a Box, target_entropy_scale · log|A| for Discrete actions; `check_action_settings`
    lets only the action space's own one be set)."""
    if config.target_entropy == "auto":
        scale = (config.target_entropy_scale if config.target_entropy_ratio is None
                 else config.target_entropy_ratio)
        return head.auto_target_entropy(scale)
    return float(config.target_entropy)


def check_action_settings(config: SACConfig | LearnerSettings, actions: ModuleActions
                          ) -> None:
    """Errors for settings the action space cannot honour, naming the field and the
    space: log_std_bounds and target_entropy_ratio are for Box actions only,
    target_entropy_scale for Discrete ones, and a Discrete target entropy must be below
    the largest, log|A|."""
    space = actions.space
    if actions.kind == "discrete":
        for name in ("log_std_bounds", "target_entropy_ratio"):
            if getattr(config, name) is not None:
                checks.fail("SACConfig", name, getattr(config, name),
                            f"None for the Discrete action space {space} (a Box-only "
                            "setting: the categorical policy has no standard deviation "
                            "or action dimension)")
        largest = math.log(actions.dim)
        if config.target_entropy != "auto" and not config.target_entropy < largest:
            checks.fail("SACConfig", "target_entropy", config.target_entropy,
                        f'"auto" or below log|A| = {largest:.6g} for the Discrete action '
                        f"space {space} (no policy has a larger entropy)")
    elif config.target_entropy_scale is not None:
        checks.fail("SACConfig", "target_entropy_scale", config.target_entropy_scale,
                    f"None for the Box action space {space} (a Discrete-only setting; set "
                    "target_entropy or target_entropy_ratio for Box actions)")


def make_learner(config: SACConfig | LearnerSettings, obs: ObsSpec | int,
                 actions: ModuleActions | gymnasium.Space | int) -> Learner:
    """Build the pure learner functions for observations `obs` and the env's actions.
    The policy head (networks and the expectations of the losses) is chosen from the
    action space, here, once, with the encoder and critic family the config names, and
    so are the encoder sharing (`networks.ENCODER_SHARING`: with "critic" the actor's
    copy of the critics' encoder is written at init and after every step) and DrQ's
    image augmentation (`networks.augmentation`: none without an image).

    Args:
        config: a SACConfig or its `LearnerSettings` (networks, losses, optimizers,
            temperature; the learning rates, tau and initial alpha are the defaults of
            `init`'s hparams). The learner keeps only the LearnerSettings.
        obs: the observations' ObsSpec (jaxsac.observations: a flat array, or a dict's
            entries), or an int d for flat observations [d]. A Batch's obs and next_obs
            are trees of it, which the actor and critics read through their encoders
            (each only its own entries with `actor_obs_keys` / `critic_obs_keys`).
        actions: an action adapter (`jaxsac.connectors.ModuleActions`), a gymnasium Box
            or Discrete space, or an int d for the Box [-1, 1]^d.

    Returns:
        Learner: the pure `init`, `update`, `act` and `loss`.
    """
    spec = obs_spec(obs, "make_learner")
    config = LearnerSettings.of(config)
    actions = connectors.module_actions(actions, "make_learner")
    check_action_settings(config, actions)
    head = policy_head(actions, config, spec)
    sharing = ENCODER_SHARING[config.encoder_sharing]
    augment = augmentation(config.image_pad, config.augmentation_samples, spec)
    optimizer = _optimizer(config.grad_clip, config.adam_b1)
    entropy_target = target_entropy(config, head)

    def init(key: jax.Array, hparams: Hyperparams | None = None) -> LearnerState:
        hparams = Hyperparams.from_config(config) if hparams is None else hparams
        actor_variables, critic_variables = head.init(key, spec)
        critic_params, critic_state = split_state(critic_variables)
        actor_variables = sharing.sync(actor_variables, critic_params)
        log_alpha = jnp.log(hparams.initial_alpha).astype(jnp.float32)
        return LearnerState(
            actor_params=actor_variables,
            critic_params=critic_params,
            target_critic_params=critic_params if has_target_network(head.critic) else {},
            critic_state=critic_state,
            log_alpha=log_alpha,
            actor_opt_state=optimizer.init(split_state(actor_variables)[0]),
            critic_opt_state=optimizer.init(critic_params),
            alpha_opt_state=optimizer.init(log_alpha),
            step=jnp.zeros((), jnp.int32),
            hparams=hparams,
        )

    def act(actor_params: Params, obs: jax.Array, key: jax.Array,
            deterministic: bool = False, noise: jax.Array | None = None) -> jax.Array:
        if deterministic:
            return head.mode(actor_params, obs)
        return head.sample(actor_params, obs, key, noise)

    def moved_actor_state(actor_params: Params, actor_state: Any, obs: Any) -> Any:
        """The actor's state after the train-mode pass of its loss over obs (the pass
        `head.policy_objective` makes): a batch-renormalized actor's moved statistics,
        without gradient; {} for an actor without state (no pass)."""
        if not actor_state:
            return {}
        variables = with_state(jax.lax.stop_gradient(actor_params), actor_state)
        return jax.lax.stop_gradient(train_mode(head.actor, variables, obs)[1])

    def loss(params: LossParams, target_critic_params: Params, batch: Batch, key: jax.Array,
             critic_state: Any = None, actor_state: Any = None):
        """The three SAC losses at `params`, summed, with gradients routed by stop_gradient.

        The critic family builds the target from the target critics at s' (no gradient;
        CrossQ's from the online critics in one pass with (s, a)) and the critic loss at
        the stored action; the ensemble's target is
        y = R + d·E_{a'~π}[min_i Q̄_i(s', a') − α log π(a'|s')]. Actor loss
        E_{a~π}[α log π(a|s) − value(s, a)] with the critics frozen (value: the family's,
        min_i Q_i for the ensemble); temperature loss −log α · (log π + H̄) with log π
        frozen. The head takes the expectations: one reparameterised sample for Box
        actions, exact sums for Discrete ones. The critic loss reaches only the critics,
        the actor loss only the actor, the temperature loss only log α, so one
        `jax.grad` of the sum gives each optimizer exactly the gradient of its own loss.
        critic_state: the family's state ({} or None for a family without one);
        actor_state: the actor's ({"batch_stats": ...} of a batch-renormalized actor, else
        {} or None), read in eval mode at s' and in train mode by the actor's loss.
        With image augmentation (`networks.augmentation`) the losses are those of the
        batch's n·B shifted views, the target of each sample averaged over its views.
        Returns (sum, aux): aux holds each loss, td_error [B], q (the critics' output at
        the stored actions, [N, n·B, *T]), log_prob [n·B] (the log π term whose mean is
        minus the policy's entropy), critic_state (the family's state after the step) and
        actor_state (the actor's after its loss's train-mode pass).
        """
        critic_state = {} if critic_state is None else critic_state
        actor_state = {} if actor_state is None else actor_state
        batch = augment.views(batch, key)
        target_key, policy_key = jax.random.split(key)
        alpha = jnp.exp(jax.lax.stop_gradient(params.log_alpha))
        frozen_actor = with_state(jax.lax.stop_gradient(params.actor_params), actor_state)
        q, next_out, entropy, probs, new_critic_state = head.critic_outputs(
            frozen_actor, with_state(params.critic_params, critic_state), target_critic_params,
            batch.obs, batch.action, batch.next_obs, alpha, target_key)
        target = jax.lax.stop_gradient(augment.target(
            head.critic.td_target(batch.reward, batch.discount, next_out, entropy, probs)))

        qf_loss, td_error = head.critic.loss(q, target, batch.weights)
        td_error = jax.lax.stop_gradient(augment.per_sample(td_error))

        frozen_critic = jax.lax.stop_gradient(with_state(params.critic_params, critic_state))
        objective, log_prob = head.policy_objective(
            with_state(params.actor_params, actor_state), frozen_critic, batch.obs, alpha,
            policy_key)
        policy_loss = jnp.mean(objective)

        frozen_log_prob = jax.lax.stop_gradient(log_prob)
        alpha_loss = -jnp.mean(params.log_alpha * (frozen_log_prob + entropy_target))

        aux = {"qf_loss": qf_loss, "policy_loss": policy_loss, "alpha_loss": alpha_loss,
               "td_error": td_error, "q": jax.lax.stop_gradient(q),
               "log_prob": frozen_log_prob,
               "critic_state": jax.lax.stop_gradient(new_critic_state),
               "actor_state": moved_actor_state(params.actor_params, actor_state, batch.obs)}
        return qf_loss + policy_loss + alpha_loss, aux

    def apply_gradients(params, grads, opt_state, learning_rate):
        updates, opt_state = optimizer.update(grads, opt_state, params)
        updates = jax.tree.map(lambda u: -learning_rate * u, updates)
        return project_unit_kernels(optax.apply_updates(params, updates)), opt_state

    def critic_gradients(params: LossParams, target_critic_params: Params, batch: Batch,
                         key: jax.Array, critic_state: Any, actor_state: Any
                         ) -> tuple[LossParams, dict[str, jax.Array]]:
        """The gradient of the losses for the critics alone (zeros for the actor and
        log α, whose backward passes are not taken), with every loss's value."""
        grads, aux = jax.grad(
            lambda critic: loss(params._replace(critic_params=critic), target_critic_params,
                                batch, key, critic_state, actor_state),
            has_aux=True)(params.critic_params)
        zeros = jax.tree.map(jnp.zeros_like, params)
        return zeros._replace(critic_params=grads), aux

    def update(state: LearnerState, batch: Batch, key: jax.Array):
        """One gradient step on all three losses, from the parameters before the step;
        with policy_update_every k > 1, the actor and log α take theirs only at gradient
        steps s = state.step + 1 that are multiples of k (the others skip their backward
        pass and leave them and their optimizer states as they were).

        batch: `Batch` with leading axis B. Returns (new state, metrics dict of scalars,
        td_error [B], the critic family's, e.g. mean_i |Q_i(s, a) − y|).
        """
        hp = state.hparams
        old_actor_params, actor_state = split_state(state.actor_params)
        params = LossParams(old_actor_params, state.critic_params, state.log_alpha)
        if config.policy_update_every == 1:
            grads, aux = jax.grad(loss, has_aux=True)(
                params, state.target_critic_params, batch, key, state.critic_state,
                actor_state)
        else:
            policy_due = (state.step + 1) % config.policy_update_every == 0
            grads, aux = jax.lax.cond(
                policy_due, jax.grad(loss, has_aux=True), critic_gradients,
                params, state.target_critic_params, batch, key, state.critic_state,
                actor_state)

        actor_params, actor_opt_state = apply_gradients(
            old_actor_params, grads.actor_params, state.actor_opt_state, hp.actor_lr)
        actor_params = with_state(actor_params, aux["actor_state"])
        critic_params, critic_opt_state = apply_gradients(
            state.critic_params, grads.critic_params, state.critic_opt_state, hp.critic_lr)
        if config.learn_alpha:
            log_alpha, alpha_opt_state = apply_gradients(
                state.log_alpha, grads.log_alpha, state.alpha_opt_state, hp.alpha_lr)
        else:
            log_alpha, alpha_opt_state = state.log_alpha, state.alpha_opt_state

        if config.policy_update_every > 1:
            actor_params, actor_opt_state, log_alpha, alpha_opt_state = jax.tree.map(
                lambda new, old: jnp.where(policy_due, new, old),
                (actor_params, actor_opt_state, log_alpha, alpha_opt_state),
                (state.actor_params, state.actor_opt_state, state.log_alpha,
                 state.alpha_opt_state))

        actor_params = sharing.sync(actor_params, critic_params)
        step = state.step + 1
        target_critic_params = polyak(critic_params, state.target_critic_params, hp.tau)
        if config.target_network_update_freq > 1:
            due = step % config.target_network_update_freq == 0
            target_critic_params = jax.tree.map(
                lambda new, old: jnp.where(due, new, old),
                target_critic_params, state.target_critic_params)

        new_state = LearnerState(
            actor_params=actor_params,
            critic_params=critic_params,
            target_critic_params=target_critic_params,
            critic_state=aux["critic_state"],
            log_alpha=log_alpha,
            actor_opt_state=actor_opt_state,
            critic_opt_state=critic_opt_state,
            alpha_opt_state=alpha_opt_state,
            step=step,
            hparams=hp,
        )
        q, td_error = head.critic.q_values(aux["q"]), aux["td_error"]  # q: [N, B]
        metrics = {
            "qf_loss": aux["qf_loss"],
            "policy_loss": aux["policy_loss"],
            "alpha_loss": aux["alpha_loss"],
            "alpha": jnp.exp(state.log_alpha),
            "log_alpha": state.log_alpha,
            "entropy": -jnp.mean(aux["log_prob"]),
            "q_mean": jnp.mean(q),
            "q_min": jnp.min(q),
            "q_max": jnp.max(q),
            "td_error_mean": jnp.mean(td_error),
            # samples whose priority the replay buffer keeps (it ignores non-finite errors)
            "td_error_nonfinite": jnp.sum(~jnp.isfinite(td_error)).astype(jnp.float32),
        }
        return new_state, metrics, td_error

    return Learner(init=init, update=update, act=act, loss=loss)


# --- several modules (multi-agent) ---------------------------------------------------


def _learner_axes() -> LearnerState:
    """vmap axes of a stacked LearnerState: a module axis on everything but `hparams`."""
    return LearnerState(*([0] * (len(LearnerState.__dataclass_fields__) - 1)), hparams=None)


def stacked_learner(learner: Learner, config: SACConfig | LearnerSettings,
                    layout: AgentLayout) -> Learner:
    """`learner` vmapped over M modules (`learner` itself for one module).

    init(key, hparams) -> LearnerState with leaves [M, ...] (hparams shared, unstacked).
    update(state, batch [M, B], key) -> (state, metrics [M], td_error [M, B]).
    act(actor_params [M, ...], obs [E·N, obs_dim], key, deterministic) -> [E·N, *action shape]:
        each column acts with its agent's module.
    loss(params [M], target_critic_params [M], batch [M, B], keys [M]): per module.
    """
    if layout.num_modules == 1:
        return learner
    axes = _learner_axes()

    def init(key: jax.Array, hparams: Hyperparams | None = None) -> LearnerState:
        hparams = Hyperparams.from_config(config) if hparams is None else hparams
        return jax.vmap(lambda k: learner.init(k, hparams), out_axes=axes)(
            layout.module_keys(key))

    def update(state: LearnerState, batch: Any, key: jax.Array):
        return jax.vmap(learner.update, in_axes=(axes, 0, 0), out_axes=(axes, 0, 0))(
            state, batch, layout.module_keys(key))

    def act(actor_params: Any, obs: jax.Array, key: jax.Array,
            deterministic: bool = False, noise: jax.Array | None = None) -> jax.Array:
        if noise is None:
            actions = jax.vmap(lambda p, o, k: learner.act(p, o, k, deterministic))(
                actor_params, layout.to_modules(obs), layout.module_keys(key))
        else:
            actions = jax.vmap(lambda p, o, k, n: learner.act(p, o, k, deterministic, n))(
                actor_params, layout.to_modules(obs), layout.module_keys(key),
                layout.to_modules(noise))
        return layout.from_modules(actions)

    return Learner(init=init, update=update, act=act, loss=jax.vmap(learner.loss))
