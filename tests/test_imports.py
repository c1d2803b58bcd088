"""The library's import graph, read from the source (every import, at any depth of a function):
no circle, no Snakemake, and the analysis apart from the runtime (vLLM, torch, transformers)."""

import ast
from pathlib import Path

import specmoe

SRC = Path(specmoe.__file__).parent
RUNTIME_PACKAGES = {"torch", "vllm", "transformers"}
# Pure analysis: statistics, cost model, tables, figures, report. They must run where no engine is
# installed (the analysis and report environments).
ANALYSIS = ("acceptance", "captions", "costmodel", "figures", "hfconfig", "ipf", "measured",
            "overlap", "plan", "profiling", "prompts", "provenance", "published", "replay",
            "report", "stages", "sweep", "synth", "tables", "trace", "unique", "weights")


def imports() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(package modules each module imports, outside packages each module imports)."""
    inside, outside = {}, {}
    for f in SRC.glob("*.py"):
        deps, ext = set(), set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                deps |= ({node.module.split(".")[0]} if node.module
                         else {a.name for a in node.names})
            elif isinstance(node, ast.ImportFrom) and node.module:
                ext.add(node.module.split(".")[0])
            elif isinstance(node, ast.Import):
                ext |= {a.name.split(".")[0] for a in node.names}
        inside[f.stem], outside[f.stem] = deps, ext
    return inside, outside


def closure(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for d in graph.get(todo.pop(), ()):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


def test_no_import_circle():
    inside, _ = imports()
    circles = sorted(m for m in inside if m in closure(inside, m))
    assert circles == []


def test_the_library_never_imports_snakemake():
    _, outside = imports()
    assert sorted(m for m, ext in outside.items() if "snakemake" in ext) == []


def test_the_analysis_never_reaches_the_runtime():
    """Not even lazily, and not through another module of the package."""
    inside, outside = imports()
    for m in ANALYSIS:
        reached = {m} | closure(inside, m)
        heavy = {(r, p) for r in reached for p in outside[r] & RUNTIME_PACKAGES}
        assert not heavy, (m, sorted(heavy))
