"""Training throughput of the default's tiny models: transformers' expert implementations compared.

For each tiny model of config.yaml (and the drafter), a few AdamW steps on random tokens of the
configured sequence length and batch size, timed after one warm-up step, with the loop over experts
("eager") and with the grouped GEMM ("grouped_mm": transformers 5's default where it can run, and
what specmoe.runtime.tiny pins); the losses of both must agree. Run: .venv/bin/python bench/training.py --json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import yaml

from specmoe.runtime import tiny

REPO = Path(__file__).resolve().parents[1]


def steps_per_s(arch, vocab: int, seq_len: int, batch: int, impl: str | None, steps: int) -> dict:
    model = tiny.build_model(arch, vocab, 0)
    if impl is not None:
        model.set_experts_implementation(impl)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, vocab, (batch, seq_len), generator=torch.Generator().manual_seed(0))
    losses = []
    for i in range(steps + 1):
        if i == 1:
            t0 = time.perf_counter()
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    dt = (time.perf_counter() - t0) / steps
    return {"ms_per_step": 1000 * dt, "tokens_per_s": batch * seq_len / dt, "losses": losses}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(REPO / "config.yaml"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    cfg = yaml.safe_load(Path(a.config).read_text())
    train = cfg["tiny"]["train"]
    torch.set_num_threads(int(train.get("threads", 2)))
    out = {}
    for entry in [*cfg["models"], *cfg.get("drafters", [])]:
        if entry.get("source") != "tiny":
            continue
        arch = tiny.arch_from_dict(entry["arch"])
        impls = ["eager", "grouped_mm"] if arch.kind == "moe" else [None]
        res = {str(i): steps_per_s(arch, cfg["tiny"]["vocab_size"], train["seq_len"],
                                   train["batch_size"], i, a.steps) for i in impls}
        if arch.kind == "moe":
            diff = max(abs(x - y) for x, y in zip(res["eager"]["losses"],
                                                  res["grouped_mm"]["losses"]))
            res["max_loss_difference"] = diff
            res["speedup"] = res["eager"]["ms_per_step"] / res["grouped_mm"]["ms_per_step"]
        out[entry["name"]] = res
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        for name, r in out.items():
            print(name, {k: (round(v["tokens_per_s"]) if isinstance(v, dict) else v)
                         for k, v in r.items()})


if __name__ == "__main__":
    main()
