"""The study-cpu case (.test/study-cpu/config.yaml, data only) end to end on a CPU: build what the
case downloads under DIR/hf (a Hugging Face cache as huggingface_hub writes it: refs/,
snapshots/<commit>/, blobs/), then copy the workflow to DIR and run the case there offline with
the engines' environment (the Python that runs this, the repository's .venv). Results land in
DIR/results/; further arguments (targets, options) go to snakemake, before --configfile, which
would take a target after it for another config file.

    .venv/bin/python tests/study_cpu.py DIR [snakemake arguments...]

The cache holds three tiny models trained on this CPU and saved in Hugging Face format (a fine-
and a coarse-grained MoE target and a dense draft model sharing their tokenizer), and four
datasets in their published layouts (MT-Bench question.jsonl, an Aya-shaped parquet whose
languages are the held-out slices, a SPEED-Bench-shaped parquet, ShareGPT json), under the repo
ids and pinned revisions that the case's config.yaml names. Training is deterministic (the tiny
models' thread count is fixed), so the same DIR is rebuilt bit for bit; a DIR that already holds
the cache is left as it is.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import yaml

from hubfake import lay_out_cache  # the cache layout the download tests use (this folder)

REPO = Path(__file__).resolve().parents[1]
CASE = REPO / ".test" / "study-cpu"
# what the run copies to DIR: the workflow as it is in the repository
WORKFLOW_FILES = ("Snakefile", "config.yaml")
WORKFLOW_DIRS = ("config", "workflow", "profiles", "envs", ".test", "docs")

# The tokenizer and training settings of the three models (small: about a minute on 2 cores).
TINY = {"vocab_size": 512, "heldout_every": 10, "max_train_tokens": 300_000,
        "max_heldout_tokens": 20_000,
        "train": {"seq_len": 64, "batch_size": 16, "lr": 0.004, "warmup": 10, "eval_batches": 2,
                  "threads": 2, "aux_coef": 0.01, "aux_scope": "layer"}}
ATTN = {"hidden": 64, "heads": 2, "kv_heads": 1, "head_dim": 32}
MODELS = {  # repo id -> the model trained for it
    "specmoe-test/tiny-fine-moe": {"arch": {"kind": "moe", "layers": 2, "num_experts": 16,
                                            "top_k": 4, "expert_intermediate": 16, **ATTN},
                                   "steps": 120},
    "specmoe-test/tiny-coarse-moe": {"arch": {"kind": "moe", "layers": 2, "num_experts": 4,
                                              "top_k": 1, "expert_intermediate": 64, **ATTN},
                                     "steps": 120},
    "specmoe-test/tiny-draft": {"arch": {"kind": "dense", "layers": 1, "intermediate": 128,
                                         **ATTN}, "steps": 150},
}


def revisions() -> dict[str, str]:
    """The pinned commit of every repo the case names (models, drafters, datasets)."""
    cfg = yaml.safe_load((CASE / "config.yaml").read_text())
    entries = [*cfg["models"], *cfg["drafters"], *cfg["datasets"].values()]
    return {e["repo_id"]: e["revision"] for e in entries if e.get("repo_id")}


def build_models(cache: Path, work: Path, pinned: dict[str, str]) -> None:
    from specmoe.contracts import Named
    from specmoe.contracts.models import TokenizerParams, TrainParams
    from specmoe.stages import models as modelstages

    tokenizer = work / "tokenizer"
    modelstages.tokenizer_stage(Named({}), Named({"dir": tokenizer}), TokenizerParams(TINY))
    for repo_id, spec in MODELS.items():
        out = work / repo_id.split("/")[1]
        modelstages.train_stage(Named({"tokenizer": tokenizer}), Named({"dir": out}),
                                TrainParams({"name": out.name, "seed": 0, **spec}, TINY, True),
                                progress=False)
        files = {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}
        lay_out_cache(cache, repo_id, files, commit=pinned[repo_id], lfs={"model.safetensors"})


def build_datasets(cache: Path, pinned: dict[str, str]) -> None:
    """The embedded prompt table in the published layouts: tinybench's categories as MT-Bench's,
    the held-out code and prose as two Aya 'languages', long prompts (several joined) as
    SPEED-Bench's, and the code prompts as ShareGPT conversations."""
    import io

    import pandas as pd

    from specmoe.sources import prompts

    rows = prompts.load("builtin:v1")
    bench = [r for r in rows if r.dataset == "tinybench"]
    code = [r.text for r in rows if r.category == "code"]
    prose = [r.text for r in rows if r.category == "prose"]

    def parquet(df) -> bytes:
        buf = io.BytesIO()
        df.to_parquet(buf, index=False)
        return buf.getvalue()

    mt = "".join(json.dumps({"question_id": 81 + i, "category": r.category,
                             "turns": [r.text, "Now say it in one sentence."]}) + "\n"
                 for i, r in enumerate(bench))
    aya = pd.DataFrame({"inputs": prose + code, "targets": [""] * (len(prose) + len(code)),
                        "language": ["English"] * len(prose) + ["Python"] * len(code),
                        "language_code": ["eng"] * len(prose) + ["py"] * len(code),
                        "annotation_type": ["original-annotations"] * (len(prose) + len(code)),
                        "user_id": ["u0"] * (len(prose) + len(code))})
    joined = ["\n\n".join(r.text for r in bench[i::4]) for i in range(4)]
    speed = pd.DataFrame({"question_id": [f"q{i}" for i in range(8)],
                          "category": ["long_writing", "long_coding"] * 4,
                          "turns": [[joined[i % 4]] for i in range(8)]})
    share = [{"id": f"c{i}", "conversations": [{"from": "human", "value": t},
                                                {"from": "gpt", "value": "..."}]}
             for i, t in enumerate(code)]
    for repo_id, files in (
            ("specmoe-test/mt-bench", {"question.jsonl": mt.encode()}),
            ("specmoe-test/aya", {"data/train-00000-of-00001.parquet": parquet(aya)}),
            ("specmoe-test/speed-bench", {"throughput_32k/test.parquet": parquet(speed)}),
            ("specmoe-test/sharegpt",
             {"ShareGPT_V3_unfiltered_cleaned_split.json": json.dumps(share).encode()})):
        lay_out_cache(cache, repo_id, files, commit=pinned[repo_id], repo_type="dataset")


