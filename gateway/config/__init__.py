"""Settings (the only reader of the environment) and the policy files.
"""

from gateway.config.policies import PolicyBook, load_policies
from gateway.config.settings import (
    ModelRoute,
    RouteKind,
    Settings,
    litellm_package_dir,
    prepare_offline_environment,
)

__all__ = [
    "ModelRoute",
    "PolicyBook",
    "RouteKind",
    "Settings",
    "litellm_package_dir",
    "load_policies",
    "prepare_offline_environment",
]
