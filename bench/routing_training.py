"""How training shapes a tiny MoE's routing: load-balancing loss, steps, seeds.

Trains a tiny target of config.yaml (default tiny-fine) with the given load-balancing settings and
measures its routing teacher-forced on held-out code (windows of --seq tokens, every MoE layer):
the hottest expert's share of tokens, the independence baseline against k/N, overlap along the
sequence at d = 1..8, the temporal share and the uniform IPF's error on 4-token windows. It also
reports the sha256 of the trained weights, so two runs with one setting show whether training is
bit-reproducible. Needs results/models/tokenizer (`snakemake results/models/tokenizer`).

Run: .venv/bin/python bench/routing_training.py --aux-coef 0.01 --steps 700 --json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from specmoe.routing import ipf

from specmoe.runtime import tiny
from specmoe.routing.overlap import sequence_overlap

REPO = Path(__file__).resolve().parents[1]


def teacher_forced_experts(model, tokens: np.ndarray, seq: int, windows: int) -> np.ndarray:
    """(windows, seq, layers, k) top-k expert ids of held-out text, one forward per window."""
    starts = np.linspace(0, tokens.size - seq - 1, windows).astype(int)
    k = model.config.num_experts_per_tok
    out = []
    model.eval()
    with torch.no_grad():
        for s in starts:
            x = torch.from_numpy(tokens[s:s + seq].astype(np.int64))[None]
            logits = model(input_ids=x, output_router_logits=True).router_logits
            out.append(np.stack([torch.topk(lg, k, dim=-1).indices.numpy() for lg in logits],
                                axis=1))
    return np.stack(out).astype(np.int16)


def routing_summary(ex: np.ndarray, num_experts: int, window: int = 4) -> dict:
    w, t, layers, k = ex.shape
    flat = ex.reshape(-1, layers, k)
    q = np.stack([np.bincount(flat[:, l].ravel(), minlength=num_experts) for l in range(layers)])
    q = q / flat.shape[0]
    ind = (q ** 2).sum(axis=1) / k
    seq = sequence_overlap(ex, 8)  # [layer, d-1]
    ov = seq.mean(axis=0)
    # unique experts of windows of `window` consecutive tokens vs the uniform IPF from seq overlaps
    blocks = ex[:, : (t // window) * window].reshape(w, -1, window, layers, k)
    uniq = np.mean([[len(np.unique(blocks[a, b, :, l])) for a in range(w) for b in
                     range(blocks.shape[1])] for l in range(layers)])
    pred = ipf.predict_uniform(num_experts, k, ov[: window - 1])["unique"]
    return {"hottest_share": q.max(axis=1).round(3).tolist(), "independence": float(ind.mean()),
            "independence_by_layer": ind.round(3).tolist(), "k_over_n": k / num_experts,
            "seq_overlap": ov.round(4).tolist(), "temporal_share": float((ov[0] - ind.mean()) / ov[0]),
            "unique_measured": float(uniq), "unique_uniform_ipf": pred,
            "ipf_error": float(pred / uniq - 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(REPO / "config.yaml"))
    ap.add_argument("--model", default="tiny-fine")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--aux-coef", type=float)
    ap.add_argument("--aux-scope", choices=["layer", "pooled"])
    ap.add_argument("--lr", type=float)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--windows", type=int, default=48)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    cfg = yaml.safe_load(Path(a.config).read_text())
    entry = next(m for m in cfg["models"] if m["name"] == a.model)
    train = dict(cfg["tiny"]["train"])
    for key, val in (("steps", a.steps), ("aux_coef", a.aux_coef), ("aux_scope", a.aux_scope),
                     ("lr", a.lr), ("seed", a.seed)):
        if val is not None:
            train[key] = val
    train.setdefault("steps", entry.get("steps", 700))
    train.setdefault("seed", entry.get("seed", 0))
    spec = tiny.spec_from_dict(train)
    arch = tiny.arch_from_dict(entry["arch"])
    tok = REPO / "results/models/tokenizer"
    model = tiny.build_model(arch, cfg["tiny"]["vocab_size"], spec.seed,
                             aux_coef=spec.aux_coef)
    t0 = time.perf_counter()
    res = tiny.train(model, np.load(tok / "train_tokens.npy"), spec, progress=not a.json)
    held = np.load(tok / "heldout_tokens.npy")
    loss = tiny.evaluate(model, held, spec.seq_len, spec.eval_batches, spec.batch_size)
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().contiguous().numpy().tobytes())
    ex = teacher_forced_experts(model, held, a.seq, a.windows)
    out = {"model": a.model, "train": {k: train[k] for k in sorted(train)},
           "heldout_loss": loss, "train_loss": res["train_loss"],
           "wall_s": time.perf_counter() - t0, "weights_sha256": h.hexdigest(),
           **routing_summary(ex, arch.num_experts)}
    print(json.dumps(out) if a.json else json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
