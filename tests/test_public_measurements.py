"""Public measurements of speculative decoding on MoE models (src/specmoe/data/public_sd_moe.csv):
the file parses, its setup columns are read from the sources' own words, `scored` is the written
exclusion rule (public_sd_moe.SOURCE.md) applied to them, every scored row's config.json is read
by `specmoe predict`, the hardware file's GPUs load with their caveat, and bench/public_coverage.py
scores a subset."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pandas as pd
import pytest

from specmoe.cost import predictor, stepmodel
from specmoe.cost.costmodel import dtype_bytes
from specmoe.errors import InputError
from specmoe.cost.hfconfig import dims_from_config
from wf import REPO

DATA = resources.files("specmoe") / "data"
HARDWARE_FILE = str(DATA / "public_sd_moe_hardware.yaml")
ENGINES = ("vllm", "sglang", "trtllm")
MAX_K = 4  # the study publishes overlaps for draft steps 1..4 (predict's prior)


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return pd.read_csv(str(DATA / "public_sd_moe.csv"), keep_default_na=False)


# --- the setup columns, read from the researcher's description columns --------------------------

def lossless(r) -> str:
    text = f"{r['method']} {r['credibility']}"
    return "no" if re.search(r"lossy|accept-threshold", text, re.I) else "yes"


def like_for_like(r) -> str:
    text = f"{r['dataset']} {r['credibility']}"
    return "no" if re.search(r"not like-for-like|DIFFERENT workloads", text) else "yes"


def metric_kind(r) -> str:
    m = r["metric"].split()[0]
    return {"per_user_tps": "decode rate", "total_tps": "decode rate",
            "latency": "latency including prefill", "unspecified": "not stated"}[m]


def gpu_stated(r) -> str:
    return "no" if "not stated" in r["gpu"] else "yes"


def gpu_class(r) -> str:
    return "consumer" if re.search(r"iGPU|unified memory", r["gpu"]) else "data centre"


def parallel(r) -> str:
    if "PD disaggregation" in r["engine"]:
        return "PD disaggregation with DP attention and EP"
    if "not stated" in r["tp"]:
        return "not stated"
    if re.search(r"EP([2-9]|\d\d)", r["tp"]):
        return "MoE expert parallelism"
    return "tp"


def drafting(r) -> tuple[str, int | None]:
    """('chain', K), ('tree', None) or ('not stated', None) from the k column: an integer, or
    SGLang's steps/topk/draft_tokens (a chain where topk is 1 and draft_tokens = steps + 1)."""
    k = r["k"]
    if k.isdigit():
        return "chain", int(k)
    m = re.match(r"steps=(\d+), topk=(\d+), draft_tokens=(\d+)", k)
    if not m:
        return "not stated", None
    steps, topk, tokens = map(int, m.groups())
    return ("chain", steps) if topk == 1 and tokens == steps + 1 else ("tree", None)


def engine(r) -> str:
    first = r["engine"].split()[0].lower()
    return {"vllm": "vllm", "sglang": "sglang", "tensorrt-llm": "trtllm"}.get(first, "")


def hardware(r) -> str:
    m = re.search(r"MI300X|GB200|GB300|B300|B200|H200|H100", r["gpu"])
    return m[0] if m else ""


def leading_int(text: str) -> str:
    m = re.match(r"(?:\w+=)?(\d+)\b(?! concurrent requests per rank)", text)
    return m[1] if m else ""


def method(r) -> str:
    m = r["method"].split()[0].lower()
    return "eagle3" if m.startswith("eagle3") else m


READ = {"lossless": lossless, "like_for_like": like_for_like, "metric_kind": metric_kind,
        "gpu_stated": gpu_stated, "gpu_class": gpu_class, "parallel": parallel,
        "drafting": lambda r: drafting(r)[0],
        "k_pred": lambda r: str(drafting(r)[1] or ""), "engine_pred": engine,
        "hardware_pred": hardware, "tp_pred": lambda r: leading_int(r["tp"]),
        "batch_pred": lambda r: leading_int(r["batch"]), "method_pred": method}


