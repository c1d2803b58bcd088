"""Independent routing of a token sequence by Hugging Face transformers (router hooks).

Used to verify captured traces: the committed tokens' top-k sets must match a plain transformers
forward of the final sequence.
"""

from __future__ import annotations

import numpy as np


def hf_routing(model_dir, token_ids: list[int]) -> np.ndarray:
    """(tokens, moe_layers, top_k) expert ids from a transformers forward with hooks on routers."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.eval()
    k = model.config.num_experts_per_tok
    found: dict[int, torch.Tensor] = {}
    hooks = []
    for idx, layer in enumerate(model.model.layers):
        gate = getattr(getattr(layer, "mlp", None), "gate", None)
        if gate is None:
            continue

        def hook(_mod, _inp, out, idx=idx):
            logits = out[0] if isinstance(out, tuple) else out
            found[idx] = torch.topk(logits.float().reshape(-1, logits.shape[-1]), k, dim=-1).indices

        hooks.append(gate.register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(input_ids=torch.tensor([token_ids]))
    finally:
        for h in hooks:
            h.remove()
    return np.stack([found[i].numpy() for i in sorted(found)], axis=1)


def committed_positions(trace, request: int, prompt_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the trace that hold committed tokens of one request, and their sequence indices.

    Position 0 of the window at step s holds the token at index prompt_len + (tokens committed by
    earlier windows); accepted drafts follow it.
    """
    c = trace.columns
    rows, index = [], []
    at = prompt_len
    for s in np.unique(c["step"][c["request"] == request]):
        w = np.flatnonzero((c["request"] == request) & (c["step"] == s))
        a = int(c["accepted"][w[0]])
        for j, r in enumerate(w[: a + 1]):
            rows.append(r)
            index.append(at + j)
        at += a + 1
    return np.array(rows, int), np.array(index, int)


def agreement(trace_experts: np.ndarray, hf_experts: np.ndarray) -> float:
    """Fraction of (token, layer) top-k sets that agree."""
    a = np.sort(trace_experts, axis=-1)
    b = np.sort(hf_experts, axis=-1)
    return float((a == b).all(axis=-1).mean())
