"""OpenEnv environments as tool envs: ``OpenEnvToolEnv`` ("OpenEnv-v0").

An environment written for OpenEnv (``openenv-core``: an ``Environment`` with ``reset``
and ``step``, served over HTTP and websockets by its FastAPI app) becomes a multi-turn
tool env, run in this process or reached at its server's URL
(``pip install 'rti_actors[openenv]'``). Modules: ``backends`` (in-process or HTTP, and
whose fault a failure is), ``tasks`` (which episodes), ``env`` (the gymnasium env). See
docs/ENV_ADAPTERS.md.
"""

try:
    import openenv.core  # noqa: F401
except ImportError as e:  # an optional extra: say how to get it
    raise ImportError("OpenEnvToolEnv needs OpenEnv: pip install 'rti_actors[openenv]' (openenv-core)") from e

from envs.openenv_env.backends import HTTPBackend, InProcessBackend, ServerError
from envs.openenv_env.env import DEFAULT_SYSTEM_PROMPT, OpenEnvToolEnv
from envs.openenv_env.tasks import load_tasks

__all__ = ["OpenEnvToolEnv", "DEFAULT_SYSTEM_PROMPT", "InProcessBackend", "HTTPBackend", "ServerError", "load_tasks"]
