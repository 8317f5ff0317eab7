"""On-policy distillation: each token's advantage is its negated reverse KL to a teacher,
scored on the student's own tokens (``rti_actors.opd``); GRPO's loss trains it."""

from __future__ import annotations

from envs.openai_client import OpenAIChatClient
from policies.models import BUILTIN_MODELS, context_length, load_model
from rti_actors.algorithms.grpo import GRPO
from rti_actors.build import await_started
from rti_actors.failover import Members
from rti_actors.opd import (
    Distiller,
    EndpointTeacher,
    EngineTeacher,
    check_endpoint_tokenizer,
    check_teacher_tokenizer,
)
from rti_actors.options import ConfigError, endpoint_key_problems, names_a_model, shown


class OPD(GRPO):
    name = "opd"
    panels = (("opd/reverse_kl",),)

    @staticmethod
    def progress(m: dict) -> str:
        # how far the student still is from the teacher, and what asking the teacher cost
        if "opd/reverse_kl" not in m:  # an iteration with nothing scored
            return ""
        return f"  opd: reverse KL {m['opd/reverse_kl']:.4f}/token, teacher {m['opd/teacher_seconds']:.1f}s"

    @classmethod
    def validate(cls, config, ok) -> list[str]:
        if ok("opd", "model", "endpoint", "endpoint_api_key_env"):
            return opd_problems(config["opd"])
        return []

    @classmethod
    def extra_engines(cls, config) -> int:
        return int(config["opd"]["model"] is not None)

    def prepare(self, renderer) -> list[str]:
        self.teacher = resolve_teacher(self.config, renderer.tokenizer)
        return [self.teacher] if isinstance(self.teacher, str) else []

    def start_actors(self, graph) -> dict[str, list]:
        p, teacher = self.config["policy"], self.teacher
        tries = self.config["fault_tolerance"]["max_restarts"] + 1  # as the other engine calls: one per restart
        if isinstance(teacher, str):  # a model folder: an engine of its own
            engine = graph.extra_engines.get(teacher)
            await_started({f"engine for {teacher}": engine}, self.config["fault_tolerance"]["start_timeout_s"])
            teacher = EngineTeacher(Members("teacher engine", [engine], max_tries=tries))
        # the KL's temperature, the same on both sides: the rollout's for a model teacher; an
        # endpoint's prompt log-probs are the model's own distribution (temperature 1)
        kl_temperature = EndpointTeacher.temperature if isinstance(teacher, EndpointTeacher) else p["temperature"]
        policy = Members("engine", graph.engines, max_tries=tries)
        self.distiller = Distiller(policy, teacher, kl_temperature, self.config["opd"]["reward_weight"], p["max_model_len"])
        return {}

    def advantages(self, driver, groups: list) -> dict:
        super().advantages(driver, groups)
        with driver.timed("distill"):
            return self.distiller.apply(groups)


def resolve_teacher(c, tokenizer):
    """The teacher, checked before any actor starts: the resolved folder of a teacher model
    (its tokenizer must be the policy's, its context at least max_model_len), or an
    ``EndpointTeacher`` whose server is reachable and reads the policy's token ids as the
    policy does."""
    from transformers import AutoTokenizer

    te, p = c["opd"], c["policy"]
    policy_text = f"policy(model={p['model']!r})"
    if te["endpoint"] is not None:
        client = OpenAIChatClient(te["endpoint"], te["endpoint_model"], api_key_env=te["endpoint_api_key_env"],
                                  timeout=120.0, purpose="teacher endpoint")
        text = f"opd(endpoint={te['endpoint']!r})"
        try:
            client.check()
        except ValueError as e:
            raise ConfigError(f"{text}: {e}; start it or give opd(model=...)") from None
        check_endpoint_tokenizer(client, tokenizer, text, policy_text)
        return EndpointTeacher(client)
    text = f"opd(model={str(te['model'])!r})"
    try:
        path = load_model(str(te["model"]))
    except (ValueError, RuntimeError) as e:
        raise ConfigError(f"{text}: {e}") from None
    check_teacher_tokenizer(tokenizer, AutoTokenizer.from_pretrained(path), text, policy_text)
    positions = context_length(path)
    if positions is not None and p["max_model_len"] > positions:
        raise ConfigError(f"{text} has {positions} positions but scores whole trajectories of up to "
                          f"policy(max_model_len={p['max_model_len']}) tokens: use a teacher with a longer context or "
                          f"set max_model_len <= {positions}")
    return path


def opd_problems(te: dict) -> list[str]:
    """OPD's teacher: exactly one of a model and an endpoint (whether its tokenizer is the
    policy's is build's check: it reads both tokenizers, or asks the endpoint)."""
    model, endpoint = te["model"], te["endpoint"]
    if model is None and endpoint is None:
        return ["training(algorithm='opd') needs a teacher to score the student's tokens: set "
                "opd(model=<a model folder, built-in name or hub id with the policy's tokenizer>) or "
                "opd(endpoint='https://<host>/v1') (an OpenAI-compatible server that returns prompt log-probs)"]
    if model is not None and endpoint is not None:
        return [f"opd(model={shown(str(model))}, endpoint={endpoint!r}): give one teacher, a model or an endpoint"]
    if endpoint is not None:
        if not endpoint.startswith(("http://", "https://")):
            return [f"opd(endpoint={endpoint!r}) must be an http(s):// URL of an OpenAI-compatible server, "
                    "e.g. 'https://host/v1'; a local model goes in opd(model=...)"]
        return endpoint_key_problems("opd", "endpoint", endpoint, te["endpoint_api_key_env"])
    if not names_a_model(str(model)):
        return [f"opd(model={shown(str(model))}): not a built-in model {sorted(BUILTIN_MODELS)}, a local model "
                "folder with config.json or a Hugging Face hub id ('org/name')"]
    return []
