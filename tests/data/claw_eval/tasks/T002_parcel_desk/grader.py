"""Synthetic grader (written for tests): the English twin reuses the Chinese grader."""

from claw_eval.graders.base import load_peer_grader

_Base = load_peer_grader("T001zh_parcel_desk")


class ParcelDeskGraderEN(_Base):
    pass
