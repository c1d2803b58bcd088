"""The library's import graph, read from the source (every import, at any depth of a function):
no circle, no Snakemake, and the analysis apart from the runtime (vLLM, torch, transformers)."""

import ast
from pathlib import Path

import specmoe

SRC = Path(specmoe.__file__).parent
RUNTIME_PACKAGES = {"torch", "vllm", "transformers"}
# Pure analysis: statistics, cost model, tables, figures, report. They must run where no engine is
# installed (the analysis environment).
ANALYSIS = ("routing.acceptance", "cost.costmodel", "cost.hfconfig", "routing.ipf",
            "routing.overlap", "routing.controls", "cost.plan", "checks.preflight",
            "measured.profiling",
            "sources.prompts", "provenance", "sources.published", "checks.schema",
            "measured.sweep", "routing.synth", "routing.trace", "routing.unique", "cost.weights",
            "cost.stepmodel", "cost.steptables", "cost.predictor", "paths", "names", "kinds",
            "report.figures", "report.html", "report.measured",
            "report.prose", "report.registry", "report.replay", "report.runs", "report.tables",
            "stages.analysis", "stages.report", "measured.rules", "checks.drafters", "yamlfile",
            "contracts", "contracts.analysis", "contracts.report",
            "contracts.engines")
# Packages of the library that are analysis through and through: every module in them is.
ANALYSIS_PACKAGES = ("routing", "cost", "measured")


def module_name(f: Path) -> str:
    return ".".join(f.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")


def imports() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(package modules each module imports, outside packages each module imports), modules
    named by their dotted path inside the package (e.g. "stages.analysis")."""
    inside, outside = {}, {}
    names = {module_name(f) for f in SRC.rglob("*.py")}
    for f in SRC.rglob("*.py"):
        me = module_name(f)
        pkg = me.split(".")[:-1] if f.name != "__init__.py" else me.split(".")
        deps, ext = set(), set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = pkg[:len(pkg) - (node.level - 1)] if node.level > 1 else pkg
                mod = [*base, *(node.module.split(".") if node.module else [])]
                for a in node.names:  # "from . import x": x may be a module or a name
                    sub = ".".join([*mod, a.name])
                    deps.add(sub if sub in names else ".".join(mod))
            elif isinstance(node, ast.ImportFrom) and node.module:
                ext.add(node.module.split(".")[0])
                if node.module.startswith("specmoe."):
                    deps.add(node.module.removeprefix("specmoe."))
            elif isinstance(node, ast.Import):
                ext |= {a.name.split(".")[0] for a in node.names}
        inside[me] = {d for d in deps if d and d != me}
        outside[me] = ext
    return inside, outside


def test_every_module_of_the_analysis_is_listed():
    inside, _ = imports()
    for m in ANALYSIS:
        assert m in inside, m
    for m in inside:
        if m.split(".")[0] in ANALYSIS_PACKAGES and "." in m:
            assert m in ANALYSIS, f"{m} lies in an analysis package but is not checked as analysis"


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
