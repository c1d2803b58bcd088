"""Bad configurations stop when the workflow is parsed, with one line naming the entry and the value:
a corpus of them, each through `snakemake -n` (and so before any job)."""

from __future__ import annotations

import copy

import pytest
import yaml


from specmoe.checks import schema
from specmoe.config import problems
from wf import REPO, dry_runs, failure, snakemake

TINY_ARCH = {"kind": "moe", "hidden": 64, "layers": 1, "heads": 2, "kv_heads": 1, "head_dim": 32,
             "num_experts": 8, "top_k": 2, "expert_intermediate": 16}
BASE = {
    "ks": [3],
    "drafters": [{"name": "d", "source": "tiny", "steps": 2, "arch": {
        "kind": "dense", "hidden": 64, "layers": 1, "heads": 2, "kv_heads": 1, "head_dim": 32,
        "intermediate": 64}}],
    "models": [
        {"name": "t", "source": "tiny", "hardware": "CPU", "drafters": ["d"],
         "datasets": ["tinybench"], "steps": 2, "arch": TINY_ARCH},
        {"name": "s", "source": "synthetic", "hardware": "H100", "drafters": ["synth"],
         "datasets": ["synth"], "synthetic": {"num_experts": 16, "top_k": 2, "num_layers": 2},
         "dims": {"hidden": 256, "expert_intermediate": 64, "heads": 4, "kv_heads": 2,
                  "head_dim": 64, "num_layers": 2}},
    ],
}


def bad(edit):
    cfg = copy.deepcopy(BASE)
    edit(cfg)
    return cfg


