"""The environment registry: ``register_env(name, creator)`` with Ray Tune's contract.

``creator(env_config) -> gymnasium.Env``. Every registered id is also registered with
gymnasium, so ``gymnasium.make(name, env_config={...})`` works too. Built-in benchmarks
register themselves lazily (their modules are imported on first use), so importing
``envs`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Callable

import gymnasium as gym

_CREATORS: dict[str, Callable[[dict], gym.Env]] = {}

# id -> "module:Class" of the built-in environments, imported on first use
BUILTIN_ENVS: dict[str, str] = {}


def register_env(name: str, creator: Callable[[dict], gym.Env]) -> None:
    """Register ``creator(env_config) -> Env`` under ``name`` (here and in gymnasium)."""
    if not isinstance(name, str) or not name:
        raise ValueError("env name must be a non-empty string")
    if not callable(creator):
        raise TypeError(f"creator for {name!r} must be callable as creator(env_config) -> gymnasium.Env")
    _CREATORS[name] = creator
    gym.registry.pop(name, None)  # re-registering replaces, silently
    gym.register(id=name, entry_point=_gym_entry_point(name), disable_env_checker=True, order_enforce=False)


def _gym_entry_point(name: str):
    def make(env_config: dict | None = None, render_mode: str | None = None, **kwargs):
        cfg = dict(env_config or {})
        cfg.update(kwargs)
        env = _CREATORS[name](cfg)
        if render_mode is not None:
            env.render_mode = render_mode
        return env

    return make


def _builtin_creator(target: str) -> Callable[[dict], gym.Env]:
    def create(env_config: dict | None = None) -> gym.Env:
        module, cls = target.split(":")
        return getattr(importlib.import_module(module), cls)(env_config or {})

    return create


def list_envs() -> list[str]:
    return sorted(set(_CREATORS) | set(BUILTIN_ENVS))


def make_env(name: str, env_config: dict | None = None) -> gym.Env:
    """Create a registered environment; unknown names get an error listing the known ones."""
    if name not in _CREATORS:
        raise ValueError(f"unknown environment {name!r}; registered: {list_envs()}. "
                         "Register your own with envs.register_env(name, creator).")
    return _CREATORS[name](dict(env_config or {}))


def register_builtin(name: str, target: str) -> None:
    BUILTIN_ENVS[name] = target
    register_env(name, _builtin_creator(target))


def get_creator(name: str) -> Callable[[dict], gym.Env]:
    """The creator registered under ``name`` (picklable, so env runner actors can use it)."""
    if name not in _CREATORS:
        raise ValueError(f"unknown environment {name!r}; registered: {list_envs()}")
    return _CREATORS[name]