# --- the exclusion rule (public_sd_moe.SOURCE.md), in its order --------------------------------

def priced(fmt: str) -> bool:
    if fmt == "auto":
        return True
    try:
        dtype_bytes(fmt)
    except InputError:
        return False
    return True


def rule(r) -> str:
    """'yes', or 'no: ' and the first criterion the row fails."""
    checks = [
        (r["lossless"] == "yes", "lossy acceptance (relaxed verification)"),
        (r["like_for_like"] == "yes", "baseline not like-for-like"),
        (r["metric_kind"] == "decode rate", f"metric: {r['metric_kind']}"),
        (r["gpu_stated"] == "yes", "GPU not stated for this measurement"),
        (r["gpu_class"] == "data centre", "consumer APU with unified memory"),
        (r["parallel"] == "tp", f"parallel layout: {r['parallel']}"),
        (r["drafting"] == "chain", "tree drafting" if r["drafting"] == "tree"
         else "draft length not stated"),
        (r["drafting"] != "chain" or int(r["k_pred"]) <= MAX_K,
         f"K > {MAX_K} (the study publishes overlaps for {MAX_K} steps)"),
        (r["method_pred"] in stepmodel.FAMILIES, f"method {r['method_pred']} outside predict's"),
        (r["engine_pred"] in ENGINES, "engine not stated"),
        (priced(r["precision_pred"]), f"weight format {r['precision_pred']} not priced"),
        (bool(r["config"]), "no published config.json available offline"),
        (bool(r["hardware_pred"] and r["tp_pred"] and r["batch_pred"]), "setup incomplete"),
    ]
    for ok, reason in checks:
        if not ok:
            return f"no: {reason}"
    return "yes"


# --- tests ----------------------------------------------------------------------------------------

def test_every_row_has_its_quote_source_and_a_number(table):
    assert len(table) == 408 and table["id"].is_unique
    assert table["id"].str[:3].nunique() == 36
    for col in ("quote", "source_url", "source_title", "credibility"):
        assert (table[col].str.len() > 0).all(), col
    assert (pd.to_numeric(table["speedup"]) > 0).all()
    # rows of one source share one address (the source is the unit coverage counts)
    assert table.groupby(table["id"].str[:3])["source_url"].nunique().max() == 1


def test_the_setup_columns_are_read_from_the_descriptions(table):
    for _, r in table.iterrows():
        for col, read in READ.items():
            assert str(r[col]) == read(r), (r["id"], col, r[col], read(r))


def test_scored_is_the_written_rule(table):
    """`scored` re-derived from the setup columns by the rule as written, row by row."""
    for _, r in table.iterrows():
        assert r["scored"] == rule(r), (r["id"], r["scored"], rule(r))
    # the rule was fixed before any prediction (and before the second collection, S17-S36);
    # what it leaves, for the record
    assert sorted(table.loc[table["scored"] == "yes", "id"]) == [
        "S08-c1", "S10-bs1-s3t1d4", "S10-bs4-s3t1d4", "S19-vllm"]


