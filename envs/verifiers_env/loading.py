"""A verifiers taskset, its tasks per split, and what of verifiers this adapter can run.

The adapter plays the agent's part itself (the policy's chat loop stands in for a
verifiers harness), in this process and without a sandbox. So it runs a task whose
scoring reads the transcript (``@vf.reward`` / ``@vf.metric`` without a ``runtime``),
whose tools are ``vf.Toolset`` servers it can host in-process, and whose trace-level
``@vf.stop`` hooks it can check between turns. A task that needs a container, a runtime
for setup or scoring, request/response interception, or a toolset state channel is
refused when the env is made, with the reason: run it under verifiers' own harnesses
(through an OpenAI-compatible endpoint) instead.
"""

from __future__ import annotations

import inspect

import verifiers.v1 as vf
from verifiers.v1.session import hook_boundary
from verifiers.v1.state import State, state_cls
from verifiers.v1.trace import Trace
from verifiers.v1.utils.decorators import discover_decorated
from verifiers.v1.utils.generic import concrete_type

from envs.external import load_object

_RUNTIME_HOOKS = ("setup", "finalize", "stage_verifier")


def load_taskset(spec, config: dict) -> vf.Taskset:
    """The taskset ``env_config["taskset"]`` names: a verifiers taskset id (an installed
    package exporting its ``Taskset``, loaded the way verifiers loads it), a
    ``"module:attr"`` naming a ``Taskset`` class, a factory returning one, or an instance.
    ``config`` is the taskset's config (its ``TasksetConfig`` fields)."""
    if spec is None:
        raise ValueError("VerifiersToolEnv needs env_config['taskset']: a verifiers taskset id, or "
                         "'package.module:MyTaskset' (a Taskset class or a factory returning one)")
    if not isinstance(config, dict):
        raise ValueError(f"env_config['taskset_config'] must be a dict of the taskset's config, got {config!r}")
    if isinstance(spec, str) and ":" not in spec:
        cfg_cls = vf.taskset_config_type(spec)
        return vf.load_taskset(cfg_cls.model_validate({**config, "id": spec}))
    obj = load_object(spec, "taskset")
    if isinstance(obj, type) and not issubclass(obj, vf.Taskset):
        raise ValueError(f"env_config['taskset'] = {spec!r} is the class {obj.__name__}, not a verifiers Taskset")
    if isinstance(obj, type):
        cfg_cls = concrete_type(obj, vf.TasksetConfig, origin=vf.Taskset) or vf.TasksetConfig
        obj = obj(cfg_cls.model_validate(config))
    elif callable(obj) and not isinstance(obj, vf.Taskset):
        obj = obj(**config)
    elif config:
        raise ValueError("env_config['taskset_config'] applies to a taskset class or factory, not to an instance")
    if not isinstance(obj, vf.Taskset):
        raise ValueError(f"env_config['taskset'] = {spec!r} gave a {type(obj).__name__}, not a verifiers Taskset")
    return obj


def task_id(task: vf.Task) -> str:
    """The task's id as this library names it: its source id, else its name, else its position."""
    data = task.data
    return str(data.id if data.id is not None else data.name if data.name is not None else f"task-{data.idx}")


def split_tasks(taskset: vf.Taskset, selects: dict, splits: tuple[str, ...]) -> dict[str, dict[str, vf.Task]]:
    """``split -> {task id: task}``, each split the view verifiers' ``SelectConfig``
    (include / exclude / shuffle / skip / limit) picks from the taskset."""
    if not isinstance(selects, dict) or set(selects) - set(splits):
        raise ValueError(f"env_config['splits'] must map splits {list(splits)} to verifiers select configs, got {selects!r}")
    out: dict[str, dict[str, vf.Task]] = {}
    for split in splits:
        view = taskset.select(vf.SelectConfig.model_validate(selects.get(split, {})))
        if not view.bounded:
            raise ValueError(f"the taskset {type(taskset).__name__} is endless: bound split {split!r} with "
                             f"env_config['splits'][{split!r}] = {{'limit': N}}")
        tasks: dict[str, vf.Task] = {}
        for task in view:
            name = task_id(task)
            if name in tasks:
                raise ValueError(f"two tasks of split {split!r} have the id {name!r}; give each task a distinct "
                                 "TaskData.id")
            tasks[name] = task
        out[split] = tasks
    if not any(out.values()):
        raise ValueError(f"the taskset {type(taskset).__name__} gave no tasks for any split")
    return out


def _needs_runtime(fn) -> bool:
    """verifiers' own rule: a scoring hook whose ``runtime`` parameter has no default."""
    param = inspect.signature(fn).parameters.get("runtime")
    return param is not None and param.default is inspect.Parameter.empty


def unsupported(task: vf.Task, toolsets: list) -> list[str]:
    """What of ``task`` (and its ``toolsets``) this adapter cannot run; empty when all of it."""
    cls, problems = type(task), []
    if cls.NEEDS_CONTAINER:
        problems.append(f"{cls.__name__}.NEEDS_CONTAINER is set")
    problems += [f"{cls.__name__}.{hook}() is overridden (it runs in a runtime)" for hook in _RUNTIME_HOOKS
                 if getattr(cls, hook) is not getattr(vf.Task, hook)]
    if task.data.prompt is None:
        problems.append("the task has no prompt (a user opens it)")
    scoring = [*task.hooks("reward"), *task.hooks("metric")] + [j.score for j in task.plugged_judges()]
    problems += [f"scoring hook {getattr(fn, '__name__', fn)!r} needs a runtime" for fn in scoring if _needs_runtime(fn)]
    problems += [f"@vf.intercept hook {fn.__name__!r}" for fn in discover_decorated(task, "intercept")]
    for fn in task.hooks("stop"):
        try:
            boundary = hook_boundary(fn, allow_trace=True)
        except TypeError as e:
            problems.append(str(e))
            continue
        if boundary is not Trace:
            problems.append(f"@vf.stop hook {fn.__name__!r} reads a {boundary.__name__} (only Trace stops are checked)")
    for toolset in toolsets:
        name = type(toolset).__name__
        if not isinstance(toolset, vf.Toolset):
            problems.append(f"{name} is not a vf.Toolset")
            continue
        if state_cls(type(toolset)) is not State:
            problems.append(f"toolset {name} keeps a {state_cls(type(toolset)).__name__} in verifiers' state channel")
        if getattr(toolset.config, "url", None):
            problems.append(f"toolset {name} is a remote server ({toolset.config.url})")
    return problems


def check_supported(task: vf.Task, toolsets: list) -> None:
    problems = unsupported(task, toolsets)
    if problems:
        raise ValueError(f"VerifiersToolEnv cannot run task {task_id(task)!r} of {type(task).__name__} in-process: "
                         + "; ".join(problems) + ". Run it under a verifiers harness instead (through an "
                         "OpenAI-compatible endpoint for the policy).")


__all__ = ["load_taskset", "task_id", "split_tasks", "unsupported", "check_supported"]
