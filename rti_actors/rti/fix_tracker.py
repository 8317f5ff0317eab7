"""``AcceptedFixes``: the accepted fixes re-scored under the current weights (RTI paper, Fig. 5a).

The gate accepts a fix when the behaviour policy finds it plausible enough (PPL <= delta);
training on the rescued trajectory should make the policy find it more plausible still.
Re-scoring the same fixes after each update shows whether it does: ``rti/ppl_fixes_now``
should fall below ``rti/ppl_fixes_at_gate``. The set is the first ``cap`` fixes accepted
(``interventions(tracked_fixes=...)``), never replaced, so once it is full every point of
the curve averages the same fixes; each re-score costs one scoring pass over their contexts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np

from rti_actors.rti.gate import perplexity
from rti_actors.rti.pipeline import _call
from rti_actors.trajectory import Trajectory


@dataclass
class TrackedFix:
    """One accepted fix as the gate scored it: the rewrite's ids after the context h_k."""

    context: list[int]   # h_k: every token before the fix, turn k's generation prompt included
    fix: list[int]       # the rewrite's ids as trained, end-of-turn token included
    ppl_at_gate: float   # its PPL under the weights that accepted it
    iteration: int       # the training iteration (metrics row) that accepted it


class AcceptedFixes:
    def __init__(self, cap: int, fixes: list[TrackedFix] | None = None):
        self.cap = cap
        self.fixes: list[TrackedFix] = list(fixes or [])[:cap]

    def add(self, trajectories: Iterable[Trajectory], iteration: int) -> int:
        """Track the fixes carried by the rescued ones among ``trajectories`` while there is
        room; returns how many were added. A rescued trajectory's turn ``intervened_step`` is
        the fix: the continuation put the rewrite's ids there right after the source's h_k,
        so ``ids[:start]`` and ``ids[start:end]`` are exactly the pair the gate scored."""
        added = 0
        for t in trajectories:
            if len(self.fixes) >= self.cap:
                break
            if not t.intervened or t.gate_ppl is None or not math.isfinite(t.gate_ppl):
                continue  # a non-finite PPL (delta = inf accepts it) would only hide the mean
            start, end = t.turn_spans[t.intervened_step]
            self.fixes.append(TrackedFix(list(t.ids[:start]), list(t.ids[start:end]), float(t.gate_ppl), iteration))
            added += 1
        return added

    def rescore(self, gate) -> dict:
        """Score every tracked fix through ``gate`` (the pipeline's gate: an actor or an
        in-process object with ``score_many``), i.e. on the engines that hold the current
        weights once they are published, at the gate's temperature."""
        m = {"rti/fixes_tracked": len(self.fixes), "rti/ppl_fixes_at_gate": float("nan"),
             "rti/ppl_fixes_now": float("nan")}
        if not self.fixes:
            return m
        scores = _call(gate, "score_many", [(f.context, f.fix) for f in self.fixes])
        now = [perplexity(lps) for lps in scores]
        m["rti/ppl_fixes_at_gate"] = float(np.mean([f.ppl_at_gate for f in self.fixes]))
        finite = [p for p in now if math.isfinite(p)]
        m["rti/ppl_fixes_now"] = float(np.mean(finite)) if finite else float("nan")
        return m

    # ---- saved with the driver's state, so a resumed run continues the same curve ----------
    def to_dict(self) -> dict:
        return {"cap": self.cap, "fixes": [asdict(f) for f in self.fixes]}

    @classmethod
    def from_dict(cls, d: dict) -> AcceptedFixes:
        return cls(int(d["cap"]), [TrackedFix(list(f["context"]), list(f["fix"]), float(f["ppl_at_gate"]),
                                              int(f["iteration"])) for f in d["fixes"]])