def test_admitted_is_the_admission_rule(table):
    """`admitted`, `tp_admitted` and `layout_evidence` are specmoe.cost.admission's rule applied
    to the table (committed before any score under it); the first rule is its special case with
    the layout as stated; an inferred TP is one that splits the model and holds its weights."""
    from specmoe.cost import admission

    rows = table.to_dict("records")
    for r, a in zip(rows, admission.admit(rows)):
        for col in ("tp_admitted", "layout_evidence", "admitted"):
            assert str(r[col]) == a[col], (r["id"], col, r[col], a[col])
        assert admission.rule(r) == r["scored"], r["id"]
        if r["parallel"] == "tp":
            assert r["layout_evidence"] == "stated" and r["tp_admitted"] == r["tp_pred"]
        elif r["tp_admitted"]:
            assert re.match(r"(same publisher|one TP fits)", r["layout_evidence"]), r["id"]
        # an admitted row is scored by the first rule or has its layout inferred
        if r["admitted"] == "yes":
            assert r["scored"] == "yes" or r["layout_evidence"] != "stated"
    # the rule can infer: a model that only TP 8 holds on one node (Kimi-K2 in bf16 on H200)
    kimi = REPO / "src/specmoe/data/hf_configs/Kimi-K2.5.json"
    assert admission.fitting_tps(kimi, "bf16", "H200")[0] == []
    assert admission.fitting_tps(kimi, "fp8", "B200")[0] == [8]
    assert admission.fitting_tps(kimi, "fp8", "H100")[0] == []
    row = dict(rows[0], parallel="not stated", config=str(kimi), precision_pred="fp8",
               hardware_pred="B200", id="X")
    tp, why = admission.layout(row, [])
    assert tp == "8" and why.startswith("one TP fits")
    other = dict(row, id="Y", parallel="tp", tp_pred="4", precision_pred="fp8")
    assert admission.layout(row, [row, other])[0] == "4"  # the publisher's own statement first


def test_the_admission_rule_reads_the_memory_predict_reads():
    """The rule read an H200's memory as node_memory.csv's 141 GB (10^9 bytes), where predict and
    the GPU preflight read 143,766 MiB (what CUDA reports, hardware.csv), and found no TP of one
    H200 node holding Kimi-K2's 1,029 GB of fp8 weights. Each GPU's memory now has one home, its
    hardware entry (shipped, or the public hardware file), read through predict's own lookup;
    node_memory.csv keeps only the GPUs per node."""
    from specmoe.cost import admission, costmodel, steptables
    from specmoe.sources import published

    kimi = REPO / "src/specmoe/data/hf_configs/Kimi-K2.5.json"
    ok, why = admission.fitting_tps(kimi, "fp8", "H200")
    assert ok == [8], why
    with (DATA / "node_memory.csv").open() as f:
        header = f.readline().strip().split(",")
    assert not any("memory" in c or c.endswith(("_gb", "_gib", "_mib")) for c in header), header
    for gpu in steptables.gpus_per_node():
        hw = predictor.hardware(gpu, admission.HARDWARE_FILE)[0]
        assert hw.memory_bytes > 0, gpu  # the rule can size every GPU whose node it knows
        assert admission.gpu_memory(gpu) * admission.GB == pytest.approx(hw.memory_bytes), gpu
    for gpu, entry in published.gpus().items():  # the shipped GPUs: what CUDA reports
        assert admission.gpu_memory(gpu) * admission.GB == pytest.approx(
            costmodel.capacity(entry)[0]) == entry["cuda_memory_mib"] * 2**20, gpu
    assert admission.gpu_memory("no such GPU") == 0


def test_the_admission_amendment_names_every_row_it_admits(table):
    """The rule was committed before any score under it; its amendment of 2026-12-07 (the GPU's
    memory as predict reads it) must name each row it moved to admitted, in the rule's
    documentation (public_sd_moe.SOURCE.md) and in the code's."""
    from specmoe.cost import admission

    note = (DATA / "public_sd_moe.SOURCE.md").read_text()
    amendment = note.split("### Amendment of 2026-12-07", 1)[1].split("\n## ", 1)[0]
    rows = table.to_dict("records")
    moved = [r["id"] for r in rows if r["admitted"] == "yes" and r["scored"] != "yes"
             and r["layout_evidence"].startswith("one TP fits") and r["hardware_pred"] == "H200"]
    assert moved
    for rid in moved:
        assert rid in amendment and rid in admission.__doc__, rid


def test_a_given_acceptance_length_is_the_prediction_s(table):
    given = table[pd.to_numeric(table["acceptance_length"], errors="coerce").notna()]
    for _, r in given.iterrows():
        assert float(r["acceptance_low"]) == float(r["acceptance_high"]) == float(
            r["acceptance_length"]), r["id"]


