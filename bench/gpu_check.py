"""Prepared device checks (run on a GPU machine, not in CI).

`kernels` (the default): the CUDA side of kernel profiling without vLLM. torch.profiler's real CUDA
output (kernel events, correlation ids, grid sizes) goes through specmoe.measured.profiling the way
the hand-written trace in the tests says: a tiny Qwen3-MoE (transformers) runs decode (B x 1 token)
and verify (B x K+1 tokens) forward passes on a KV cache, labelled like kernelprof labels vLLM's;
the parsed steps must hold kernels with grids, MoE time inside the MoE blocks, and per-class shares
that add up to 1.

    PYTHONPATH=src python3 bench/gpu_check.py --out $OUT/gpu_check.json

`smoke`: the study's GPU path in one command, on the first GPU a user has, before the study is
submitted (about ten minutes; vLLM's CUDA build, the `gpu` extra). Through the pipeline's own
stages: a small MoE target with a draft model captured twice over the same prompts, once with
enforce_eager=True and once with vLLM's defaults (CUDA graphs, torch.compile, async scheduling,
whatever runner vLLM picks), asserting the same expert ids on every committed token
(compare_committed); one kernel profile (batch 1) and one sweep point (batch 1). Each step's error is
recorded and the rest still run; the exit status is 0 only when every check holds.

    .venv/bin/python bench/gpu_check.py smoke --out-dir gpu_smoke

What runs without a GPU (tests/test_gpu_check.py): the argument parsing and compare_committed on
synthetic traces.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import sys
import tempfile
from pathlib import Path


# The smoke check's default pair: a small MoE (14.3B parameters, 60 experts of which 4 routed plus
# shared ones; 29 GB in bf16) and a draft model with its tokenizer.
SMOKE_TARGET = "Qwen/Qwen1.5-MoE-A2.7B-Chat"
SMOKE_DRAFTER = "Qwen/Qwen1.5-0.5B-Chat"


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", nargs="?", default="kernels", choices=("kernels", "smoke"))
    ap.add_argument("--out", default="gpu_check.json", help="kernels: the result file")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--device", default="cuda", help="kernels on cpu: a test of the script itself")
    ap.add_argument("--target", default=SMOKE_TARGET,
                    help="smoke: an MoE checkpoint (a directory or a hub repository id)")
    ap.add_argument("--drafter", default=SMOKE_DRAFTER,
                    help="smoke: a draft model with the target's tokenizer")
    ap.add_argument("--prompts", type=int, default=16, help="smoke: prompts captured")
    ap.add_argument("--max-tokens", type=int, default=64, help="smoke: tokens per prompt")
    ap.add_argument("--dataset", default="tinybench", help="smoke: of the embedded prompt table")
    ap.add_argument("--out-dir", default="gpu_smoke", help="smoke: traces, profile, sweep, logs")
    a = ap.parse_args(argv)
    if a.k < 1 or a.prompts < 1 or a.max_tokens < 1:
        ap.error("--k, --prompts and --max-tokens must be at least 1")
    return a


def committed_sequences(tr) -> dict[int, tuple]:
    """Per request, its committed tokens in order (each window's last committed token and its
    accepted drafts): (token ids, expert ids sorted within each layer)."""
    import numpy as np

    from specmoe.routing.trace import STATUS

    keep = np.isin(tr.columns["status"], [STATUS.index("committed"), STATUS.index("accepted")])
    req = tr.columns["request"]
    order = np.lexsort((tr.columns["position"], tr.columns["step"], req))
    order = order[keep[order]]
    experts = np.sort(tr.experts[order], axis=-1)
    out = {}
    for r in np.unique(req[order]):
        m = req[order] == r
        out[int(r)] = (tr.columns["token_id"][order][m], experts[m])
    return out


def compare_committed(a, b) -> dict:
    """Two traces of the same prompts: do their committed tokens, position by position along
    each request, carry the same token and the same experts in every layer? Windows may split a
    sequence differently (acceptance may differ); the committed sequence may not."""
    import numpy as np

    sa, sb = committed_sequences(a), committed_sequences(b)
    tokens = token_diff = routing_diff = 0
    first = None
    for r in sorted(set(sa) | set(sb)):
        (ta, ea), (tb, eb) = sa.get(r, ([], None)), sb.get(r, ([], None))
        n = min(len(ta), len(tb))
        tokens += max(len(ta), len(tb))
        token_diff += abs(len(ta) - len(tb))
        if n == 0:
            continue
        same_token = np.asarray(ta[:n]) == np.asarray(tb[:n])
        same_route = (ea[:n] == eb[:n]).all(axis=(1, 2))
        token_diff += int((~same_token).sum())
        routing_diff += int((same_token & ~same_route).sum())
        bad = np.flatnonzero(~(same_token & same_route))
        if first is None and bad.size:
            i = int(bad[0])
            first = {"request": r, "committed_index": i, "token": [int(ta[i]), int(tb[i])]}
    return {"requests": len(set(sa) | set(sb)), "committed_tokens": tokens,
            "token_mismatches": token_diff, "routing_mismatches": routing_diff,
            "identical": tokens > 0 and token_diff == 0 and routing_diff == 0,
            "first_mismatch": first}


def _local(model: str) -> str:
    """A checkpoint directory: the argument itself, or its hub snapshot (downloaded once)."""
    if Path(model).is_dir():
        return model
    from huggingface_hub import snapshot_download

    return snapshot_download(model, allow_patterns=["*.json", "*.safetensors", "*.model",
                                                    "*.txt", "*.jinja", "*.tiktoken"])


def smoke(a: argparse.Namespace) -> int:
    """The GPU smoke check (see the module's docstring)."""
    import time
    import traceback

    from specmoe.routing.trace import read_trace
    from specmoe.runs import Run
    from specmoe.runtime.engine import device
    from specmoe.sources.prompts import DEFAULT_SOURCE
    from specmoe.contracts import Named
    from specmoe.contracts.engines import CaptureParams, ProfileParams, SweepSdParams
    from specmoe.stages.measure import profile_stage, sweep_stage
    from specmoe.stages.traces import capture_stage

    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    steps: dict[str, dict] = {}

    def step(name, fn):
        t0 = time.perf_counter()
        try:
            fn()
            steps[name] = {"ok": True}
        except Exception as exc:  # noqa: BLE001 - recorded; the other steps still run
            steps[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
            (out / f"{name}.traceback").write_text(traceback.format_exc())
        steps[name]["wall_s"] = round(time.perf_counter() - t0, 1)
        print(f"{name}: {steps[name]}", flush=True)

    if device() != "cuda":
        print("smoke: vLLM's CUDA build is not installed here (pip install -e '.[gpu]')",
              file=sys.stderr)
        return 2
    target, drafter = _local(a.target), _local(a.drafter)
    run = {"model": "smoke", "drafter": "draft", "k": a.k, "dataset": a.dataset}
    served = Named({"target": str(target), "drafter": str(drafter), "prompts": []})

    def engine_job(record, job, settings, prompting=None, **outputs):
        """A stage's arguments as its rule gives them (the embedded prompt table)."""
        return dict(inputs=served, outputs=Named({k: str(v) for k, v in outputs.items()}),
                    params=record(job=job, settings=settings, method=None, gpu=True,
                                  prompts=DEFAULT_SOURCE, prompting=prompting or {}))

    cap = {"prompts": a.prompts, "max_tokens": a.max_tokens, "max_num_seqs": a.prompts,
           "dtype": "auto"}
    for mode, args in (("eager", {"enforce_eager": True}), ("defaults", {})):
        step(f"capture_{mode}", lambda args=args, mode=mode: capture_stage(
            **engine_job(CaptureParams, run, {**cap, "engine_args": args},
                         trace=out / f"capture_{mode}.parquet"),
            log=str(out / f"capture_{mode}.log")))
    routing = None
    if steps["capture_eager"]["ok"] and steps["capture_defaults"]["ok"]:
        routing = compare_committed(read_trace(out / "capture_eager.parquet"),
                                    read_trace(out / "capture_defaults.parquet"))
    step("profile", lambda: profile_stage(
        **engine_job(ProfileParams, run, {"batch_sizes": [1], "max_tokens": 32, "dtype": "auto",
                                          "max_model_len": 2048},
                     json=out / "profile.json", traces=out / "profile_traces"),
        log=str(out / "profile.log")))
    step("sweep", lambda: sweep_stage(
        **engine_job(SweepSdParams, {"model": "smoke", "drafter": "draft", "k": a.k,
                                     "datasets": [a.dataset]},
                     {"schedule": [{"batch": 1, "prompts": 8}], "output_len": a.max_tokens,
                      "warmups": 1, "repeats": 1, "startup_timeout_s": 900,
                      "max_model_len": 2048, "dtype": "auto"},
                     # a series' contract sets it (Config.draft_slack: K + 1 at its one K)
                     prompting={"draft_slack": a.k + 1}, json=out / "sweep.json"),
        log=str(out / "sweep.log")))
    checks = {"capture_eager": steps["capture_eager"]["ok"],
              "capture_defaults": steps["capture_defaults"]["ok"],
              "committed_routing_identical": bool(routing and routing["identical"]),
              "profile": steps["profile"]["ok"], "sweep_point": steps["sweep"]["ok"]}
    result = {"target": a.target, "drafter": a.drafter, "k": a.k, "steps": steps,
              "routing": routing, "checks": checks}
    (out / "smoke.json").write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps({"checks": checks, "routing": routing}, default=str))
    return 0 if all(checks.values()) else 1


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.mode == "smoke":
        return smoke(a)
    return kernels(a)


def kernels(a: argparse.Namespace) -> int:
    import torch

    from specmoe.runtime import kernelprof, tiny

    from specmoe.measured import profiling

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
    steps = profiling.steps_from_chrome_trace(trace, dev, str(path))
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
