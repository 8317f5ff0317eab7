"""rti_actors: Rollout-Time Intervention for agentic RL, as an actor graph on Ray."""

__version__ = "0.1.0"
