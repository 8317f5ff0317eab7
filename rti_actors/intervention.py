"""Rollout-Time Intervention on the all-fail groups of one iteration (RTI_SPEC §3–8).

For every group whose G rewards are all 0:
  1. candidates  — failed trajectories ordered by partial progress, then fewer turns;
  2. Validator   — each step k of a candidate is judged with the reward evidence; the
                   first invalid step is the one to fix (unparsable verdicts count as valid);
  3. Corrector   — a minimal rewrite of step k in the policy's own turn format (attempts);
  4. Verifier    — deterministic checks (leaks, schema, grounding, fake tool output) and
                   the policy's V1 (consistent) / V3 (plausible) verdicts;
  5. gate        — PPL of the rewrite's ids under the behaviour policy in the original
                   context h_k; keep the lowest-PPL attempt with PPL <= delta;
  6. continuation— the rewrite is executed for real and the policy plays on (env runner);
  7. weights     — w_t = clip(pi(y_t|c_k)/pi(y_t|h_k), 1-eps, 1+eps) on the rewrite's tokens,
                   whose behaviour log-probs are the gate's (h_k), never the Corrector's.
All candidates of all triggered groups go through each stage together, so every role and
the gate see one batch per stage. Every stage is counted in the returned metrics.
"""

from __future__ import annotations

import math
import time
from collections import Counter

import numpy as np
import ray

from envs.tool_calls import parse_tool_calls
from policies.chat import own_turn_positions
from rti_actors.env_runner import request_seed
from rti_actors.groups import assemble
from rti_actors.gate import passes_gate, perplexity, token_weights
from rti_actors.roles import language_of, load_prompt
from rti_actors.verifier_checks import check_corrected_step



def progress(t: dict) -> float:
    """Partial progress of a failed trajectory, from the reward breakdown when the env
    reports one (fraction of checks met, or a graded score); 0 otherwise."""
    b = t.get("info", {}).get("reward_breakdown") or {}
    for key in ("checks_met", "progress", "score", "completion"):
        if isinstance(b.get(key), (int, float)):
            return float(b[key])
    return 0.0


def assistant_positions(t: dict) -> list[int]:
    """Indices in ``t["messages"]`` of the episode's own assistant turns."""
    return own_turn_positions(t["messages"], t["num_turns"])


# every per-stage counter, reported (as rti/<name>) even when it stayed at 0
STAGES = ("groups", "triggered_groups", "candidates", "validator_calls", "validator_unparsable", "validator_found_error",
          "corrector_attempts", "corrector_complete", "corrector_parsed", "verifier_v2_pass", "verifier_v1_pass",
          "verifier_v3_pass", "verifier_unparsable", "verifier_pass", "gate_scored", "gate_pass", "accepted",
          "accepted_second_fix", "continued", "continuation_success", "replay_errors")


