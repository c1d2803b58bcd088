"""The step model's shipped tables of engine- and kernel-level measurements (package data, each
with its SOURCE note under data/): the SD loop's overhead per iteration by engine
(engine_overhead.csv), kernel launches per layer by block and attention kind as vLLM's model code
runs them (kernels_per_layer.csv), the public grouped/dense fp8 GEMM bandwidths of DeepSeek-V3
shapes and fused-MoE kernel times that bound the MoE kernel's efficiency (moe_gemm_bandwidth.csv,
moe_kernel_times.csv), public batch-1 decode times without SD that check the decode step
(decode_batch1.csv), and each GPU's GPUs per node (node_memory.csv; a GPU's memory is its hardware
entry's, costmodel.capacity). Read once per process; nothing here is fitted."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from ..errors import InputError

ENGINES = ("vllm", "sglang", "trtllm", "other")
ROLES = ("value", "spread", "unpriced")  # engine_overhead.csv's roles (engine_overheads)
KERNEL_CLASSES = ("dense", "moe", "attention", "state", "sampling")
# the fused MoE kernel's batch-1 shapes: a masked grouped GEMM with a few tokens per expert, or a
# dense GEMM of M <= 256 rows (the benchmark's decoding shapes)
SMALL_M = 256


def _rows(name: str) -> list[dict]:
    p = resources.files("specmoe") / "data" / name
    if not p.is_file():
        raise InputError(f"no packaged table {name!r}")
    with p.open(newline="") as f:
        return list(csv.DictReader(f))


@dataclass(frozen=True)
class EngineOverhead:
    """The SD loop's overhead per iteration of one engine, in us: its point value, and the range
    predict draws it from (the spread of the sources; `sourced` False where no source measures
    it and the range is the largest the table holds, from 0); `measured` True only where a row
    measures the loop against plain decoding (role `value`), and `note` says where it comes
    from (predict states it as a caveat where it is not measured)."""
    engine: str
    value: float
    low: float
    high: float
    sourced: bool
    note: str
    measured: bool = False


@lru_cache(maxsize=1)
def engine_overheads() -> dict[str, EngineOverhead]:
    """Per engine (ENGINES): rows of role `value` measure the loop's overhead; the least is the
    value and the range runs from 0 (each value includes a drafter forward that the draft cost
    counts again, so it bounds the loop's own overhead from above) to the largest. Rows of role
    `spread` measure how much it changes between versions of one engine: where an engine has no
    `value` row, its range is 0 to that spread. An engine without any row takes 0 to the largest
    value in the table, unsourced. Rows of role `unpriced` measure the loop under a condition
    the step model does not price (unpriced_overheads): they size no range."""
    rows = _rows("engine_overhead.csv")
    for r in rows:
        if r["engine"] not in ENGINES or r["role"] not in ROLES:
            raise InputError(f"engine_overhead.csv: bad engine or role in {r}")
        float(r["value_us"])
    rows = [r for r in rows if r["role"] != "unpriced"]
    out = {}
    top = max(float(r["value_us"]) for r in rows)
    for e in ENGINES:
        vals = sorted(float(r["value_us"]) for r in rows if r["engine"] == e
                      and r["role"] == "value")
        spread = [float(r["value_us"]) for r in rows if r["engine"] == e
                  and r["role"] == "spread"]
        if vals:  # the least: the short-context measurement (the step model prices CONTEXT tokens)
            out[e] = EngineOverhead(e, vals[0], 0.0, max(vals + spread), True,
                                    f"{len(vals)} measurement(s), {vals[0]:g}-{vals[-1]:g} us",
                                    measured=True)
        elif spread:
            out[e] = EngineOverhead(e, max(spread) / 2, 0.0, max(spread), True,
                                    f"no measurement against plain decoding; 0 to the spread "
                                    f"between its SD loop versions ({max(spread):g} us)")
        else:
            out[e] = EngineOverhead(e, top / 2, 0.0, top, False,
                                    f"no source: 0 to the largest measured ({top:g} us)")
    return out


def unpriced_overheads() -> list[dict]:
    """The SD loop measured under conditions the step model does not price (role `unpriced` of
    engine_overhead.csv: e.g. the CUDA-graph downgrade speculative decoding triggers), each with
    its condition and source: the measured size of a missing effect, never drawn."""
    return [r for r in _rows("engine_overhead.csv") if r["role"] == "unpriced"]


@lru_cache(maxsize=1)
def kernels_per_layer() -> dict[str, dict[str, int]]:
    """block -> {kernel class: launches} (kernels_per_layer.csv)."""
    out: dict[str, dict[str, int]] = {}
    for r in _rows("kernels_per_layer.csv"):
        if r["class"] not in KERNEL_CLASSES:
            raise InputError(f"kernels_per_layer.csv: unknown class {r['class']!r}")
        n = int(r["kernels"])
        if n < 0:
            raise InputError(f"kernels_per_layer.csv: negative count in {r}")
        out.setdefault(r["block"], {})[r["class"]] = n
    return out


# tokens per expert (M k / N) from which a fused-MoE kernel's time measures its ceiling: below
# it most experts are read for one token and few CTAs are in flight (Little's law's regime)
CEILING_TOKENS_PER_EXPERT = 0.5
KERNEL_BYTES = {"bf16": 2, "fp8": 1}  # moe_kernel_times.csv's weight dtypes, bytes per weight


def fused_moe_fractions() -> list[tuple[dict, float, float]]:
    """Each row of moe_kernel_times.csv with its tokens per expert (M k / N) and the share of
    the HBM bandwidth its time implies: the unique experts of M tokens routed uniformly, each
    read once (gate, up and down: 3 x hidden x N per GPU weights), over the kernel's time."""
    from ..routing.unique import uniform_unique

    out = []
    for r in _rows("moe_kernel_times.csv"):
        if r["dtype"] not in KERNEL_BYTES:
            raise InputError(f"moe_kernel_times.csv: unknown dtype {r['dtype']!r} "
                             f"(one of {', '.join(KERNEL_BYTES)})")
        n, k, m = int(r["num_experts"]), int(r["top_k"]), int(r["m_tokens"])
        weights = 3 * int(r["hidden"]) * int(r["n_per_gpu"]) * KERNEL_BYTES[r["dtype"]]
        seconds = float(r["kernel_us"]) * 1e-6
        out.append((r, m * k / n, uniform_unique(n, k, m) * weights / seconds
                    / (float(r["gpu_hbm_gbs"]) * 1e9)))
    return out


@lru_cache(maxsize=1)
def moe_efficiency_bounds() -> tuple[float, float]:
    """The least and the most of the HBM bandwidth the MoE kernel reaches at decoding shapes:
    the least from the public fp8 GEMMs of DeepSeek-V3 shapes at M <= SMALL_M rows
    (moe_gemm_bandwidth.csv: bandwidth over the GPU's), the most from those and the public
    fused-MoE kernel times with at least CEILING_TOKENS_PER_EXPERT tokens per expert
    (fused_moe_fractions: vLLM's bf16 fused_moe on Mixtral-8x7B reaches 0.88 on an H100)."""
    fr = [float(r["memory_gbs"]) / float(r["gpu_hbm_gbs"])
          for r in _rows("moe_gemm_bandwidth.csv") if int(r["m_per_group"]) <= SMALL_M]
    if not fr:
        raise InputError("moe_gemm_bandwidth.csv: no row of M <= 256")
    fused = [f for _, tpe, f in fused_moe_fractions() if tpe >= CEILING_TOKENS_PER_EXPERT]
    return min(fr), max(fr + fused)


@lru_cache(maxsize=1)
def gpus_per_node() -> dict[str, int]:
    """GPU -> GPUs of one node: node_memory.csv, the one place they are read (the admission
    rule's layouts, and the TP whose all-reduces stay within one node's NVLink). It holds no
    memory: each GPU's is its hardware entry's (costmodel.capacity), the one predict reads."""
    out = {}
    for r in _rows("node_memory.csv"):
        per_node = int(r["gpus_per_node"])
        if per_node < 1:
            raise InputError(f"node_memory.csv: GPUs per node are positive ({r})")
        out[r["gpu"]] = per_node
    return out


@lru_cache(maxsize=1)
def decode_batch1() -> list[dict]:
    """Public batch-1 decode times without SD of configurations outside the scored rows."""
    rows = _rows("decode_batch1.csv")
    for r in rows:
        if not float(r["decode_ms_per_token"]) > 0:
            raise InputError(f"decode_batch1.csv: a decode time is > 0 ({r['id']})")
    return rows
