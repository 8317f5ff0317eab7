"""The package's import structure: no module of ours imports another in a cycle, and none
imports one of ours inside a function (a deferred import hides a cycle or a layer broken
from the linter). The layer contracts themselves are pyproject.toml's [tool.importlinter],
run by `lint-imports` in scripts/test.sh."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[2]
OURS = ("rti_actors", "envs", "policies")
# weight_transfer subclasses vLLM's classes at its top, so it is loaded only where vLLM is
DEFERRED_ALLOWED = {("policies/engines/vllm_engine.py", "policies.engines")}


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for m in sorted(graph.modules):
        if m not in index:
            visit(m)
    return out


def test_no_module_of_ours_is_in_an_import_cycle():
    graph = grimp.build_graph(*OURS, exclude_type_checking_imports=True)
    assert _cycles(graph) == []
    graph.add_import(importer="rti_actors.options", imported="rti_actors.algorithm")  # the check can fail
    assert any("rti_actors.options" in c for c in _cycles(graph))


def _deferred_imports(path: Path) -> list[str]:
    """Our modules imported below the top level (TYPE_CHECKING blocks aside)."""
    tree, out = ast.parse(path.read_text()), []
    top = set(id(n) for n in tree.body)
    top |= {id(n) for node in tree.body if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in node.body}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            out += [n for n in names if n.split(".")[0] in OURS]
    return out


def test_no_module_of_ours_defers_an_import_of_ours():
    found = {(str(p.relative_to(REPO)), name) for pkg in OURS for p in sorted((REPO / pkg).rglob("*.py"))
             for name in _deferred_imports(p)}
    assert found == DEFERRED_ALLOWED


def test_the_scan_sees_an_import_inside_a_function(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import os\n\ndef f():\n    from rti_actors import config\n    import json\n")
    assert _deferred_imports(f) == ["rti_actors"]
