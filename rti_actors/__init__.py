"""rti_actors: Rollout-Time Intervention for agentic RL, as an actor graph on Ray.

    from rti_actors import RTIConfig
    algo = RTIConfig().environment("Navigation-v0").training(algorithm="grpo").build()
    algo.train(); algo.evaluate(); algo.save("ckpt")

Every algorithm is a plug-in (``rti_actors.algorithms``); ``register_algorithm`` adds yours.
"""

from rti_actors.algorithms import AlgorithmPlugin, algorithm_names, get_algorithm, register_algorithm
from rti_actors.config import ConfigError, RTIConfig

__version__ = "0.1.0"
__all__ = ["AlgorithmPlugin", "ConfigError", "RTIConfig", "__version__", "algorithm_names", "get_algorithm",
           "register_algorithm"]
