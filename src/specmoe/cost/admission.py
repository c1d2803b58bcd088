"""Which public measurements of SD on MoE models (data/public_sd_moe.csv) the step model is scored
on: the admission rule, written and committed before any score under it was computed
(public_sd_moe.SOURCE.md, "The admission rule").

It is the first exclusion rule (column `scored`, kept for the record) with one criterion changed:
a parallel layout the source does not state is inferred where a practitioner would know it, and
the evidence is recorded per row (`layout_evidence`):

- stated: the source gives pure tensor parallelism for this measurement;
- same publisher: another row of the collection from the same publisher (the source address's
  repository owner), for the same checkpoint and GPU, states pure TP, one value (a row that
  names no checkpoint, `hf_id` empty, has no "same checkpoint": it takes no other's TP);
- one TP fits: of TP 1, 2, 4, 8 that split the model (hfconfig.tp_problems) and that one node of
  the GPU holds, exactly one fits the weights within the engines' default memory share
  (ENGINE_MEMORY_SHARE; both vLLM and SGLang default to pure TP given a TP). One GPU's memory is
  the one `specmoe predict` and the GPU preflight budget (gpu_memory: costmodel.capacity of the
  GPU's entry, shipped or in the public hardware file), its GPUs per node data/node_memory.csv's.
  This needs the row's config.json (the curator's `config`).

Anything else (expert parallelism, PD disaggregation, a layout neither stated nor inferred) fails
criterion 6 as before. The admitted TP is `tp_admitted`; `admitted` is "yes" or "no: " and the
first criterion the row fails.

Amended 2026-12-07, after the scores under the rule were first computed: the rule read each GPU's
memory from node_memory.csv, the datasheet's GB taken as 10^9 bytes (141 GB for an H200), not the
memory predict and the GPU preflight read (the shipped table's 143,766 MiB, 150.7 GB, as CUDA
reports an H200's). Read as predict reads it, 0.9 of one H200 node (1,085 GB) holds Kimi-K2's
1,029 GB of fp8 weights at TP 8 only, so the 35 Kimi-K2 rows of S29 have TP 8 inferred and seven
of them, the chains of K = 3, are admitted: S29-kimik2-gsm8k-s3t1d4, S29-kimik2-math500-s3t1d4,
S29-kimik2-mtbench-s3t1d4, S29-kimik2-humaneval-s3t1d4, S29-kimik2-livecodebench-s3t1d4,
S29-kimik2-financeqa-s3t1d4 and S29-kimik2-gpqa-s3t1d4 (public_sd_moe.SOURCE.md, "Amendment of
2026-12-07"). No other row's admission or TP changes; the layout evidence of the other
H200 rows now gives 150.7 GB.
"""

from __future__ import annotations

import csv
import re
from importlib import resources
from pathlib import Path

from ..checks.preflight import GPU_MEMORY_UTILIZATION, weight_bytes
from ..errors import InputError
from .costmodel import dtype_bytes
from .hfconfig import load_config, tp_problems
from . import predictor, stepmodel
from .steptables import gpus_per_node

DATA = resources.files("specmoe") / "data"
REPO = Path(__file__).resolve().parents[3]
# The GPUs of the public measurements that the package does not ship (datasheet entries, as a
# --hardware-file; bench/public_coverage.py predicts the rows on them from it)
HARDWARE_FILE = str(DATA / "public_sd_moe_hardware.yaml")
MAX_K = 4  # the study publishes overlaps for draft steps 1..4 (predict's prior)
ENGINES = ("vllm", "sglang", "trtllm")
TPS = (1, 2, 4, 8)
GB = 1e9
# The share of each GPU's memory the engines take for weights and KV cache by default: vLLM's
# gpu_memory_utilization, the project's own engines' default and predict's.
ENGINE_MEMORY_SHARE = GPU_MEMORY_UTILIZATION


def weight_gb(config: str | Path, precision: str) -> float:
    """The checkpoint's weights in GB as served at `precision` ("auto": as vLLM's dtype auto serves
    it on a GPU, a float32 checkpoint in bf16, as predict and the GPU preflight price it): every
    layer's attention, shared and routed experts, the expert-free layers, and the embedding and
    LM head (one matrix where tied), as the GPU preflight counts them on one GPU
    (specmoe.checks.preflight.weight_bytes)."""
    return weight_bytes(load_config(config)[0], precision, 1) / GB


def gpu_memory(gpu: str) -> float:
    """One GPU's memory in GB as `specmoe predict` reads it for the rows' predictions
    (predictor.hardware over the public hardware file: costmodel.capacity, the memory CUDA
    reports where the shipped table gives it, else the datasheet's read as GiB, the GPU
    preflight's budget); 0: the GPU or its memory is not known."""
    try:
        hw = predictor.hardware(gpu, HARDWARE_FILE)[0]
    except InputError:
        return 0.0
    return hw.memory_bytes / GB