def test_a_baseline_time_per_token_is_the_quote_s(table):
    """batch / the baseline's printed throughput, for the scored rows (the diagnosis's
    yardstick)."""
    with_base = table[table["baseline_ms_per_token"] != ""]
    assert set(with_base["id"]) == set(table.loc[table["scored"] == "yes", "id"])
    for _, r in with_base.iterrows():
        printed = [float(x) for x in re.findall(r"\d+\.?\d*", r["quote"].replace(",", ""))]
        implied = [1e3 * int(r["batch_pred"]) / x for x in printed if x > 0]
        assert any(abs(v - float(r["baseline_ms_per_token"])) < 1e-3 for v in implied), r["id"]


def test_every_scored_row_has_a_config_predict_reads(table):
    for _, r in table[table["scored"] == "yes"].iterrows():
        config = REPO / r["config"]
        fmt = None if r["precision_pred"] == "auto" else r["precision_pred"]
        dims = dims_from_config(config, dtype=fmt, tp=int(r["tp_pred"]))
        predictor.check_method(config, r["method_pred"])
        if r["study_model"]:
            predictor.check_study_model(r["study_model"], dims)
        assert dims.num_experts > dims.top_k and dims.vocab_size


def cli_args(r) -> list[str]:
    """`specmoe predict` for a row's setup, as a user would type it."""
    args = [str(REPO / r["config"]), "--hardware", r["hardware_pred"], "--tp", r["tp_pred"],
            "--precision", r["precision_pred"], "--draft-length", r["k_pred"], "--method",
            r["method_pred"], "--engine", r["engine_pred"], "--batch-sizes", r["batch_pred"]]
    if r["hardware_pred"] not in predictor.shipped_gpus():
        args += ["--hardware-file", HARDWARE_FILE]
    if r["acceptance_low"]:
        args += ["--acceptance-length", f"{r['acceptance_low']},{r['acceptance_high']}"]
    if r["study_model"]:
        args += ["--study-model", r["study_model"]]
    return args


