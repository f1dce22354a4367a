"""The HTTP app: routes (thin), access guard, rendering, OpenAPI, and the wiring of every part (``Services``).
"""

from gateway.api.app import create_app, uvicorn_config
from gateway.api.services import check_config

__all__ = [
    "check_config",
    "create_app",
    "uvicorn_config",
]
