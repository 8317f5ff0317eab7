"""Rollout-Time Intervention on the all-fail groups of one iteration (docs/ALGORITHM.md).

For every group whose G rewards are all 0:
  1. candidates  — failed trajectories ordered by partial progress, then fewer turns, sent
                   through stages 2-5 in waves until the group has its fixes or none is left;
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

The stages call their collaborators (role providers, gate, env runners) through ``_call``,
which takes a Ray actor handle or a plain in-process object alike: the driver passes
actors, the unit tests run the same stages in one process.
"""

from __future__ import annotations

import math
import time
from collections import Counter

import numpy as np
import ray

from envs.tool_calls import parse_tool_calls
from policies.chat import TokenBuffer
from policies.engines import SamplingParams
from rti_actors.env_runner import Continuation, ReplayFailure, request_seed
from rti_actors.failover import as_members
from rti_actors.groups import all_failed, assemble, is_learnable
from rti_actors.rti.gate import passes_gate, perplexity, token_weights
from rti_actors.rti.records import Candidate, CorrectQuery, EpisodeText, ValidateQuery, VerifyQuery
from rti_actors.rti.roles import language_of, load_prompt
from rti_actors.rti.verifier_checks import check_corrected_step
from rti_actors.trajectory import EpisodeSpec, Trajectory


def _call(target, method: str, *args):
    fn = getattr(target, method)
    return ray.get(fn.remote(*args)) if hasattr(fn, "remote") else fn(*args)


def episode_text(t: Trajectory) -> EpisodeText:
    return EpisodeText(t.messages, t.actions, t.tools, language_of(t.messages))


# every per-stage counter, reported (as rti/<name>) even when it stayed at 0
STAGES = ("groups", "triggered_groups", "candidates", "waves", "validator_calls", "validator_unparsable", "validator_found_error",
          "corrector_attempts", "corrector_complete", "corrector_parsed", "verifier_v2_pass", "verifier_v1_pass",
          "verifier_v3_pass", "verifier_unparsable", "verifier_pass", "gate_scored", "gate_pass", "accepted",
          "accepted_second_fix", "continued", "continuation_success", "replay_errors", "continuation_infra_errors",
          "stale_candidates")


