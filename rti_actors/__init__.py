"""rti_actors: Rollout-Time Intervention for agentic RL, as an actor graph on Ray.

    from rti_actors import RTIConfig
    algo = RTIConfig().environment("Navigation-v0").training(algorithm="grpo").build()
    algo.train(); algo.evaluate(); algo.save("ckpt")
"""

from rti_actors.config import ALGORITHMS, ConfigError, RTIConfig

__version__ = "0.1.0"
__all__ = ["ALGORITHMS", "ConfigError", "RTIConfig", "__version__"]
