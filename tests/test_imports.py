"""The library's import graph, read from the source (every import, at any depth of a function):
no circle, no Snakemake, and the analysis apart from the runtime (vLLM, torch, transformers)."""

import ast
from pathlib import Path

import specmoe

SRC = Path(specmoe.__file__).parent
RUNTIME_PACKAGES = {"torch", "vllm", "transformers"}
# Pure analysis: statistics, cost model, tables, figures, report. They must run where no engine is
# installed (the analysis environment).
ANALYSIS = ("routing.acceptance", "routing.bootstrap", "cost.costmodel", "cost.hfconfig",
            "routing.ipf", "routing.overlap", "routing.controls", "cost.plan", "checks.preflight",
            "measured.profiling", "measured.arms",
            "sources.prompts", "provenance", "sources.published", "checks.schema",
            "measured.sweep", "routing.synth", "routing.trace", "routing.unique", "cost.weights",
            "cost.stepmodel", "cost.steptables", "cost.predictor", "cost.admission", "paths", "names",
            "runs",
            "kinds",
            "report.bounds", "report.figures", "report.html", "report.measured",
            "report.prose", "report.registry", "report.replay", "report.runs", "report.tables",
            "stages.analysis", "stages.report", "measured.rules", "checks.drafters", "yamlfile",
            "contracts", "contracts.analysis", "contracts.report",
            "contracts.engines", "contracts.study", "cudagraphs")
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


def test_the_configuration_never_reaches_the_stages():
    """The configuration layer (config) reads what it needs of the prompts from their sources
    (sources.prompts, sources.studydata), not from a stage's module: it imported
    stages.traces, and through it the engines' stage code."""
    inside, _ = imports()
    assert sorted(m for m in closure(inside, "config") if m.startswith("stages")) == []


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


def test_the_snakemake_logger_plugin_imports_light():
    """src/snakemake_logger_plugin_specmoe, a module of its own beside the library: Snakemake
    imports every logger plugin for each command (to list --logger's choices), so at module level
    it imports the standard library and Snakemake's logger interface only; the library
    (`yamlfile`, its analysis side) only where a line is worded."""
    import sys

    plugin = SRC.parent / "snakemake_logger_plugin_specmoe" / "__init__.py"
    tree = ast.parse(plugin.read_text())
    top = {a.name.split(".")[0] for n in tree.body if isinstance(n, ast.Import) for a in n.names}
    top |= {n.module.split(".")[0] for n in tree.body if isinstance(n, ast.ImportFrom)}
    assert top - sys.stdlib_module_names == {"snakemake_interface_logger_plugins"}, top
    inner = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} - {
        n.module for n in tree.body if isinstance(n, ast.ImportFrom)}
    assert inner == {"specmoe.errors", "specmoe.yamlfile"}, inner


def test_an_analysis_job_imports_only_what_its_stage_uses():
    """Each analysis job is a process of its own (68 in the default run): the stages' module
    leaves pandas, scipy.stats, numba and pyarrow to the stages that use them, and the IPF job,
    which reads only JSON, loads none but numba."""
    import subprocess
    import sys

    heavy = ("pandas", "scipy.stats", "numba", "pyarrow", "matplotlib")
    code = ("import sys, json\nimport specmoe.stages.analysis\n"
            f"print(json.dumps([m for m in {heavy!r} if m in sys.modules]))\n"
            "from specmoe.routing import ipf\n"
            f"print(json.dumps([m for m in {heavy!r} if m in sys.modules]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["[]", '["numba"]']
