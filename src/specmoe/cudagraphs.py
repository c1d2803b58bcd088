"""The CUDA graph sizes of a serving series' engines on a GPU (cuda_graph_config), torch-free:
the runtime's engine arguments (specmoe.runtime.engine.engine_kwargs) take them, and the
configuration (specmoe.config.Config.graph_problems) refuses, when it loads, engine_args whose
graphs stop below a series' widest step (its verify step, or a draft model's first pass), before
any GPU job is queued.
"""

from __future__ import annotations

from .errors import InputError


def token_grid(ceiling: int) -> list[int]:
    """vLLM 0.32's CUDA graph sizes for a ceiling of `ceiling` tokens given alone (no sizes):
    1, 2, 4, then steps of 8 below 256 and of 16 from 256 (vllm/config/vllm.py,
    _set_cudagraph_sizes); vLLM truncates the ceiling to the largest of them. The same grid
    counts requests in its default sizes for verify steps (request_counts there). Written out,
    not called: vLLM's config module imports torch, and engine arguments are built in a rule's
    own process, before its engine starts (tests check it against vLLM's function)."""
    sizes = [n for n in (1, 2, 4) if n <= ceiling]
    sizes += list(range(8, min(ceiling + 1, 256), 8))
    sizes += list(range(256, ceiling + 1, 16))
    return sizes


def tokens_per_request(k: int, draft_model: bool) -> int:
    """Tokens one request takes in an SD engine's widest step: K + 1 verified, and a separate
    draft model's extra input slot in its first draft pass (vLLM's extra_slots_per_request)."""
    return k + 2 if draft_model else k + 1


def verify_graph_reach(sizes, k: int) -> int:
    """The widest verify step of K drafts (K + 1 tokens a sequence) that runs in a CUDA graph
    of capture sizes `sizes`: vLLM rounds each size up to a multiple of K + 1 and keeps those
    within the largest size (V1: CompilationConfig.adjust_cudagraph_sizes_for_spec_decode;
    Model Runner V2: cudagraph_utils.CudaGraphManager._init_candidates); a wider step runs
    without graphs (cudagraph_dispatcher). 0: none."""
    q, top = k + 1, max(sizes, default=0)
    rounded = [-(-int(s) // q) * q for s in sizes]
    return max((r for r in rounded if r <= top), default=q if q <= top else 0)


def cuda_graph_config(given, max_num_seqs: int, k: int, draft_model: bool = False) -> dict:
    """compilation_config whose CUDA graphs reach a verify step at max_num_seqs, that many
    sequences of K + 1 tokens. vLLM's default ceiling, min(2 max_num_seqs (K + 1), 512) tokens
    on an H100 (vllm/config/vllm.py, _set_cudagraph_sizes), ran the SD engine's verify steps
    above batch 512 / (K + 1) eagerly while the engine without SD, graphed, took its decode
    steps at every batch: the speedup then measured the graphs. A ceiling of max_num_seqs
    (K + 1) tokens alone did not do: vLLM truncates it to its grid (token_grid) and rounds the
    sizes to multiples of K + 1 within that (verify_graph_reach), so verify steps at batch 12
    with K = 2 (36 tokens) ran eagerly above 24. The sizes are given explicitly instead, whose
    largest is the ceiling: vLLM's token grid up to it (the engine without SD, one token a
    sequence, pads its steps to those) and K + 1 times vLLM's request-count grid up to
    max_num_seqs (its own default sizes for verify steps: every batch pads to one of them).
    draft_model: the series' drafter is a separate draft model (both of its engines get the
    same sizes). V1's draft-model proposer gives each request one input slot more than the
    verify step (vllm/v1/spec_decode/llm_base_proposer.py, extra_slots_per_request), so its
    first draft pass at batch n takes n (K + 2) tokens, above the largest verify size: at
    batch 128 with K = 3, 640 tokens ran without graphs above 512. Its sizes hold as well
    n (K + 2) rounded up to a multiple of K + 1 (as vLLM rounds every size of an SD engine)
    for each n of the request-count grid, and the ceiling is the first pass at max_num_seqs.
    given: engine_args' own compilation_config, kept; one whose sizes or ceiling, rounded as
    vLLM rounds them, stop below that ceiling is refused."""
    if given is not None and not isinstance(given, dict):
        raise InputError(f"engine_args compilation_config must be a mapping (got {given!r})")
    cc, q = dict(given or {}), k + 1
    per = tokens_per_request(k, draft_model)
    need = max_num_seqs * per
    step = (f"a draft model's first pass (K + 2 = {per} tokens a request)" if draft_model
            else "a verify step")
    sizes = cc.get("cudagraph_capture_sizes")
    ceiling = cc.get("max_cudagraph_capture_size")
    if not sizes and ceiling is None:
        counts = set(token_grid(max_num_seqs)) | {max_num_seqs}
        first = {-(-n * per // q) * q for n in counts} if draft_model else set()
        cc["cudagraph_capture_sizes"] = sorted(set(token_grid(max_num_seqs * q))
                                               | {n * q for n in counts} | first)
        return cc
    if sizes:
        have, fix = max(int(s) for s in sizes), f"add {-(-need // q) * q} to its sizes"
        reach = verify_graph_reach([int(s) for s in sizes], k)
    else:
        have, grid = int(ceiling), token_grid(int(ceiling))
        reach = verify_graph_reach(grid, k)
        # a multiple of 16 (a grid size) and of K + 1 at most 16 (K + 1) above does
        wide = next(c for c in range(need, need + 16 * q + 1)
                    if verify_graph_reach(token_grid(c), k) >= need)
        fix = f"raise it to {wide}"
    if reach < need:
        rounded = (f", {reach} in verify steps of K + 1 = {q} tokens (vLLM rounds its sizes "
                   f"to multiples of K + 1 within the largest)" if reach != have else "")
        raise InputError(
            f"engine_args compilation_config captures CUDA graphs up to {have} tokens{rounded}, "
            f"below the {need} of {step} at batch {max_num_seqs} with K = {k}: those "
            f"steps would run without graphs; {fix} or remove it")
    return cc
