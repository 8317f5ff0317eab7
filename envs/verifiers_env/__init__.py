"""verifiers tasksets as tool envs: ``VerifiersToolEnv`` ("Verifiers-v0").

The tasks of a ``verifiers`` taskset (``verifiers.v1``: tasks with a prompt, ``vf.Toolset``
tools and a rubric of ``@vf.reward`` hooks) become a multi-turn tool env in which the
policy plays the agent and the task's own rubric scores it (``pip install
'rti_actors[verifiers]'``). Modules: ``loading`` (the taskset, its splits, what can run
in-process), ``tools`` (toolsets hosted in-process), ``trace`` (an episode as a verifiers
``Trace``), ``env`` (the gymnasium env). See docs/ENV_ADAPTERS.md.
"""

try:
    import verifiers.v1  # noqa: F401
except ImportError as e:  # an optional extra: say how to get it
    raise ImportError("VerifiersToolEnv needs verifiers: pip install 'rti_actors[verifiers]' (verifiers>=0.4, "
                      "its verifiers.v1 API)") from e

from envs.verifiers_env.env import DEFAULT_SYSTEM_PROMPT, VerifiersToolEnv
from envs.verifiers_env.loading import check_supported, load_taskset, split_tasks, task_id, unsupported
from envs.verifiers_env.tools import HostedTool, ToolHost
from envs.verifiers_env.trace import build_trace

__all__ = ["VerifiersToolEnv", "DEFAULT_SYSTEM_PROMPT", "load_taskset", "split_tasks", "task_id", "unsupported",
           "check_supported", "ToolHost", "HostedTool", "build_trace"]
