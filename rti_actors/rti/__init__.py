"""Rollout-Time Intervention: the method on top of the generic RL graph.

    pipeline.py         Intervention.run: the stages over one iteration's all-fail groups
    records.py          Candidate, Attempt and the queries the roles answer
    roles.py            RoleActor (a model plays the roles), RuleRoles (an env's rules)
    verdicts.py         parsing the Validator's and Verifier's JSON verdicts
    verifier_checks.py  the Verifier's deterministic checks (leaks, schema, grounding)
    gate.py             the PPL gate actor and the gate / token-weight math
    fix_tracker.py      the accepted fixes re-scored after every update (PPL falls?)
    prompts/            the role prompts (English and Chinese)

docs/ALGORITHM.md states the method and its defaults.
"""