def fitting_tps(config: str | Path, precision: str, gpu: str) -> tuple[list[int], str]:
    """The TPs of one node that split the model and hold its weights, and the sum that says so."""
    if gpu not in gpus_per_node():
        return [], f"no GPUs per node for {gpu}"
    mem, per_node = gpu_memory(gpu), gpus_per_node()[gpu]
    if not mem:
        return [], f"no memory for {gpu}"
    w = weight_gb(config, precision)
    cfg = load_config(config)[0]
    ok = [t for t in TPS if t <= per_node and not tp_problems(cfg, t)
          and w / t <= ENGINE_MEMORY_SHARE * mem]
    return ok, (f"weights {w:.0f} GB; {ENGINE_MEMORY_SHARE:g} of {per_node} x {mem:.1f} GB "
                f"({gpu}) holds them at TP {', '.join(map(str, ok)) or 'none'}")


def publisher(url: str) -> str:
    m = re.match(r"https?://github\.com/([^/]+)/", url)
    return m[1].lower() if m else re.sub(r"^https?://(www\.)?", "", url).split("/")[0]


def layout(r: dict, table: list[dict]) -> tuple[str, str]:
    """(TP, evidence): the row's pure-TP degree where stated or inferred, else ("", why not)."""
    if r["parallel"] == "tp":
        return r["tp_pred"], "stated"
    if r["parallel"] != "not stated":
        return "", f"stated: {r['parallel']}"
    same = sorted({o["tp_pred"] for o in table
                   if r["hf_id"] and o["id"] != r["id"] and o["parallel"] == "tp"
                   and o["tp_pred"] and o["hf_id"] == r["hf_id"]
                   and o["hardware_pred"] == r["hardware_pred"]
                   and publisher(o["source_url"]) == publisher(r["source_url"])})
    if len(same) == 1:
        return same[0], (f"same publisher ({publisher(r['source_url'])}) states TP {same[0]} for "
                         f"{r['hf_id']} on {r['hardware_pred']}")
    if not r["config"] or not r["hardware_pred"]:
        return "", "not inferred: no config.json or GPU to size the weights by"
    try:
        ok, why = fitting_tps(REPO / r["config"], r["precision_pred"], r["hardware_pred"])
    except InputError as e:
        return "", f"not inferred: {e}"
    if len(ok) == 1:
        return str(ok[0]), f"one TP fits: {why}"
    return "", f"not inferred: {why}"


def priced(fmt: str) -> bool:
    if fmt == "auto":
        return True
    try:
        dtype_bytes(fmt)
    except InputError:
        return False
    return True


def rule(r: dict, tp: str | None = None) -> str:
    """'yes', or 'no: ' and the first criterion the row fails (public_sd_moe.SOURCE.md, in its
    order). `tp`: the layout's pure-TP degree (admission); None: the first rule's criterion 6,
    the layout as stated."""
    layout_ok = r["parallel"] == "tp" if tp is None else bool(tp)
    checks = [
        (r["lossless"] == "yes", "lossy acceptance (relaxed verification)"),
        (r["like_for_like"] == "yes", "baseline not like-for-like"),
        (r["metric_kind"] == "decode rate", f"metric: {r['metric_kind']}"),
        (r["gpu_stated"] == "yes", "GPU not stated for this measurement"),
        (r["gpu_class"] == "data centre", "consumer APU with unified memory"),
        (layout_ok, f"parallel layout: {r['parallel']}"
         + ("" if tp is None or r["parallel"] != "not stated" else ", not inferred")),
        (r["drafting"] == "chain", "tree drafting" if r["drafting"] == "tree"
         else "draft length not stated"),
        (r["drafting"] != "chain" or int(r["k_pred"]) <= MAX_K,
         f"K > {MAX_K} (the study publishes overlaps for {MAX_K} steps)"),
        (r["method_pred"] in stepmodel.FAMILIES, f"method {r['method_pred']} outside predict's"),
        (r["engine_pred"] in ENGINES, "engine not stated"),
        (priced(r["precision_pred"]), f"weight format {r['precision_pred']} not priced"),
        (bool(r["config"]), "no published config.json available offline"),
        (bool(r["hardware_pred"] and (tp if tp is not None else r["tp_pred"])
              and r["batch_pred"]), "setup incomplete"),
    ]
    for ok, reason in checks:
        if not ok:
            return f"no: {reason}"
    return "yes"


def admit(table: list[dict]) -> list[dict]:
    """Each row's `tp_admitted`, `layout_evidence` and `admitted`, in the table's order."""
    out = []
    for r in table:
        tp, evidence = layout(r, table)
        out.append({"id": r["id"], "tp_admitted": tp, "layout_evidence": evidence,
                    "admitted": rule(r, tp)})
    return out


def read_table() -> list[dict]:
    with open(str(DATA / "public_sd_moe.csv"), newline="") as f:
        return list(csv.DictReader(f))
