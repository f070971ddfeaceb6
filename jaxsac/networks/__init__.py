"""SAC networks (flax.linen) and the three extension points built on them:

    encoders   observation tree -> features (`Encoder`; "auto" by default: "conv" for
               images, jaxsac.networks.conv, else "flat"), by name
    critics    the critics, their TD target and loss (`CriticFamily`; "ensemble", "tqc",
               "categorical"), by name (`families`)
    heads      the action distribution of each kind of action space (`PolicyHead`),
               chosen from the action adapter's kind

`policy_head(actions, settings, obs)` assembles a head with the encoder and critic
family the settings (`NetworkSettings`, the config's "networks" fields) name, for
observations `obs` (a jaxsac.observations.ObsSpec), the actor and the critics each
reading their own entries (`actor_obs_keys`, `critic_obs_keys`). Shapes: B
the batch size, |A| the action dimension (Box) or the number of actions (Discrete), N
the number of critics.
"""

from jaxsac.networks.categorical_critic import (
    CategoricalCritic,
    c51_projection,
    hl_gauss_probs,
)
from jaxsac.networks.conv import ConvEncoder, ImageEncoder, holds_image, is_image
from jaxsac.networks.critics import CriticFamily, EnsembleCritic, QEnsemble, element_loss
from jaxsac.networks.encoders import (
    ENCODER_SHARING,
    ENCODERS,
    CriticFeatures,
    Encoder,
    KeyView,
    encode,
    make_encoder,
    register_encoder,
    registered_encoders,
)
from jaxsac.networks.families import CRITICS, make_critic, register_critic, registered_critics
from jaxsac.networks.heads import (
    DISCRETE_TARGET_ENTROPY_SCALE,
    HEADS,
    LOG_STD_MAX,
    LOG_STD_MIN,
    Actor,
    CategoricalActor,
    CategoricalHead,
    PolicyHead,
    SquashedGaussianHead,
    categorical_log_probs,
    deterministic_action,
    init_networks,
    policy_head,
    register_policy_head,
    sample_action,
    squashed_log_prob,
    uses_builtin_networks,
)
from jaxsac.networks.layers import ACTIVATIONS, KERNEL_INIT, MLP
from jaxsac.networks.registry import Registry
from jaxsac.networks.settings import NetworkSettings
from jaxsac.networks.tqc import TQCCritic, quantile_huber_loss, truncated_target

__all__ = [
    "ACTIVATIONS", "CRITICS", "DISCRETE_TARGET_ENTROPY_SCALE", "ENCODERS", "ENCODER_SHARING",
    "HEADS", "ConvEncoder", "CriticFeatures", "ImageEncoder", "holds_image", "is_image",
    "KERNEL_INIT", "LOG_STD_MAX", "LOG_STD_MIN", "MLP", "Actor", "CategoricalActor",
    "CategoricalCritic", "CategoricalHead", "CriticFamily", "Encoder", "EnsembleCritic",
    "KeyView", "encode",
    "NetworkSettings", "PolicyHead", "QEnsemble", "Registry", "SquashedGaussianHead",
    "TQCCritic", "c51_projection", "categorical_log_probs", "deterministic_action",
    "element_loss", "hl_gauss_probs", "init_networks", "make_critic", "make_encoder",
    "policy_head", "quantile_huber_loss", "register_critic", "register_encoder",
    "register_policy_head", "registered_critics", "registered_encoders", "sample_action",
    "squashed_log_prob", "truncated_target", "uses_builtin_networks",
]