def test_the_bench_predicts_what_the_command_does(table):
    """The B300 row through `specmoe predict --hardware-file` (a GPU outside the calibration,
    with both caveats) gives the bench's interval, draw for draw."""
    spec = importlib.util.spec_from_file_location("public_coverage",
                                                  REPO / "bench" / "public_coverage.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    r = table.set_index("id").loc["S08-c1"]
    out = subprocess.run([sys.executable, "-m", "specmoe", "predict", *cli_args(r), "--json"],
                         capture_output=True, text=True, timeout=600, check=True)
    cli = json.loads(out.stdout)
    mine = bench.predict_row(r, stepmodel.DRAWS)
    for key in ("speedup", "speedup_low", "speedup_high", "te"):
        assert cli[key] == pytest.approx(mine[key], rel=1e-9), key
    assert any("hardware B300 from" in c for c in cli["caveats"])
    assert any("GPU B300" in c for c in cli["caveats"]) and cli["calibration_distance"] == 6
    # MTP at K = 1 (every published TE is at K = 3) and DeepSeek's hidden size of 7,168
    assert "draft length K = 1: the study publishes TE at K = 3 only" in cli["caveats"]
    assert any(c.startswith("hidden size 7,168 outside") for c in cli["caveats"])
    assert "DSA attention: none in the calibration" in cli["caveats"]  # DeepSeek-V3.2's indexer
    # and its decode step (12 ms in the model) is longer than any calibrated one (5.2-11.8 ms)
    assert any(c.startswith("decode step at batch 1") for c in cli["caveats"])
    # and its MLA and indexer leave the experts a smaller share of that step than any calibrated
    assert any(c.startswith("MoE share of the decode step at batch 1") for c in cli["caveats"])


def test_the_hardware_file_gives_each_gpu_with_its_caveat():
    import yaml

    entries = yaml.safe_load(Path(HARDWARE_FILE).read_text())["hardware"]
    assert set(entries) == {"MI300X", "GB200", "B300", "GB300"}
    for name in entries:
        hw, caveats = predictor.hardware(name, HARDWARE_FILE)
        assert hw.hbm_bandwidth > 1e12 and hw.nvlink_bandwidth > 1e11
        assert hw.flops("bf16") > 1e14
        assert hw.flops("fp8") == pytest.approx(2 * hw.flops("bf16"), rel=1e-3)
        assert caveats and name in caveats[0]
    with pytest.raises(InputError, match="not in"):
        predictor.hardware("H20", HARDWARE_FILE)


def test_the_bench_scores_a_subset():
    """bench/public_coverage.py on one row of each scored source, few draws: per row the
    prediction with its interval beside the measurement, coverage by row and by source; with
    --loso each source's extra error is the other source's log error, and widens its interval."""
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "public_coverage.py"), "--json", "--loso",
         "--ids", "S08-c1,S10-bs1-s3t1d4", "--draws", "40"],
        capture_output=True, text=True, timeout=600, check=True)
    res = json.loads(out.stdout)
    assert [p["id"] for p in res["points"]] == ["S08-c1", "S10-bs1-s3t1d4"]
    for p in res["points"]:
        assert p["low"] <= p["predicted"] <= p["high"] and p["measured"] > 0
        assert p["inside"] == (p["low"] <= p["measured"] <= p["high"])
        assert p["cycle_implied"] == pytest.approx(
            sum(p["acceptance_length"]) / 2 / p["measured"], abs=1e-3)
    assert res["rows"] == 2 and res["sources"] == 2 and res["no_information"] == []
    assert res["coverage_rows"] == sum(p["inside"] for p in res["points"]) / 2
    assert 0 <= res["coverage_sources"] <= 1 and res["median_half_width_rel"] > 0
    # coverage and half-width at batch 1 and past it, over rows and over sources
    assert set(res["by_batch"]) == {"batch 1"}
    b1 = res["by_batch"]["batch 1"]
    assert b1["rows"] == 2 and b1["sources"] == 2
    assert b1["coverage_sources"] == res["coverage_sources"]
    assert set(res["median_log_error_by_engine"]) == {"vllm", "sglang"}
    s08, s10 = res["points"]
    assert res["loso"]["extra_log_sd"] == {"S08": pytest.approx(abs(s10["log_error"]), abs=1e-3),
                                           "S10": pytest.approx(abs(s08["log_error"]), abs=1e-3)}
    for before, after in zip(res["points"], res["loso"]["points"]):
        assert after["half_width_rel"] > before["half_width_rel"]


def test_the_bench_scores_the_admitted_rows_and_the_study_beside_its_baselines(table):
    """Only admitted rows (at their admitted TP) are scored; --study prints Table 10's
    leave-one-model-out TE beside the two baselines, whose errors it reports."""
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "public_coverage.py"), "--json", "--study",
         "--draws", "20"], capture_output=True, text=True, timeout=900, check=True)
    res = json.loads(out.stdout)
    assert sorted(p["id"] for p in res["points"]) == sorted(
        table.loc[table["admitted"] == "yes", "id"])
    st = res["study"]
    assert len(st["table"]) == 12
    for key, err in (("lomo", "lomo_mean_abs_error"), ("baseline_mean", "baseline_mean_abs_error"),
                     ("weight_model", "weight_model_mean_abs_error")):
        assert st[err] == pytest.approx(
            sum(abs(r[key] - r["published"]) for r in st["table"]) / 12, abs=2e-3), key
    bad = subprocess.run([sys.executable, str(REPO / "bench" / "public_coverage.py"), "--ids",
                          "S29-q30b-gsm8k-s3t1d4"], capture_output=True, text=True, timeout=600)
    assert bad.returncode != 0 and "not admitted rows" in bad.stderr


