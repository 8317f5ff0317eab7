"""RTI as an algorithm plug-in: the all-fail groups go through the intervention pipeline
(``rti_actors.rti.pipeline``: Validator, Corrector, Verifier, the PPL gate, the policy's
continuation) before advantages, and GRPO's loss trains the result, the fixed step's tokens
with their extra weight. The accepted fixes are re-scored under every new policy and kept
with each checkpoint."""

from __future__ import annotations

import json

import ray

from envs.openai_client import OpenAIChatClient
from policies.models import load_model
from rti_actors.algorithms.grpo import GRPO
from rti_actors.build import await_started, rollout_sampling
from rti_actors.engine_actor import EnginePool
from rti_actors.groups import all_failed
from rti_actors.options import ConfigError
from rti_actors.rti.fix_tracker import AcceptedFixes
from rti_actors.rti.gate import PPLGate
from rti_actors.rti.pipeline import Intervention
from rti_actors.rti.roles import RoleActor, RuleRoles

FIXES_FILE = "accepted_fixes.json"  # in every checkpoint, next to algorithm_state.json


def plays_roles_on_a_model(config) -> bool:
    roles = str(config["interventions"]["roles"])
    return roles not in ("self", "rules") and not roles.startswith(("http://", "https://"))


# the funnel's stages in order, as the console names them
FUNNEL = (("candidates", "candidates"), ("validator_found_error", "error found"), ("corrector_parsed", "fix parsed"),
          ("verifier_pass", "verified"), ("gate_pass", "gate passed"), ("accepted", "accepted"),
          ("continuation_success", "rescued"))


def rti_funnel(m: dict) -> str:
    """``triggered 2/2: candidates 8 > error found 3 > ... > rescued 0 (lost at fix parsed)``."""
    counts = [(label, m.get(f"rti/{key}", 0)) for key, label in FUNNEL]
    text = f"triggered {m['rti/triggered_groups']}/{m['num_groups']}: " + " > ".join(f"{lb} {n}" for lb, n in counts)
    lost = next((lb for lb, n in counts if n == 0), None)
    return text + (f" (lost at {lost})" if lost and m["rti/triggered_groups"] else "")


class RTI(GRPO):
    name = "rti"
    # the last is the paper's Fig. 5a: one fixed set of accepted fixes, their PPL when the
    # gate accepted them against their PPL under the weights of each later iteration
    panels = (("rti/accepted", "rti/continuation_success"), ("rti/mean_ppl_accepted",),
              ("rti/ppl_fixes_at_gate", "rti/ppl_fixes_now"))

    @staticmethod
    def progress(m: dict) -> str:
        return f"  rti: {rti_funnel(m)}" if "rti/triggered_groups" in m else ""

    @classmethod
    def extra_engines(cls, config) -> int:
        return int(plays_roles_on_a_model(config))

    def __init__(self, config):
        super().__init__(config)
        self.fixes = AcceptedFixes(config["interventions"]["tracked_fixes"])
        self.intervention: Intervention | None = None

    def start_actors(self, graph) -> dict[str, list]:
        """The pipeline and its actors: role actors (the policy's engines, another model's
        engine or an endpoint), the env's rule-based roles when roles="rules", and the gate."""
        c = self.config
        iv, p, ft = c["interventions"], c["policy"], c["fault_tolerance"]
        roles, provider, role_path, same_tokenizer = iv["roles"], graph.pool, graph.model_path, True
        if roles.startswith(("http://", "https://")):
            provider = OpenAIChatClient(roles, iv["endpoint_model"], api_key_env=iv["endpoint_api_key_env"],
                                        timeout=60.0, purpose="role endpoint")
            try:
                provider.check()
            except ValueError as e:
                raise ConfigError(f"interventions(roles={roles!r}): {e}; start it or use roles='self'") from None
            role_path, same_tokenizer = None, False
        elif roles not in ("self", "rules"):
            try:
                role_path = load_model(roles)
            except (ValueError, RuntimeError) as e:
                raise ConfigError(f"interventions(roles={roles!r}): {e}") from None
            provider, same_tokenizer = EnginePool([graph.extra_engines.name(role_path)]), role_path == graph.model_path
        options = {"num_cpus": 0, "max_restarts": ft["max_restarts"], "max_task_retries": ft["max_task_retries"]}
        role_actors = [ray.remote(RoleActor).options(**options).remote(
            provider, role_path, graph.model_path, p["max_model_len"], iv["max_role_tokens"], same_tokenizer,
            iv["structured_verdicts"])
            for _ in range(iv["num_role_actors"])]
        gate = ray.remote(PPLGate).options(**options).remote(
            graph.pool, p["temperature"], iv["gate_max_batch"], iv["gate_max_wait_ms"] / 1000)
        providers, actors = role_actors, {"role_actor": role_actors, "gate": [gate]}
        graph.started += role_actors + [gate]
        if roles == "rules":
            if not graph.runners.call("has_rti_rules"):
                raise ConfigError(f"interventions(roles='rules') needs an environment with rule-based roles (its "
                                  f"rti_rules() hook); {c['environment']['env']!r} has none: use roles='self', a "
                                  "model folder or an endpoint URL")
            providers = [ray.remote(RuleRoles).options(**options).remote(graph.creator, graph.env_config,
                                                                          graph.model_path)]
            actors["rule_roles"] = providers
            graph.started += providers
        named = {f"RTI role actor {i}": a for i, a in enumerate(providers + role_actors)}
        named.update({f"engine for {path}": e for path, e in graph.extra_engines.by_path.items()})
        await_started(named, ft["start_timeout_s"])
        facts = graph.runners.call("verifier_facts")
        self.intervention = Intervention(iv, roles=providers, verifiers=role_actors, gate=gate, runners=graph.runners,
                                         renderer=graph.renderer, sampling=rollout_sampling(p),
                                         seed=c["debugging"]["seed"], facts=facts)
        return actors

    def transform_groups(self, driver, groups: list) -> tuple[list, dict]:
        with driver.timed("intervene"):
            failed = sorted({g[0].task_id for g in groups if all_failed(g)})
            # one call per task, spread over the live runners (a task's evidence is the same on any)
            evidence = dict(zip(failed, driver.runners.map("reward_evidence", failed, "train")))
            return self.intervention.run(groups, version=driver.version, round_=driver.iteration, evidence=evidence)

    def after_publish(self, driver, groups: list) -> dict:
        with driver.timed("rescore_fixes"):  # the gate's engines hold the new weights now
            self.fixes.add((tr for g in groups for tr in g), driver.iteration)
            return self.fixes.rescore(self.intervention.gate)

    def save_state(self, path) -> None:
        (path / FIXES_FILE).write_text(json.dumps(self.fixes.to_dict()))

    def read_state(self, path):
        # a checkpoint from before the tracker existed starts it empty
        saved = AcceptedFixes.from_dict(json.loads((path / FIXES_FILE).read_text())).fixes \
            if (path / FIXES_FILE).is_file() else []
        return AcceptedFixes(self.config["interventions"]["tracked_fixes"], saved)

    def apply_state(self, state) -> None:
        self.fixes = state
