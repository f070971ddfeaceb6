"""The critic families by name: what `SACConfig.critic` chooses among, the built-in ones
("ensemble", "tqc", "categorical", "crossq") and those added with `register_critic`.

    jaxsac.networks.register_critic("mine", lambda settings, num_actions, encoder: Mine(...))
    config = jaxsac.SACConfig(critic="mine")
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jaxsac import checks
from jaxsac.networks.categorical_critic import CategoricalCritic
from jaxsac.networks.critics import CriticFamily, EnsembleCritic, QEnsemble
from jaxsac.networks.crossq import CrossQCritic, CrossQEnsemble
from jaxsac.networks.registry import Registry
from jaxsac.networks.settings import NetworkSettings
from jaxsac.networks.tqc import TQCCritic

CriticFactory = Callable[[NetworkSettings, int, Any], CriticFamily]
"""(settings, num_actions (|A| for Discrete actions, 0 for Box), encoder or None) -> the
family."""


def _critic_networks(settings: NetworkSettings, num_actions: int, encoder: Any,
                     outputs: int = 0, unit_readout: bool = False) -> QEnsemble:
    """The config's `num_q` critics with `outputs` values per action (0: one Q-value)."""
    return QEnsemble(settings.num_q, settings.hidden_sizes, settings.activation, num_actions,
                     settings.critic_layer_norm, encoder, outputs, settings.network,
                     unit_readout)


def _ensemble(settings: NetworkSettings, num_actions: int, encoder: Any) -> EnsembleCritic:
    return EnsembleCritic(_critic_networks(settings, num_actions, encoder),
                          settings.critic_loss)


def _tqc(settings: NetworkSettings, num_actions: int, encoder: Any) -> TQCCritic:
    if num_actions:
        checks.fail("SACConfig", "critic", settings.critic,
                    f"'ensemble' or a family for Discrete actions with this Discrete action "
                    f"space of {num_actions} actions: TQC pools the quantiles at one sampled "
                    "a' ~ π (Box actions); a mixture over every action has no equally "
                    "weighted quantiles to truncate")
    return TQCCritic(_critic_networks(settings, 0, encoder, settings.num_quantiles),
                     settings.quantiles_to_drop_per_net)


def _categorical(settings: NetworkSettings, num_actions: int, encoder: Any
                 ) -> CategoricalCritic:
    # SimbaV2's categorical value head: unit-norm weights to the logits, plus a bias.
    networks = _critic_networks(settings, num_actions, encoder, settings.num_atoms,
                                unit_readout=settings.network == "simbav2")
    return CategoricalCritic(networks, settings.v_min, settings.v_max, settings.categorical_target,
                             settings.hl_gauss_sigma)


def _crossq(settings: NetworkSettings, num_actions: int, encoder: Any) -> CrossQCritic:
    return CrossQCritic(CrossQEnsemble(settings.num_q, settings.hidden_sizes,
                                       settings.activation, num_actions, encoder,
                                       settings.batch_norm_momentum,
                                       settings.batch_renorm_warmup), settings.critic_loss)


CRITICS = Registry("critic family", "register_critic",
                   {"ensemble": _ensemble, "tqc": _tqc, "categorical": _categorical,
                    "crossq": _crossq})


def register_critic(name: str, factory: CriticFactory) -> None:
    """Make `SACConfig(critic=name)` build its critics with `factory`."""
    CRITICS.add(name, factory, factory, "(settings, num_actions, encoder) -> CriticFamily")


def registered_critics() -> list[str]:
    """The names `SACConfig.critic` accepts in this process."""
    return CRITICS.names()


def make_critic(settings: NetworkSettings, num_actions: int, encoder: Any = None
                ) -> CriticFamily:
    """The critic family `settings.critic` names."""
    if settings.critic not in CRITICS:
        CRITICS.missing("SACConfig", "critic", settings.critic)
    family = CRITICS[settings.critic](settings, num_actions, encoder)
    if not isinstance(family, CriticFamily):
        raise ValueError(f"the critic factory registered as {settings.critic!r} returned "
                         f"{type(family).__name__}, which lacks CriticFamily's methods "
                         "(init, apply, q_values, value, td_target, loss)")
    return family