class Intervention:
    """The pipeline over one iteration's groups. ``roles``: providers of ``validate`` /
    ``correct`` (role actors, or the env's rule-based roles); ``verifiers``: role actors for
    V1/V3 (the policy by default, whoever validates); ``gate``: ``score_many``; ``runners``:
    ``continue_from`` (``failover.Members``, or a list of them); ``facts``: the env's
    ``verifier_facts()``."""

    def __init__(self, cfg: dict, *, roles: list, verifiers: list, gate, runners: list, renderer, sampling: SamplingParams,
                 seed: int, facts: dict | None = None):
        self.cfg = cfg
        self.roles, self.verifiers = list(roles), list(verifiers)
        self.gate = gate
        self.runners = runners
        self.renderer = renderer
        self.sampling = sampling
        self.seed = seed
        self.facts = facts
        self._rr = 0

    def _pick(self, providers: list):
        self._rr += 1
        return providers[self._rr % len(providers)]

    # ---- the pipeline ---------------------------------------------------------------------
    def run(self, groups: list[list[Trajectory]], *, version: int, round_: int,
            evidence: dict) -> tuple[list[list[Trajectory]], dict]:
        t0 = time.perf_counter()
        c, stats = Counter(), {"ppls": [], "v2_reasons": Counter()}
        triggered = [i for i, g in enumerate(groups) if all_failed(g)]
        c["groups"], c["triggered_groups"] = len(groups), len(triggered)
        pools = {}
        for gi in triggered:
            pool = [t for t in groups[gi] if t.num_turns and not (self.cfg["exclude_truncated"] and t.context_truncated)]
            pool.sort(key=lambda t: (-t.progress, t.num_turns, request_seed(self.seed, round_, t.task_id, t.sample_index)))
            pools[gi] = [Candidate(gi, t, episode_text(t), evidence[t.task_id]) for t in pool]
        # With asynchronous rollouts a candidate may have been sampled by older weights than
        # the roles and the gate now run: its gate log-probs are then the current policy's,
        # not its behaviour policy's. Counted, so a run can tell how often that happened.
        c["stale_candidates"] = sum(cd.traj.policy_version < version for p in pools.values() for cd in p)

        # Round 2+ (interventions_per_trajectory > 1): a rescued trajectory that still
        # failed goes through the pipeline again, on steps after its first fix, and the
        # result (carrying both fixes) takes its place.
        final: dict[tuple[int, int], Trajectory] = {}
        again: list[Candidate] = []  # rescued trajectories that still failed, for the next fix
        for depth in range(self.cfg["interventions_per_trajectory"]):
            accepted = self._first_fixes(pools, c, stats, round_) if depth == 0 else self._fixes(again, c, stats, round_)
            if depth:
                c["accepted_second_fix"] += len(accepted)
            for t in self._continue(accepted, c, version, f"{round_}-{depth}", groups):
                final[(t.group, t.sample_index)] = t
            again = [Candidate(t.group, t, episode_text(t), evidence[t.task_id], min_step=t.intervened_step + 1,
                               replace_index=t.sample_index, source_index=t.source_index)
                     for t in final.values() if t.reward <= 0 and t.depth == depth]
        rescued = list(final.values())
        out = assemble(groups, rescued, self.cfg["group_mode"])
        metrics = self._metrics(c, stats, rescued, groups, out)
        metrics["rti/seconds"] = time.perf_counter() - t0
        return out, metrics

    def _first_fixes(self, pools: dict[int, list[Candidate]], c: Counter, stats: dict, round_) -> list[Candidate]:
        """Candidates go through the stages in waves of ``candidates_per_wave`` per group,
        best first, until each group has ``max_accepted_per_group`` fixes or has no failed
        trajectory left; every wave is one batch per stage across groups."""
        need = dict.fromkeys(pools, self.cfg["max_accepted_per_group"])
        accepted = []
        while wave := [cd for gi in pools if need[gi] > 0
                       for cd in pools[gi][:self.cfg["candidates_per_wave"]]]:
            for gi in pools:
                if need[gi] > 0:
                    del pools[gi][:self.cfg["candidates_per_wave"]]
            c["candidates"] += len(wave)
            c["waves"] += 1
            for cd in self._fixes(wave, c, stats, round_):  # in candidate order within each group
                if need[cd.group] > 0:
                    need[cd.group] -= 1
                    accepted.append(cd)
        c["accepted"] += len(accepted)
        return accepted

    def _fixes(self, cands: list[Candidate], c: Counter, stats: dict, round_) -> list[Candidate]:
        """The candidates with a fix that passed every check, the lowest-PPL one as ``best``."""
        cands = self._validate(cands, c)
        cands = self._correct(cands, c, round_)
        cands = self._verify(cands, c, stats)
        return self._gate(cands, c, stats)

    def _validate(self, cands: list[Candidate], c: Counter) -> list[Candidate]:
        if not cands:
            return []
        queries = [ValidateQuery(cd.episode, cd.evidence, cd.min_step, self.cfg["max_validator_steps"]) for cd in cands]
        findings = _call(self._pick(self.roles), "validate", queries)
        c["validator_calls"] += sum(f.judged for f in findings)
        c["validator_unparsable"] += sum(f.unparsable for f in findings)
        kept = []
        for cd, f in zip(cands, findings):
            if f.step is not None:
                cd.step, cd.verdict = f.step, f.verdict
                kept.append(cd)
        c["validator_found_error"] += len(kept)
        return kept

    def _correct(self, cands: list[Candidate], c: Counter, round_) -> list[Candidate]:
        if not cands:
            return []
        queries = [CorrectQuery(cd.episode, cd.evidence, cd.step, cd.verdict) for cd in cands]
        seeds = [request_seed(self.seed, round_, "corrector", cd.traj.task_id, cd.traj.sample_index) for cd in cands]
        outs = _call(self._pick(self.roles), "correct", queries, self.cfg["corrector_attempts"],
                     self.cfg["corrector_temperature"], seeds)
        for cd, attempts in zip(cands, outs):
            cd.attempts = attempts
        c["corrector_attempts"] += sum(len(cd.attempts) for cd in cands)
        c["corrector_complete"] += sum(a.complete for cd in cands for a in cd.attempts)
        for cd in cands:
            cd.attempts = [a for a in cd.attempts if a.complete and len(a.ids) > 1]
        kept = [cd for cd in cands if cd.attempts]
        c["corrector_parsed"] += len(kept)
        return kept

    def _verify(self, cands: list[Candidate], c: Counter, stats: dict) -> list[Candidate]:
        if not self.cfg["verifier"]:
            return cands
        v2 = 0
        for cd in cands:
            t = cd.traj
            last_step = cd.step == t.num_turns - 1 and t.terminated
            history = cd.episode.history(cd.step)
            for a in cd.attempts:
                # a text-only rewrite of the turn that ended the episode is a final answer:
                # nothing runs after it, so every fact in it must already be grounded
                is_final = last_step and not parse_tool_calls(a.text)["tool_calls"]
                a.v2_problems = check_corrected_step(a.text, tool_schemas=t.tools, history_messages=history,
                                                     is_final=is_final, language=cd.episode.language,
                                                     facts=self.facts)
                v2 += not a.v2_problems
                for problem in a.v2_problems[:1]:  # why attempts fail, for the metrics
                    stats["v2_reasons"][problem.split(":")[0][:60]] += 1
            cd.attempts = [a for a in cd.attempts if not a.v2_problems]
        c["verifier_v2_pass"] += v2
        cands = [cd for cd in cands if cd.attempts]
        if self.cfg["verifier_llm"] and cands and self.verifiers:
            flat = [(cd, a) for cd in cands for a in cd.attempts]
            queries = [VerifyQuery(cd.episode.history(cd.step), cd.episode.actions[cd.step], a.text, cd.verdict,
                                   cd.episode.language, cd.evidence) for cd, a in flat]
            verdicts = _call(self._pick(self.verifiers), "verify", queries)
            for (cd, a), v in zip(flat, verdicts):
                a.v1, a.v3 = bool(v and v["consistent"]), bool(v and v["plausible"])
            c["verifier_unparsable"] += sum(v is None for v in verdicts)
            c["verifier_v1_pass"] += sum(a.v1 for _, a in flat)
            c["verifier_v3_pass"] += sum(a.v3 for _, a in flat)
            for cd in cands:
                cd.attempts = [a for a in cd.attempts if a.v1 and a.v3]
            cands = [cd for cd in cands if cd.attempts]
        c["verifier_pass"] += len(cands)
        return cands

    def contexts(self, cd: Candidate) -> tuple[list[int], list[int]]:
        """h_k (the original context, generation prompt included) and c_k (h_k with a
        guidance message carrying the Validator's diagnosis before the generation prompt)."""
        t, k = cd.traj, cd.step
        h = list(t.ids[:t.turn_spans[k][0]])
        history = cd.episode.history(k)
        gp = self.renderer.generation_prompt_ids(history)
        note = {"role": "user", "content": load_prompt("guidance", cd.episode.language).format(
            diagnosis=cd.verdict.get("diagnosis", ""), suggest_next=cd.verdict.get("suggest_next", "")).strip()}
        base = h[:len(h) - len(gp)]
        guided = base + self.renderer.messages_ids(history, [note]) + self.renderer.generation_prompt_ids(history + [note])
        return h, guided

    def _gate(self, cands: list[Candidate], c: Counter, stats: dict) -> list[Candidate]:
        if not cands:
            return []
        flat, requests = [], []
        for cd in cands:
            h, guided = self.contexts(cd)
            for a in cd.attempts:
                flat.append(a)
                requests.append((h, a.ids, guided))
        scores = _call(self.gate, "score_many", [(h, u) for h, u, _ in requests] + [(g, u) for _, u, g in requests])
        n = len(flat)
        for i, a in enumerate(flat):
            a.lp_h, a.lp_c = scores[i], scores[n + i]
            a.ppl = perplexity(a.lp_h)
            a.gate_pass = passes_gate(a.ppl, self.cfg["ppl_threshold"])
        c["gate_scored"] += n
        c["gate_pass"] += sum(a.gate_pass for a in flat)
        stats["ppls"] += [a.ppl for a in flat]
        kept = []
        for cd in cands:
            ok = [a for a in cd.attempts if a.gate_pass]
            if ok:
                cd.best = min(ok, key=lambda a: a.ppl)
                kept.append(cd)
        return kept

    def _continue(self, accepted: list[Candidate], c: Counter, version: int, round_: str,
                  groups: list[list[Trajectory]]) -> list[Trajectory]:
        if not accepted:
            return []
        requests, wstats = [], []
        next_index = {gi: max(t.sample_index for t in g) + 1 for gi, g in enumerate(groups)}
        for cd in accepted:
            t, k, best = cd.traj, cd.step, cd.best
            start = t.turn_spans[k][0]
            w, ws = token_weights(best.lp_c, best.lp_h, self.cfg["eps_cal"])
            wstats.append(ws)
            if cd.replace_index is not None:
                idx = cd.replace_index
            else:
                idx = next_index[cd.group]
                next_index[cd.group] += 1
            spec = EpisodeSpec(t.task_id, idx, t.seed, f"{round_}-rti", t.split)
            prefix = TokenBuffer(t.ids[:start], t.loss_mask[:start], t.logprobs[:start], t.token_weight[:start])
            requests.append(Continuation(spec, t.actions[:k], cd.episode.history(k), prefix, t.turn_spans[:k],
                                         t.turn_versions[:k], best.ids, best.lp_h, w, version))
        # one shard per live runner; a runner that dies has its shard played by another, with
        # the same seeds (from each continuation's spec), so the results do not change
        results = as_members(self.runners, "env runner").spread("continue_from", requests, self.sampling)
        rescued = []
        for cd, res, ws in zip(accepted, results, wstats):
            if isinstance(res, ReplayFailure):
                c["replay_errors"] += 1
                continue
            if res.infra_error:  # the env failed during the continuation: not a rollout
                c["continuation_infra_errors"] += 1
                continue
            res.intervened, res.group = True, cd.group
            res.source_index = cd.source_index if cd.source_index is not None else cd.traj.sample_index
            res.gate_ppl, res.weight_stats = cd.best.ppl, ws
            res.depth = cd.traj.depth + 1 if cd.traj.depth is not None else 0
            res.diagnosis = cd.verdict.get("diagnosis", "")
            rescued.append(res)
            # partial credit of the fixed run against its source: what a fix did when the
            # continuation still fails (progress is 0 for an env without partial credit)
            c["progress_source"] += cd.traj.progress
            c["progress_continued"] += res.progress
        c["continued"] += len(rescued)
        c["continuation_success"] += sum(t.reward >= 1.0 for t in rescued)
        return rescued

    def _metrics(self, c: Counter, stats: dict, rescued: list[Trajectory], before, after) -> dict:
        m = {f"rti/{k}": c[k] for k in STAGES}
        m["rti/provider"] = self.cfg["roles"] if self.cfg["roles"] in ("self", "rules") else "model"
        m["rti/frac_triggered"] = c["triggered_groups"] / max(c["groups"], 1)
        m["rti/continuation_success_rate"] = c["continuation_success"] / c["continued"] if c["continued"] else float("nan")
        for k in ("progress_source", "progress_continued"):  # means over the continued runs
            m[f"rti/{k}"] = c[k] / c["continued"] if c["continued"] else float("nan")
        m["rti/frac_learnable_before"] = float(np.mean([is_learnable(g) for g in before])) if before else 0.0
        m["rti/frac_learnable_after"] = float(np.mean([is_learnable(g) for g in after])) if after else 0.0
        m["rti/ppl_all"] = [round(p, 3) for p in stats["ppls"] if math.isfinite(p)]
        ppls = [t.gate_ppl for t in rescued]
        m["rti/mean_ppl_accepted"] = float(np.mean(ppls)) if ppls else float("nan")
        ws = [t.weight_stats for t in rescued]
        m["rti/mean_abs_log_rho"] = float(np.mean([w["mean_abs_log_rho"] for w in ws])) if ws else float("nan")
        m["rti/weight_clip_frac"] = float(np.mean([w["clip_frac"] for w in ws])) if ws else float("nan")
        m["rti/extra_gen_tokens"] = int(sum(t.gen_tokens for t in rescued))
        m["rti/v2_reject_reasons"] = dict(stats["v2_reasons"])
        return m
