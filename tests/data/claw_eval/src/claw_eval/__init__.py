"""A stand-in for the ``claw_eval`` package of a Claw-Eval copy, written for this
project's tests: only the names the synthetic graders and the grading bridge use, with
the same constructors, so the bridge is exercised without the real copy."""