class Intervention:
    def __init__(self, cfg: dict, *, roles, rules, gate, runners, renderer, sampling: dict, seed: int):
        self.cfg = cfg
        self.roles = roles          # list of RoleActor handles (may be empty with roles="rules")
        self.rules = rules          # NavigationRules or None
        self.verifier_roles = roles  # V1/V3 always come from role actors (the policy by default)
        self.gate = gate
        self.runners = runners
        self.renderer = renderer
        self.sampling = sampling
        self.seed = seed
        self._rr = 0
        self.v2_reasons: Counter = Counter()

    def _role(self):
        self._rr += 1
        return self.roles[self._rr % len(self.roles)]

    # ---- the pipeline ---------------------------------------------------------------------
    def run(self, groups: list[list[dict]], *, version: int, round_: int, evidence: dict) -> tuple[list[list[dict]], dict]:
        t0 = time.perf_counter()
        c = Counter()
        triggered = [i for i, g in enumerate(groups) if max(t["reward"] for t in g) <= 0]
        c["groups"], c["triggered_groups"] = len(groups), len(triggered)
        cands = []
        for gi in triggered:
            pool = [t for t in groups[gi] if t["num_turns"] and not (self.cfg["exclude_truncated"] and t["context_truncated"])]
            pool.sort(key=lambda t: (-progress(t), t["num_turns"], request_seed(self.seed, round_, t["task_id"], t["sample_index"])))
            for t in pool[: self.cfg["max_candidates_per_group"]]:
                cands.append({"group": gi, "traj": t, "evidence": evidence[t["task_id"]], "min_step": 0})
        c["candidates"] = len(cands)

        # Round 2+ (interventions_per_trajectory > 1): a rescued trajectory that still
        # failed goes through the pipeline again, on steps after its first fix, and the
        # result (carrying both fixes) takes its place.
        final: dict[tuple[int, int], dict] = {}
        for depth in range(self.cfg["interventions_per_trajectory"]):
            cands = self._validate(cands, c)
            cands = self._correct(cands, c, round_)
            cands = self._verify(cands, c)
            cands = self._gate(cands, c)
            accepted = self._select(cands, c) if depth == 0 else cands
            if depth:
                c["accepted_second_fix"] += len(accepted)
            for t in self._continue(accepted, c, version, f"{round_}-{depth}", groups):
                final[(t["group"], t["sample_index"])] = t
            cands = [{"group": t["group"], "traj": t, "evidence": evidence[t["task_id"]], "replace_index": t["sample_index"],
                      "min_step": t["intervened_step"] + 1, "source_index": t["source_index"]}
                     for t in final.values() if t["reward"] <= 0 and t.get("depth", 0) == depth]
        rescued = list(final.values())
        out = assemble(groups, rescued, self.cfg["group_mode"])
        ppls = [t["gate_ppl"] for t in rescued]
        metrics = self._metrics(c, cands, rescued, ppls, groups, out)
        metrics["rti/seconds"] = time.perf_counter() - t0
        return out, metrics

    def _validate(self, cands, c):
        if self.cfg["roles"] == "rules":
            kept = []
            for cd in cands:
                t = cd["traj"]
                v = self.rules.validate(t["messages"], t["actions"], cd["evidence"])
                if v is not None and not v.get("is_valid", True) and int(v["step"]) >= cd["min_step"]:
                    cd["step"], cd["verdict"] = int(v["step"]), v
                    kept.append(cd)
            c["validator_found_error"] += len(kept)
            return kept
        requests, owners = [], []
        for ci, cd in enumerate(cands):
            t = cd["traj"]
            pos = assistant_positions(t)
            lang = language_of(t["messages"])
            for k in range(cd["min_step"], min(len(pos), cd["min_step"] + self.cfg["max_validator_steps"])):
                requests.append({"history": t["messages"][:pos[k]], "step": t["actions"][k],
                                 "evidence": cd["evidence"], "language": lang})
                owners.append((ci, k))
        verdicts = ray.get(self._role().validate.remote(requests)) if requests else []
        c["validator_calls"] += len(requests)
        c["validator_unparsable"] += sum(v is None for v in verdicts)
        first: dict[int, tuple[int, dict]] = {}
        for (ci, k), v in zip(owners, verdicts):
            if v is not None and not v["is_valid"] and (ci not in first or k < first[ci][0]):
                first[ci] = (k, v)
        kept = []
        for ci, (k, v) in sorted(first.items()):
            cands[ci]["step"], cands[ci]["verdict"] = k, v
            kept.append(cands[ci])
        c["validator_found_error"] += len(kept)
        return kept

    def _history(self, cd) -> list[dict]:
        t = cd["traj"]
        return t["messages"][:assistant_positions(t)[cd["step"]]]

    def _correct(self, cands, c, round_):
        if not cands:
            return []
        eos = self.renderer.eos_id
        if self.cfg["roles"] == "rules":
            for cd in cands:
                t = cd["traj"]
                text = self.rules.correct(t["messages"], t["actions"], cd["evidence"], cd["verdict"])
                ids = self.renderer.tokenizer.encode(text, add_special_tokens=False) + [eos] if text else []
                cd["attempts"] = [{"text": text or "", "ids": ids, "complete": bool(text)}]
        else:
            requests = [{"history": self._history(cd), "step": cd["traj"]["actions"][cd["step"]], "tools": cd["traj"]["tools"],
                         "verdict": cd["verdict"], "language": language_of(cd["traj"]["messages"])} for cd in cands]
            seeds = [request_seed(self.seed, round_, "corrector", cd["traj"]["task_id"], cd["traj"]["sample_index"]) for cd in cands]
            outs = ray.get(self._role().correct.remote(requests, self.cfg["corrector_attempts"],
                                                       self.cfg["corrector_temperature"], seeds))
            for cd, attempts in zip(cands, outs):
                cd["attempts"] = attempts
        c["corrector_attempts"] += sum(len(cd["attempts"]) for cd in cands)
        c["corrector_complete"] += sum(a["complete"] for cd in cands for a in cd["attempts"])
        for cd in cands:
            cd["attempts"] = [a for a in cd["attempts"] if a["complete"] and len(a["ids"]) > 1]
        kept = [cd for cd in cands if cd["attempts"]]
        c["corrector_parsed"] += len(kept)
        return kept

    def _verify(self, cands, c):
        if not self.cfg["verifier"]:
            return cands
        v2 = 0
        for cd in cands:
            t = cd["traj"]
            last_step = cd["step"] == t["num_turns"] - 1 and t["terminated"]
            history = self._history(cd)
            for a in cd["attempts"]:
                # a text-only rewrite of the turn that ended the episode is a final answer:
                # nothing runs after it, so every fact in it must already be grounded
                is_final = last_step and not parse_tool_calls(a["text"])["tool_calls"]
                a["v2_problems"] = check_corrected_step(a["text"], tool_schemas=t["tools"], history_messages=history,
                                                        is_final=is_final, language=language_of(t["messages"]))
                v2 += not a["v2_problems"]
                for problem in a["v2_problems"][:1]:  # why attempts fail, for the metrics
                    self.v2_reasons[problem.split(":")[0][:60]] += 1
            cd["attempts"] = [a for a in cd["attempts"] if not a["v2_problems"]]
        c["verifier_v2_pass"] += v2
        cands = [cd for cd in cands if cd["attempts"]]
        if self.cfg["verifier_llm"] and cands and self.verifier_roles:
            flat = [(cd, a) for cd in cands for a in cd["attempts"]]
            requests = [{"history": self._history(cd), "step": cd["traj"]["actions"][cd["step"]], "corrected": a["text"],
                         "verdict": cd["verdict"], "language": language_of(cd["traj"]["messages"])} for cd, a in flat]
            verdicts = ray.get(self._role().verify.remote(requests))
            for (cd, a), v in zip(flat, verdicts):
                a["v1"] = bool(v and v["consistent"])
                a["v3"] = bool(v and v["plausible"])
            c["verifier_unparsable"] += sum(v is None for v in verdicts)
            c["verifier_v1_pass"] += sum(a["v1"] for _, a in flat)
            c["verifier_v3_pass"] += sum(a["v3"] for _, a in flat)
            for cd in cands:
                cd["attempts"] = [a for a in cd["attempts"] if a["v1"] and a["v3"]]
            cands = [cd for cd in cands if cd["attempts"]]
        c["verifier_pass"] += len(cands)
        return cands

    def _contexts(self, cd) -> tuple[list[int], list[int]]:
        """h_k (the original context, generation prompt included) and c_k (h_k with a
        guidance message carrying the Validator's diagnosis before the generation prompt)."""
        t, k = cd["traj"], cd["step"]
        start = t["turn_spans"][k][0]
        h = list(t["ids"][:start])
        history = self._history(cd)
        gp = self.renderer.generation_prompt_ids(history)
        lang = language_of(t["messages"])
        note = {"role": "user", "content": load_prompt("guidance", lang).format(
            diagnosis=cd["verdict"].get("diagnosis", ""), suggest_next=cd["verdict"].get("suggest_next", "")).strip()}
        base = h[:len(h) - len(gp)]
        guided = base + self.renderer.messages_ids(history, [note]) + self.renderer.generation_prompt_ids(history + [note])
        return h, guided

    def _gate(self, cands, c):
        if not cands:
            return []
        flat = []
        for cd in cands:
            cd["h"], cd["c"] = self._contexts(cd)
            flat += [(cd, a) for a in cd["attempts"]]
        requests = [(cd["h"], a["ids"]) for cd, a in flat] + [(cd["c"], a["ids"]) for cd, a in flat]
        scores = ray.get(self.gate.score_many.remote(requests))
        n = len(flat)
        passed = 0
        for i, (cd, a) in enumerate(flat):
            a["lp_h"], a["lp_c"] = scores[i], scores[n + i]
            a["ppl"] = perplexity(a["lp_h"])
            a["gate_pass"] = passes_gate(a["ppl"], self.cfg["ppl_threshold"])
            passed += a["gate_pass"]
        c["gate_scored"] += n
        c["gate_pass"] += passed
        self.all_ppls = [a["ppl"] for _, a in flat]
        kept = []
        for cd in cands:
            ok = [a for a in cd["attempts"] if a["gate_pass"]]
            if ok:
                cd["best"] = min(ok, key=lambda a: a["ppl"])
                kept.append(cd)
        return kept

    def _select(self, cands, c):
        per_group: Counter = Counter()
        accepted = []
        for cd in cands:  # already in candidate order within each group
            if per_group[cd["group"]] < self.cfg["max_accepted_per_group"]:
                per_group[cd["group"]] += 1
                accepted.append(cd)
        c["accepted"] += len(accepted)
        return accepted

    def _continue(self, accepted, c, version, round_, groups):
        if not accepted:
            return []
        requests = []
        next_index = {gi: max(t["sample_index"] for t in g) + 1 for gi, g in enumerate(groups)}
        for cd in accepted:
            t, k, best = cd["traj"], cd["step"], cd["best"]
            start = t["turn_spans"][k][0]
            w, wstats = token_weights(best["lp_c"], best["lp_h"], self.cfg["eps_cal"])
            cd["wstats"] = wstats
            if "replace_index" in cd:
                idx = cd["replace_index"]
            else:
                idx = next_index[cd["group"]]
                next_index[cd["group"]] += 1
            spec = {"task_id": t["task_id"], "sample_index": idx, "seed": t.get("seed", 0), "round": f"{round_}-rti",
                    "split": t.get("split", "train"), "group": cd["group"]}
            requests.append({
                "spec": spec, "actions": t["actions"][:k], "messages": self._history(cd),
                "prefix": {key: t[src][:start] for key, src in (("ids", "ids"), ("loss_mask", "loss_mask"),
                                                                ("logprobs", "logprobs"), ("token_weight", "token_weight"))},
                "turn_spans": t["turn_spans"][:k], "version": version,
                "corrected": {"ids": best["ids"], "logprobs": best["lp_h"], "token_weight": w}})
        n = len(self.runners)
        outs = ray.get([self.runners[i].continue_from.remote(requests[i::n], self.sampling) for i in range(n) if requests[i::n]])
        by_index = {}
        for i, out in enumerate(outs):
            for req, res in zip(requests[i::n], out):
                by_index[id(req)] = res
        rescued = []
        for cd, req in zip(accepted, requests):
            res = by_index[id(req)]
            if "replay_error" in res:
                c["replay_errors"] += 1
                continue
            res.update(group=cd["group"], source_index=cd.get("source_index", cd["traj"]["sample_index"]),
                       gate_ppl=cd["best"]["ppl"], intervened=True, weight_stats=cd["wstats"],
                       depth=cd["traj"].get("depth", -1) + 1, diagnosis=cd["verdict"].get("diagnosis", ""))
            rescued.append(res)
        c["continued"] += len(rescued)
        c["continuation_success"] += sum(t["reward"] >= 1.0 for t in rescued)
        return rescued

    def _metrics(self, c, cands, rescued, ppls, before, after) -> dict:
        def learnable(g):
            r = [t["reward"] for t in g]
            return max(r) - min(r) > 1e-9
        m = {f"rti/{k}": c[k] for k in STAGES}
        m["rti/provider"] = self.cfg["roles"] if self.cfg["roles"] in ("self", "rules") else "model"
        m["rti/frac_triggered"] = c["triggered_groups"] / max(c["groups"], 1)
        m["rti/continuation_success_rate"] = c["continuation_success"] / c["continued"] if c["continued"] else float("nan")
        m["rti/frac_learnable_before"] = float(np.mean([learnable(g) for g in before])) if before else 0.0
        m["rti/frac_learnable_after"] = float(np.mean([learnable(g) for g in after])) if after else 0.0
        all_ppls = getattr(self, "all_ppls", [])
        m["rti/ppl_all"] = [round(p, 3) for p in all_ppls if math.isfinite(p)]
        m["rti/mean_ppl_accepted"] = float(np.mean(ppls)) if ppls else float("nan")
        ws = [t["weight_stats"] for t in rescued]
        m["rti/mean_abs_log_rho"] = float(np.mean([w["mean_abs_log_rho"] for w in ws])) if ws else float("nan")
        m["rti/weight_clip_frac"] = float(np.mean([w["clip_frac"] for w in ws])) if ws else float("nan")
        m["rti/extra_gen_tokens"] = int(sum(t["gen_tokens"] for t in rescued))
        m["rti/v2_reject_reasons"] = dict(self.v2_reasons)
        self.all_ppls, self.v2_reasons = [], Counter()
        return m