CORPUS = [
    ("duplicate model", lambda c: c["models"].append(copy.deepcopy(c["models"][1])),
     "model name 's' is used by 2 entries"),
    ("synthetic top-k", lambda c: c["models"][1]["synthetic"].update(top_k=20),
     "model s: synthetic: top_k=20 exceeds num_experts=16"),
    ("tiny top-k", lambda c: c["models"][0]["arch"].update(top_k=9),
     "model t: top_k=9 must lie in 1..num_experts=8"),
    ("undefined hardware", lambda c: c["models"][1].update(hardware="H300"),
     "model s: hardware 'H300' is not defined"),
    ("dataset not in the prompt table", lambda c: c["models"][0].update(datasets=["mtbench"]),
     "model t: dataset 'mtbench' is not in the prompt table"),
    ("sweep point short of prompts", lambda c: c.update(sweep={"schedule": [
        {"batch": 8, "prompts": 4}]}), "sweep.schedule: batch 8 has 4 prompts"),
    ("undefined drafter", lambda c: c["models"][0].update(drafters=["nope"]),
     "model t: drafter 'nope' is not defined under 'drafters'"),
    ("head_dim vLLM-CPU cannot run", lambda c: c["models"][0]["arch"].update(head_dim=16),
     "model t: head_dim=16: vLLM's CPU attention needs a multiple of 32"),
    ("model named like a drafter", lambda c: c["drafters"].append(
        {**copy.deepcopy(c["drafters"][0]), "name": "s"}), "'s' is both a model and a drafter"),
    ("stickiness per layer", lambda c: c["models"][1]["synthetic"].update(stickiness=[0.1, 0.2, 0.3]),
     "model s: synthetic: stickiness has 3 values for 2 layers"),
    ("sd_check dataset", lambda c: c.update(tiny={"vocab_size": 300, "sd_check": {"dataset": "x"}}),
     "tiny.sd_check.dataset 'x' is not in the prompt table"),
    ("compare_with an unknown study model", lambda c: c["models"][1].update(
        compare_with="Qwen9-1T"), "model s: compare_with 'Qwen9-1T' is not a model of the study"),
    ("K twice", lambda c: c["models"][1].update(ks=[3, 3]), "model s: ks lists K=3 twice"),
    ("dtype without a peak", lambda c: c["models"][1].update(
        hardware="CPU", dims={"hidden": 64, "expert_intermediate": 16, "heads": 2, "kv_heads": 1,
                              "head_dim": 32, "dtype": "fp8", "num_layers": 2}),
     "model s: dims.dtype fp8 on hardware CPU, which has no peak_tflops.fp8"),
    ("downloaded model with a tiny drafter", lambda c: c["models"].append(
        {"name": "h", "source": "hf", "repo_id": "o/r", "drafters": ["d"],
         "datasets": ["tinybench"]}), "model h: drafter 'd' is a tiny drafter"),
    ("downloaded dataset not configured", lambda c: c["models"].append(
        {"name": "h", "source": "hf", "repo_id": "o/r", "drafters": ["m"],
         "datasets": ["mt-bench"]}) or c["drafters"].append(
        {"name": "m", "source": "self", "method": "mtp"}),
     "model h: dataset 'mt-bench' is neither under 'datasets' nor in the prompt table"),
    ("fp8 on hardware without fp8", lambda c: c["models"].append(
        {"name": "h", "source": "hf", "repo_id": "o/r", "drafters": ["m"], "hardware": "CPU",
         "precision": "fp8", "datasets": ["tinybench"]}) or c["drafters"].append(
        {"name": "m", "source": "self", "method": "mtp"}),
     "model h: precision fp8 on hardware CPU, which has no fp8 peak"),
    ("one repository at two revisions", lambda c: c["models"].extend([
        {"name": "h1", "source": "hf", "repo_id": "o/r", "revision": "a" * 40, "drafters": ["m"],
         "datasets": ["tinybench"]},
        {"name": "h2", "source": "hf", "repo_id": "o/r", "revision": "b" * 40, "drafters": ["m"],
         "datasets": ["tinybench"]}]) or c["drafters"].append(
        {"name": "m", "source": "self", "method": "mtp"}),
     "o/r is asked for at different revisions"),
    ("synthetic dims against the generator", lambda c: c["models"][1].update(
        dims={"hidden": 64, "expert_intermediate": 16, "heads": 2, "kv_heads": 1, "head_dim": 32,
              "num_experts": 32, "num_layers": 2}), "model s: dims.num_experts=32 contradicts synthetic.num_experts=16"),
    ("variant of an unknown model", lambda c: c["models"].append(
        {"name": "v", "source": "variant", "variant_of": "s", "drafters": ["d"],
         "datasets": ["tinybench"]}), "model v: variant_of 's' is not a tiny model"),
    ("variant with an architecture of its own", lambda c: c["models"].append(
        {"name": "v", "source": "variant", "variant_of": "t", "drafters": ["d"],
         "datasets": ["tinybench"], "arch": TINY_ARCH}), "model v: a variant takes 'arch' from t"),
    ("fp8 variant on a CPU", lambda c: c["models"].append(
        {"name": "v", "source": "variant", "variant_of": "t", "precision": "fp8", "drafters": ["d"],
         "datasets": ["tinybench"]}), "model v: precision fp8 needs a GPU"),
    ("TP on a tiny model", lambda c: c["models"][0].update(tp=4),
     "model t: tp 4: a tiny model is trained and served on one CPU worker"),
    ("TP on a tiny model's variant", lambda c: c["models"].append(
        {"name": "v", "source": "variant", "variant_of": "t", "tp": 2, "drafters": ["d"],
         "datasets": ["tinybench"]}), "model v: tp 2: a tiny model is trained and served on one"),
    ("variant on a dataset the prompt table lacks", lambda c: c["models"].append(
        {"name": "v", "source": "variant", "variant_of": "t", "precision": "bf16",
         "drafters": ["d"], "datasets": ["mtbench"]}),
     "model v: dataset 'mtbench' is not in the prompt table"),
]


def merged(cfg):
    """cfg over config.yaml, as `--configfile` merges it (lists replaced, mappings merged), and
    validated by the schema as the workflow does (its defaults filled)."""
    out = yaml.safe_load((REPO / "config.yaml").read_text())
    for k, v in cfg.items():
        out[k] = {**out[k], **v} if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    schema.check(out, REPO / "workflow/schemas/config.schema.yaml")
    return out


def test_the_base_config_is_consistent_and_each_case_is_caught():
    tables = {"tinybench", "heldout-code", "heldout-prose"}
    assert problems(merged(BASE), tables) == []
    for label, edit, expect in CORPUS:
        found = problems(merged(bad(edit)), tables)
        assert any(expect in line for line in found), (label, found)


def test_a_tiny_moe_without_its_k_of_n_is_refused():
    """A tiny MoE's experts have no default: its k of N unset, the granularity check read it as
    unknown and let compare_with a study model of another k of N pass, while training took 8 of
    64 from code. The schema requires them; given, the comparison of another k of N is refused."""
    from specmoe.errors import InputError

    sizes = ("num_experts", "top_k")
    unset = bad(lambda c: c["models"][0].update(
        compare_with="Qwen3-30B", arch={k: v for k, v in TINY_ARCH.items() if k not in sizes}))
    with pytest.raises(InputError, match=r"^config: models\[0\]\.arch \(model 't'\): missing key "
                       r"'num_experts' \(required for kind moe\)$"):
        merged(unset)
    given = bad(lambda c: c["models"][0].update(compare_with="Qwen3-30B"))
    assert any("compare_with 'Qwen3-30B' routes 8 of 128 experts, this model 2 of 8" in line
               for line in problems(merged(given), {"tinybench"}))


