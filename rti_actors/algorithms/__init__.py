"""The algorithm registry: every training method is an ``AlgorithmPlugin`` found by name.

    from rti_actors.algorithms import AlgorithmPlugin, register_algorithm
    register_algorithm(MyMethod)                       # MyMethod.name == "my-method"
    RTIConfig().training(algorithm="my-method")

The built-in methods are loaded on first lookup, so that this module imports nothing of
the driver and the learner can look a method up without the whole graph.
"""

from __future__ import annotations

import importlib

from rti_actors.algorithms.base import AlgorithmPlugin

BUILTIN = {"grpo": "rti_actors.algorithms.grpo:GRPO", "gspo": "rti_actors.algorithms.gspo:GSPO",
           "rti": "rti_actors.rti.plugin:RTI", "luffy": "rti_actors.algorithms.luffy:LUFFY",
           "opd": "rti_actors.algorithms.opd:OPD", "aepo": "rti_actors.algorithms.aepo:AEPO"}
_registry: dict[str, type[AlgorithmPlugin]] = {}


def register_algorithm(plugin: type[AlgorithmPlugin], overwrite: bool = False) -> type[AlgorithmPlugin]:
    """Make ``plugin`` selectable as ``training(algorithm=plugin.name)``; returns it, so it
    can decorate the class. A name already taken is refused unless ``overwrite``, or unless
    it is taken by the same class defined again (a script imported twice, a notebook cell
    run again): that re-definition replaces the old one."""
    if not (isinstance(plugin, type) and issubclass(plugin, AlgorithmPlugin)):
        raise TypeError(f"register_algorithm takes an AlgorithmPlugin subclass, got {plugin!r}")
    name = plugin.name
    if not isinstance(name, str) or not name or name == "sft":
        raise ValueError(f"{plugin.__name__}.name must be a non-empty string other than 'sft' (the warm start's "
                         f"objective), got {name!r}")
    if plugin.normaliser not in ("tokens", "sequences"):
        raise ValueError(f"{plugin.__name__}.normaliser must be 'tokens' or 'sequences', got {plugin.normaliser!r}")
    taken = _registry.get(name) or (name in BUILTIN and get_algorithm(name))
    redefined = taken and (taken.__module__, taken.__qualname__) == (plugin.__module__, plugin.__qualname__)
    if taken and taken is not plugin and not (overwrite or redefined):
        raise ValueError(f"algorithm {name!r} is already registered ({taken.__module__}.{taken.__name__}); choose "
                         "another name, or pass overwrite=True to replace it")
    _registry[name] = plugin
    return plugin


def get_algorithm(name: str) -> type[AlgorithmPlugin]:
    if name not in _registry and name in BUILTIN:
        module, cls = BUILTIN[name].split(":")
        _registry[name] = getattr(importlib.import_module(module), cls)
    if name not in _registry:
        raise ValueError(f"unknown algorithm {name!r}; choose one of {algorithm_names()} or register_algorithm() "
                         "your own")
    return _registry[name]


def algorithm_names() -> tuple[str, ...]:
    """Every selectable name: the built-ins first, then the registered ones."""
    return tuple(BUILTIN) + tuple(n for n in _registry if n not in BUILTIN)


__all__ = ["BUILTIN", "AlgorithmPlugin", "algorithm_names", "get_algorithm", "register_algorithm"]
