"""The weight-model table of the study's models, from their config.json alone (no GPU, no weights).

One row per configured model variant (checkpoint, precision, TP): C_expert and C_dense per GPU (MiB,
per MoE layer), the expert-free layers' bytes spread over the MoE layers, the MoE weight share, and
the weight model's TE at batch 1 for each K with unique experts per window under the prior uniform
i.i.d. model, and, where the model has overlaps by step distance (its configured ones, else its
study model's published row; overlaps_source says which), under the uniform max-entropy IPF fit of
those overlaps.
"""

from __future__ import annotations


import numpy as np
import pandas as pd


from . import costmodel
from ..routing import ipf
from .hfconfig import study_dims
from ..routing.unique import uniform_unique


def weight_row(dims: costmodel.ModelDims, k_draft: int, overlaps=None) -> dict:
    window = k_draft + 1
    u_uniform = uniform_unique(dims.num_experts, dims.top_k, window)
    row = {"K": k_draft, "c_expert_mib_per_gpu": dims.c_expert / costmodel.MIB,
           "c_dense_mib_per_gpu": dims.c_dense / costmodel.MIB,
           "c_dense_layers_mib_per_gpu": dims.c_dense_layers / costmodel.MIB,
           "moe_weight_share": dims.moe_weight_share,
           "unique_uniform": u_uniform, "te_uniform": dims.te_weight(u_uniform),
           "unique_ipf": np.nan, "te_ipf": np.nan}
    if overlaps and len(overlaps) >= k_draft:  # IPF needs ov(d) for every d = 1..K
        u = ipf.predict_uniform(dims.num_experts, dims.top_k, np.asarray(overlaps[:k_draft]))
        row.update(unique_ipf=u["unique"], te_ipf=dims.te_weight(u["unique"]))
    return row


def weight_model_table(entries: list[dict]) -> pd.DataFrame:
    """entries: {name, manifest (or config), precision, tp, hardware, ks, overlaps?,
    overlaps_source?}: a row per model and K, with where its IPF column's overlaps come from
    (overlaps_source: configured, published, or empty for none)."""
    rows = []
    for e in entries:
        dims = study_dims(e.get("manifest") or e["config"], e["precision"], e["tp"])
        for k in e["ks"]:
            rows.append({"model": e["name"], "repo_id": e.get("repo_id"),
                         "precision": dims.dtype if dims.dtype == dims.dense_dtype
                         else f"{dims.dtype} experts, {dims.dense_dtype} dense",
                         "tp": dims.tp, "hardware": e.get("hardware"), "N": dims.num_experts,
                         "top_k": dims.top_k, **weight_row(dims, int(k), e.get("overlaps")),
                         "overlaps_source": e.get("overlaps_source", "")})
    return pd.DataFrame(rows)