def test_a_models_tp_and_precision_have_one_default_in_the_schema_and_the_commands():
    """`specmoe te` and `predict` repeated the schema's models[].tp and precision defaults as
    literals: both read specmoe.names', which the schema's must equal."""
    from specmoe.cli import build_parser
    from specmoe.names import MODEL_PRECISION, MODEL_TP

    model = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())[
        "properties"]["models"]["items"]["properties"]
    assert (model["tp"]["default"], model["precision"]["default"]) == (MODEL_TP, MODEL_PRECISION)
    wanted = {"tp": MODEL_TP, "precision": MODEL_PRECISION}
    sub = next(a for a in build_parser()._actions if isinstance(a.choices, dict))
    for cmd, flags in (("te", ("tp",)), ("predict", ("tp", "precision"))):
        defaults = {a.dest: a.default for a in sub.choices[cmd]._actions}
        assert {f: defaults[f] for f in flags} == {f: wanted[f] for f in flags}, cmd


@pytest.mark.slow
def test_bad_configurations_stop_at_parse_time(tmp_path):
    """Cases through `snakemake -n`, in two copies of the workflow at a time (wf.dry_runs): exit
    status 1, the expected line, no job; the base configuration itself runs. Every fourth case
    (each costs a workflow parse; every case reaches `problems` in the test above, and the
    workflow calls that same check)."""
    def check(wd, case):
        if case is None:  # the base configuration itself runs
            r = snakemake(wd, "-n", configfile="base.yaml", check=False, timeout=120)
            return failure(r) if r.returncode else None
        label, edit, expect = case
        (wd / "bad.yaml").write_text(yaml.safe_dump(bad(edit)))
        r = snakemake(wd, "-n", configfile="bad.yaml", check=False, timeout=120)
        out = r.stdout + r.stderr
        if r.returncode == 0 or expect not in out or "Job stats" in out:
            return f"{label}: rc={r.returncode}, expected '{expect}'\n{out[-600:]}"

    failures = [f for f in dry_runs(tmp_path, [None, *CORPUS[::4]], check, BASE, "base.yaml")
                if f]
    assert not failures, "\n\n".join(failures)
    assert not list(tmp_path.glob("wf*/results"))


def test_config_files_have_no_duplicate_keys():
    """YAML keeps the last of two equal keys silently (the schema once had `dtype` twice)."""

    class Strict(yaml.SafeLoader):
        pass

    def no_duplicates(loader, node, deep=False):
        keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
        dup = {k for k in keys if keys.count(k) > 1}
        assert not dup, f"duplicate key(s) {dup} at line {node.start_mark.line + 1}"
        return loader.construct_mapping(node, deep)

    Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, no_duplicates)
    for path in [REPO / "config.yaml", *(REPO / "config").glob("*.yaml"),
                 *(REPO / ".test").glob("*/config.yaml")]:
        yaml.load(path.read_text(), Loader=Strict)


def test_every_configuration_key_is_documented():
    """config/README.md names every key of the schema (a key added without its documentation
    fails here)."""
    import re
    from pathlib import Path

    root = Path(__file__).parents[1]
    schema = yaml.safe_load((root / "workflow" / "schemas" / "config.schema.yaml").read_text())
    doc = (root / "config" / "README.md").read_text()
    documented = {w for quoted in re.findall(r"`([^`]+)`", doc)
                  for w in re.findall(r"[a-z_0-9]+", quoted)}
    defs = schema.get("$defs", {})

    def keys(node):
        if "$ref" in node:
            node = defs[node["$ref"].split("/")[-1]]
        for k, sub in (node.get("properties") or {}).items():
            yield k
            yield from keys(sub)
        for sub in (node.get("additionalProperties"), node.get("items")):
            if isinstance(sub, dict):
                yield from keys(sub)

    missing = sorted(set(keys(schema)) - documented)
    assert missing == []


def test_did_you_mean_compares_names_as_text():
    """A key YAML reads as a number (4090:) is compared as its text, not a crash of difflib."""
    assert schema.did_you_mean(4090, ["4080", "H100"]) == "4080"
    assert schema.did_you_mean("H10", [100, "H100"]) == "H100"