def test_a_row_without_information_is_counted_apart_not_as_covered(table):
    """Kimi-K2 on H200 at batch 8 (S29): TE's 95% interval spans [0.001, 1], so the speedup's
    [0.003, 3.27] is the clip's, not the model's, and every such row was scored 'inside' (8 of
    the 11 admitted rows, S08-c1 and seven S29 rows). point() carries no_information, and
    summarise counts such rows in no coverage, half-width or error, listing them apart."""
    spec = importlib.util.spec_from_file_location("public_coverage",
                                                  REPO / "bench" / "public_coverage.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    points = {r["id"]: bench.point(r, bench.predict_row(r, 40)) for _, r in bench.load(
        ["S29-kimik2-gsm8k-s3t1d4", "S10-bs1-s3t1d4"]).iterrows()}
    kimi, s10 = points["S29-kimik2-gsm8k-s3t1d4"], points["S10-bs1-s3t1d4"]
    assert kimi["no_information"] and kimi["inside"] is None and kimi["half_width_rel"] is None
    assert not s10["no_information"] and s10["inside"] is not None
    res = bench.summarise([kimi, s10])
    assert res["rows"] == 1 and res["coverage_rows"] == float(s10["inside"])
    assert res["no_information"] == ["S29-kimik2-gsm8k-s3t1d4"]
    assert res["median_half_width_rel"] == s10["half_width_rel"] and res["sources"] == 1
    assert res["by_batch"]["past batch 1"] == {"rows": 0,
                                               "no_information": ["S29-kimik2-gsm8k-s3t1d4"]}
    assert bench.loso_sizes([kimi, s10]) == {"S29": 0.0, "S10": 0.0}
    with pytest.raises(SystemExit, match="no scored row with information"):
        bench.summarise([kimi])


def test_the_outside_calibration_caveat_says_what_the_public_rows_show():
    """The caveat said public measurements outside the calibration 'mostly fall outside these
    intervals', while bench/public_coverage.py found every row with information inside (and
    most rows without information). It is read against the bench's own summary."""
    spec = importlib.util.spec_from_file_location("public_coverage",
                                                  REPO / "bench" / "public_coverage.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    res = bench.score(bench.load())
    [caveat] = [c for c in predictor.unvalidated(False, [1])
                if c.startswith("not validated outside the study's calibration")]
    assert res["coverage_rows"] >= 0.5 and "mostly fall outside" not in caveat, caveat
    assert res["rows"] < 10 and "too few to show these intervals hold" in caveat
    assert len(res["no_information"]) > res["rows"] and "at most of them TE's interval spans " \
        "its whole range" in caveat


def test_same_publisher_needs_a_checkpoint():
    """The inferred layout's 'same publisher' rule is the same checkpoint on the same GPU from
    the same publisher: two rows without a checkpoint (hf_id empty, as 10 rows are) matched as
    'the same checkpoint', so a row that names none took another's stated TP."""
    from specmoe.cost import admission

    rows = admission.read_table()
    base = next(r for r in rows if r["id"] == "S08-c1")
    stated = dict(base, id="X1", hf_id="", parallel="tp", tp_pred="8", hardware_pred="H200",
                  source_url="https://github.com/acme/a/issues/1")
    unknown = dict(base, id="X2", hf_id="", parallel="not stated", tp_pred="",
                   hardware_pred="H200", source_url="https://github.com/acme/b/pull/2",
                   config="")
    tp, why = admission.layout(unknown, [stated, unknown])
    assert tp == "" and not why.startswith("same publisher"), why
    # with the checkpoint named on both, the publisher's statement is taken
    named = [dict(r, hf_id="acme/model") for r in (stated, unknown)]
    assert admission.layout(named[1], named)[0] == "8"
    # and no row of the table changes: its stored admission is the rule's
    assert any(not r["hf_id"] for r in rows)  # rows without a checkpoint are there
    for r, a in zip(rows, admission.admit(rows)):
        assert (r["tp_admitted"], r["admitted"]) == (a["tp_admitted"], a["admitted"]), r["id"]