def build(root: Path) -> None:
    """The case's Hugging Face cache under root/hf (kept where it is built)."""
    cache = root / "hf" / "hub"
    done = cache / ".built"
    if done.exists():
        print(f"study-cpu: the cache under {cache} is built")
        return
    pinned = revisions()
    build_datasets(cache, pinned)
    build_models(cache, root / "hf" / "build", pinned)
    done.write_text("ok\n")
    print(f"study-cpu: cache built under {cache}")


def run(root: Path, snakemake_args: list[str]) -> None:
    """Copy the workflow to root (modification times kept: Snakemake reruns a rule whose script
    is newer than its outputs, so a rerun does only what changed) and run the case there offline;
    this process becomes snakemake."""
    for name in WORKFLOW_FILES:
        shutil.copy2(REPO / name, root / name)
    for name in WORKFLOW_DIRS:
        shutil.rmtree(root / name, ignore_errors=True)
        shutil.copytree(REPO / name, root / name, symlinks=True)
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(root / "hf"), HF_HUB_CACHE=str(root / "hf" / "hub"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    os.chdir(root)
    os.execve(sys.executable, [sys.executable, "-m", "snakemake", *snakemake_args, "--cores",
                               "all", "--configfile", ".test/study-cpu/config.yaml"], env)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: .venv/bin/python tests/study_cpu.py DIR [snakemake arguments...]")
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    build(out.resolve())
    run(out.resolve(), sys.argv[2:])
