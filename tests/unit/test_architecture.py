"""docs/ARCHITECTURE.md's module map names every module of rti_actors, envs and policies
(an environment package by its folder, package __init__ files aside) and nothing that is
gone, so the map cannot drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _mapped(doc: str) -> set[str]:
    section = doc.split("## Module map", 1)[1].split("\n## ", 1)[0]
    names = set()
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = re.findall(r"`([^`]+)`", line.split(" | ")[0])
        folder = str(Path(cells[0]).parent)
        names |= {cells[0], *(f"{folder}/{c}" for c in cells[1:])}
    return names


def _modules() -> set[str]:
    out = set()
    for pkg in ("rti_actors", "policies"):
        out |= {str(p.relative_to(REPO)) for p in (REPO / pkg).rglob("*.py")
                if p.name != "__init__.py" or p.parent.name in ("rti_actors", "algorithms")}
    out |= {str(p.relative_to(REPO)) for p in (REPO / "envs").glob("*.py") if p.name != "__init__.py"}
    out |= {f"envs/{p.name}/" for p in (REPO / "envs").iterdir() if (p / "__init__.py").is_file()}
    out.add("rti_actors/rti/prompts/")
    return out


def test_the_module_map_names_every_module_and_only_those():
    doc = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    mapped, modules = _mapped(doc), _modules()
    assert not modules - mapped, f"modules missing from docs/ARCHITECTURE.md's module map: {sorted(modules - mapped)}"
    assert not mapped - modules, f"the module map names what is gone: {sorted(mapped - modules)}"


def test_the_map_reader_sees_a_row_with_several_files():
    doc = "## Module map\n\n| file | concept |\n|---|---|\n| `a/b.py`, `c.py` | x |\n\n## Next\n| `z.py` | y |\n"
    assert _mapped(doc) == {"a/b.py", "a/c.py"}
