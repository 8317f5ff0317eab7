"""Command-line options that several examples share, and what they become in a config."""

from __future__ import annotations


def add_opd_args(ap) -> None:
    """OPD's teacher: a model folder or an OpenAI-compatible endpoint, and the reward's weight."""
    ap.add_argument("--teacher-model", default=None, metavar="DIR",
                    help="opd: the teacher, a model folder (or built-in name) with the policy's tokenizer")
    ap.add_argument("--teacher-endpoint", default=None, metavar="URL",
                    help="opd: the teacher behind an OpenAI-compatible server that echoes prompt log-probs "
                         "(key from $RTI_TEACHER_API_KEY)")
    ap.add_argument("--teacher-endpoint-model", default="default", help="opd: the model name the endpoint serves")
    ap.add_argument("--opd-reward-weight", type=float, default=0.0,
                    help="opd: weight of the env reward's advantage beside the reverse KL (0: pure distillation)")


def opd_options(args) -> dict:
    """The ``opd(...)`` settings of ``add_opd_args``'s options."""
    return {"model": args.teacher_model, "endpoint": args.teacher_endpoint,
            "endpoint_model": args.teacher_endpoint_model, "reward_weight": args.opd_reward_weight}
