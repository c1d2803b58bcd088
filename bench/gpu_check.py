"""Prepared device check (run on a GPU machine, not in CI): the CUDA side of kernel profiling.

vLLM is not on the lent GPU image and its CUDA wheels exceed what a run can carry, so this checks what
can be checked there: that torch.profiler's real CUDA output (kernel events, correlation ids, grid
sizes) goes through specmoe.measured.profiling the way the hand-written trace in the tests says. A tiny
Qwen3-MoE (transformers) runs decode (B x 1 token) and verify (B x K+1 tokens) forward passes on a KV
cache, labelled like kernelprof labels vLLM's; the parsed steps must hold kernels with grids, MoE time
inside the MoE blocks, and per-class shares that add up to 1.

    PYTHONPATH=src python3 bench/gpu_check.py --out $OUT/gpu_check.json
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import sys
import tempfile
from pathlib import Path


def main() -> int:
    import torch

    from specmoe.runtime import kernelprof, tiny

    from specmoe.measured import profiling

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="gpu_check.json")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test of the script itself")
    a = ap.parse_args()
    dev = a.device
    if dev == "cuda" and not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    arch = tiny.arch_from_dict({"kind": "moe", "hidden": 256, "layers": 4, "heads": 4,
                                "kv_heads": 2, "head_dim": 64, "num_experts": 64, "top_k": 8,
                                "expert_intermediate": 64})
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    model = tiny.build_model(arch, vocab_size=2048, seed=0).to(dev).to(dtype).eval()
    for block in kernelprof.moe_blocks(model):
        block.forward = kernelprof._labelled(block.forward,
                                             lambda *a, **kw: profiling.MOE_BLOCK)
    b, k = a.batch, a.k
    prompt = torch.randint(0, 2048, (b, 32), device=dev)
    with torch.no_grad():
        cache = model(prompt, use_cache=True).past_key_values

        def step(ntok: int) -> None:
            ids = torch.randint(0, 2048, (b, ntok), device=dev)
            with torch.profiler.record_function(profiling.label("target", b, b * ntok, b)):
                model(ids, past_key_values=copy.deepcopy(cache), use_cache=True)
            if dev == "cuda":
                torch.cuda.synchronize()

        for ntok in (1, k + 1):  # warm-up outside the profile
            step(ntok)
        acts = [torch.profiler.ProfilerActivity.CPU] + (
            [torch.profiler.ProfilerActivity.CUDA] if dev == "cuda" else [])
        with torch.profiler.profile(activities=acts) as prof:
            for _ in range(a.steps):
                step(1)
                step(k + 1)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "trace.json.gz"
        prof.export_chrome_trace(str(path))
        with gzip.open(path, "rt") as fh:
            trace = json.load(fh)
    steps = profiling.steps_from_chrome_trace(trace)
    dec = [s for s in steps if s.ntok == b]
    ver = [s for s in steps if s.ntok == b * (k + 1)]
    sms = torch.cuda.get_device_properties(0).multi_processor_count if dev == "cuda" else 0
    cmp = profiling.compare(profiling.mean_events(dec), profiling.mean_events(ver))
    from specmoe.runtime.engine import require_cuda
    from specmoe.errors import InputError

    try:  # the guard every GPU rule of the study's models runs first
        require_cuda("gpu_check")
        guard = True
    except InputError:
        guard = False
    checks = {
        "cuda_guard_passes": guard if dev == "cuda" else not guard,
        "steps_found": len(dec) == a.steps and len(ver) == a.steps,
        "kernels_in_every_step": all(s.events for s in steps),
        "grids_read": all(e.grid for s in steps for e in s.events
                          if not e.name.lower().startswith(("memcpy", "memset"))),
        "moe_kernels_inside_blocks": any(e.in_moe for s in steps for e in s.events),
        "shares_add_up": abs(sum(c["decode_share"] for c in cmp["classes"].values()) - 1) < 1e-9,
    }
    out = {"gpu": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu", "sm_count": sms,
           "torch": torch.__version__, "checks": checks, "moe_time_share": cmp["moe_time_share"],
           "moe_time_ratio": cmp["moe_time_ratio"], "dense_time_ratio": cmp["dense_time_ratio"],
           "te_profiled": cmp["te_profiled"],
           "grids": {"decode": profiling.grid_stats(dec, sms),
                     "verify": profiling.grid_stats(ver, sms)},
           "top_kernels": kernelprof.top_ops(dec, ver, n=15)}
    Path(a.out).write_text(json.dumps(out, indent=1, default=str))
    print(json.dumps({"checks": checks, "moe_time_share": out["moe_time_share"],
                      "te_profiled": out["te_profiled"]}))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
