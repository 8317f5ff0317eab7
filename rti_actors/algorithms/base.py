"""``AlgorithmPlugin``: what one training method adds to the shared loop.

The driver (``rti_actors.algorithm``) runs the same recipe for every method: sample G
episodes per task, score them into groups, give each trajectory an advantage, push the
learner's samples to the replay queue, update, publish. A plug-in changes that recipe only
through the hooks below, called in this order each iteration:

    sample            -> the iteration's trajectories (default: G episodes per picked task)
    extra_trajectories-> traces the policy did not sample, joining the groups (LUFFY's teacher)
    transform_groups  -> the scored groups changed before advantages (RTI's interventions)
    advantages        -> advantages on every trajectory (default: group-normalised reward)
    after_publish     -> work that needs the new weights in the engines (RTI's fix re-scoring)

and, once per run: ``validate`` (with the config, before anything starts),
``prepare`` and ``start_actors`` (while the graph is built), ``setup`` (with the driver),
``save_state`` / ``read_state`` / ``apply_state`` (with every checkpoint). What the
method reports beside the common metrics is its own too: ``panels`` (its learning-curve
panels) and ``progress`` (its part of the console line).

The learner's side is the class's ``loss``: a pure function of the loss tokens' log-probs
and the batch tensors, run inside the learner actors. The learner gets the class itself
(Ray pickles it), so a plug-in registered in a user's script needs no import there.
"""

from __future__ import annotations

from typing import ClassVar

from rti_actors.groups import assign_advantages


class AlgorithmPlugin:
    """Subclass it, set ``name``, override ``loss`` and the hooks your method needs, and
    ``register_algorithm(YourPlugin)``; ``RTIConfig().training(algorithm=name)`` selects it.
    One instance per run, made by ``build()``; every hook here does what plain GRPO needs."""

    name: ClassVar[str] = ""
    # ---- the learner's side ----
    normaliser: ClassVar[str] = "tokens"       # the loss divides by loss "tokens" or "sequences"
    with_entropy: ClassVar[bool] = False       # loss() also gets each loss token's entropy
    loss_stats: ClassVar[tuple[str, ...]] = ()  # sums the loss returns beyond the common ones

    @staticmethod
    def loss(logp, batch: dict, settings: dict, normaliser: float, entropy=None):
        """(loss, stats) of one micro-batch. ``logp``: [rows, length] log-probs of the loss
        tokens at the rollout temperature (0 elsewhere); ``batch``: blp (behaviour log-probs),
        adv (per-token advantages), tw (token weights), mask, off (off-policy rows), seq
        (sequence index per token in a packed row); ``settings``: the learner's settings
        (``rti_actors.options.learner_settings``); ``normaliser``: the global token or
        sequence count. ``stats``: sums (see ``rti_actors.losses.finish_stats``)."""
        raise NotImplementedError("an algorithm plug-in must define loss()")

    # ---- the config's side (before anything starts) ----
    @classmethod
    def validate(cls, config, ok) -> list[str]:
        """Problems with this method's options, each saying what to change. ``ok(section,
        *keys)``: whether those options passed their own checks (test them before combining)."""
        return []

    @classmethod
    def episodes_per_task(cls, config) -> int:
        """Episodes the policy samples per task and iteration."""
        return config["training"]["group_size"]

    @classmethod
    def extra_engines(cls, config) -> int:
        """Engines this method starts beside the policy's (for the GPU count)."""
        return 0

    # ---- the graph's side (while build() starts the actors) ----
    def __init__(self, config):
        self.config = config

    def prepare(self, renderer) -> list[str]:
        """Checks that need the policy's tokenizer, before any actor starts; returns the
        folders of models this method will load (for the memory check)."""
        return []

    def start_actors(self, graph) -> dict[str, list]:
        """Start this method's actors (``graph``: ``rti_actors.build.GraphParts``); returns
        them by kind, for the fault counters and the clean-up."""
        return {}

    # ---- the driver's side ----
    def setup(self, driver) -> None:
        """Called once the driver (``rti_actors.algorithm.Algorithm``) is ready."""

    def sample(self, driver) -> tuple[list, object, dict]:
        """The iteration's trajectories, the launch they came from (None if not launched the
        default way) and metrics."""
        launch, trajectories = driver.sample_iteration()
        return trajectories, launch, {}

    def extra_trajectories(self, driver, launch) -> tuple[list, dict]:
        """Trajectories that join the groups beside the policy's own (marked off_policy)."""
        return [], {}

    def transform_groups(self, driver, groups: list) -> tuple[list, dict]:
        return groups, {}

    def advantages(self, driver, groups: list) -> dict:
        """Set ``advantage`` (and ``token_advantages`` for per-token ones) on every trajectory."""
        for g in groups:
            assign_advantages(g)
        return {}

    def after_publish(self, driver, groups: list) -> dict:
        return {}

    # ---- reporting ----
    panels: ClassVar[tuple[tuple[str, ...], ...]] = ()  # metric names per learning-curve panel

    @staticmethod
    def progress(m: dict) -> str:
        """This method's part of the iteration's console line (``m``: ``train()``'s metrics),
        e.g. RTI's funnel; appended after the common part."""
        return ""

    # ---- checkpoints ----
    def save_state(self, path) -> None:
        """Write this method's state into the checkpoint folder ``path``."""

    def read_state(self, path):
        """Read (without applying) the state ``save_state`` wrote; None if there is none."""
        return None

    def apply_state(self, state) -> None:
        """Apply what ``read_state`` returned, once the rest of the restore succeeded."""

