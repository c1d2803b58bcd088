"""Tiny MoE targets and a dense drafter, built and trained on this CPU (the embedded default).

Training text is the Python standard library's own sources, which exist on any machine with
Python: every `*.py` file under `sysconfig.get_paths()["stdlib"]`, outside `site-packages`, `test`
and `tests` folders, less the files the interpreter's build writes for its own installation
(INSTALL_FILES). A file is held out when the SHA-1 of its path relative to the stdlib folder is 0
mod `heldout_every` (the configuration's tiny.heldout_every, whose default is the schema's), so the
corpus and its split are those of the Python version, wherever it is installed.

Models are Hugging Face Qwen3-MoE (targets) and Qwen3 (drafter) checkpoints that vLLM loads, sharing
one byte-level BPE tokenizer. Training is bit-reproducible on one machine: seeds fix initialisation
and data order, and deterministic kernels on the config's thread count fix the order of sums (see
train()); pinned numerics (TRAIN_NUMERICS_ENV) make the order the same on every x86-64 CPU with
AVX2, whoever made it, so the weights are those of any such machine. The weights still depend on
the thread count: the manifest records it with the numerics. torch and transformers are imported
lazily (the `cpu` extra).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import sysconfig
import time
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..provenance import atomic_dir

log = logging.getLogger("specmoe")
EOS = "<|endoftext|>"


# --- corpus ---------------------------------------------------------------------------------------

def corpus_root(root: str | Path | None = None) -> Path:
    """The folder the corpus is read from: the stdlib's unless given."""
    return Path(root or sysconfig.get_paths()["stdlib"])


# The stdlib's files that its build writes for one installation: the build's configuration as
# sysconfig reads it (_sysconfigdata_*.py) and the folder of python-config and the Makefile
# (config-<version>-<platform>). They hold the install prefix (pyenv's folder; under `--sdm conda`,
# the environment's folder inside the checkout), the compiler and its flags: in the corpus they
# gave two installations of one Python version different tokenizers and weights. Left out by name,
# not by whether a file holds the prefix: a prefix such as /usr appears in 52 ordinary stdlib
# files of 3.11, which the corpus would then lose on one installation and keep on another.
INSTALL_FILES = {"file": "_sysconfigdata_*.py", "folder": "config-*"}


def _installation_specific(rel: Path) -> bool:
    """Whether a stdlib-relative path is one of INSTALL_FILES."""
    return Path(rel.name).match(INSTALL_FILES["file"]) or \
        any(Path(d).match(INSTALL_FILES["folder"]) for d in rel.parts[:-1])


def corpus_files(heldout: bool, heldout_every: int, root: str | Path | None = None) -> list[Path]:
    """Training (heldout=False) or held-out (True) stdlib source files, sorted; one file in about
    `heldout_every` is held out (tiny.heldout_every: no default here, the schema's is the one).
    The files of one installation (INSTALL_FILES) are left out."""
    root = corpus_root(root)
    skip = {"site-packages", "test", "tests", "__pycache__"}
    out = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root)
        if skip.intersection(rel.parts[:-1]) or _installation_specific(rel):
            continue
        bucket = int(hashlib.sha1(str(rel).encode()).hexdigest(), 16) % heldout_every
        if (bucket == 0) == heldout:
            out.append(p)
    if not out:
        raise InputError(f"{root}: no Python sources found for the {'held-out' if heldout else 'training'} corpus")
    return out


def corpus_digest(files: list[Path], root: str | Path | None = None) -> str:
    """A hash of the corpus: each file's path relative to its root and its content (base names and
    sizes alone gave two corpora that differ in content one digest)."""
    root = corpus_root(root)
    h = hashlib.sha256()
    for p in files:
        data = p.read_bytes()
        h.update(b"%s\0%d\0" % (str(p.relative_to(root)).encode(), len(data)))
        h.update(data)
    return h.hexdigest()[:16]


def _read(files: list[Path], max_bytes: int) -> list[str]:
    texts, total = [], 0
    for p in files:
        try:
            t = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        texts.append(t)
        total += len(t)
        if total >= max_bytes:
            break
    return texts


# --- tokenizer ------------------------------------------------------------------------------------

def train_tokenizer(files: list[Path], vocab_size: int, out_dir: str | Path,
                    max_bytes: int = 8 << 20) -> None:
    """A byte-level BPE tokenizer saved as a Hugging Face fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 300:
        raise InputError(f"vocab_size must be >= 300 (256 bytes + merges), got {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_read(files, max_bytes), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS,
                                   pad_token=EOS)
    with atomic_dir(out_dir) as tmp:
        fast.save_pretrained(tmp)


def tokenizer_digest(model_dir: str | Path) -> str:
    """Hash of the vocabulary and merges: equal digests mean interchangeable tokenizers."""
    path = Path(model_dir) / "tokenizer.json"
    if not path.exists():
        raise InputError(f"{model_dir}: no tokenizer.json")
    model = json.loads(path.read_text())["model"]
    blob = json.dumps({"vocab": model.get("vocab"), "merges": model.get("merges")}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


ENCODE_BATCH = 64  # files encoded together (encode)


def encode(tokenizer_dir: str | Path, files: list[Path], max_tokens: int,
           max_bytes: int = 64 << 20) -> np.ndarray:
    """Token ids of the files, concatenated with EOS between files, at most max_tokens."""
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast.from_pretrained(str(tokenizer_dir))
    texts = _read(files, max_bytes)
    out: list[np.ndarray] = []
    n = 0
    # a batch of files at a time: the fast tokenizer encodes a batch on every core (one text
    # at a time it uses one), each text exactly as alone, and the ids are kept in file order
    for i in range(0, len(texts), ENCODE_BATCH):
        for ids in tok(texts[i:i + ENCODE_BATCH])["input_ids"]:
            ids = np.asarray(ids + [tok.eos_token_id], dtype=np.int32)
            out.append(ids)
            n += ids.size
        if n >= max_tokens:
            break
    return np.concatenate(out)[:max_tokens]


# --- models ---------------------------------------------------------------------------------------

# The sizes each kind of arch needs (the configuration schema requires them; none has a default)
KIND_KEYS = {"moe": ("num_experts", "top_k", "expert_intermediate"), "dense": ("intermediate",)}


@dataclass
class Arch:
    """A tiny model's architecture, as the configuration gives it (`arch`); the sizes of the
    other kind stay None."""
    kind: str                    # "moe" (Qwen3-MoE target) or "dense" (Qwen3 drafter)
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    num_experts: int | None = None          # moe: routed experts per layer
    top_k: int | None = None                # moe: experts per token
    expert_intermediate: int | None = None  # moe: one expert's width
    intermediate: int | None = None         # dense: the MLP's width

    def validate(self) -> None:
        if self.kind not in KIND_KEYS:
            raise InputError(f"arch kind must be moe or dense (got {self.kind})")
        missing = [k for k in KIND_KEYS[self.kind] if getattr(self, k) is None]
        if missing:
            raise InputError(f"arch kind {self.kind} needs {', '.join(missing)}")
        if self.kind == "moe" and not 1 <= self.top_k <= self.num_experts:
            raise InputError(f"top_k={self.top_k} must lie in 1..num_experts={self.num_experts}")
        if self.head_dim % 32:
            raise InputError(f"head_dim={self.head_dim}: vLLM's CPU attention needs a multiple of 32")
        if self.heads % self.kv_heads:
            raise InputError(f"heads={self.heads} is not a multiple of kv_heads={self.kv_heads}")


@dataclass
class TrainSpec:
    """A tiny model's training settings. A trained model's come from the resolved configuration,
    every key given (tiny.train, the schema's defaults filled: workflow/schemas/config.schema.yaml,
    their one source); the defaults below are the schema's (tests/test_config.py holds them
    equal) and fill only an untrained control's, whose record carries its evaluation's keys
    alone (specmoe.contracts.models.EVAL_KEYS). A rule's record carries its model's seed (the
    schema fills a tiny model's); the default here, the schema's (tests/test_tiny.py), serves
    the benchmarks that build a spec without a configuration."""
    steps: int = 700
    seed: int = 0
    seq_len: int = 128
    batch_size: int = 16
    lr: float = 3e-3
    warmup: int = 30
    eval_batches: int = 16
    threads: int = 2
    # Load-balancing loss (Switch Transformer's N * sum_e f_e P_e, f summing to k): its weight, and
    # whether it balances each MoE layer ("layer", as Qwen3-MoE and Megatron train) or the loads
    # pooled over layers ("pooled", transformers' load_balancing_loss_func)
    aux_coef: float = 0.0
    aux_scope: str = "layer"
    extra: dict = field(default_factory=dict)

    def validate(self) -> None:
        if self.steps < 1:
            raise InputError(f"training budget must be >= 1 step (got {self.steps})")
        for name in ("seq_len", "batch_size", "eval_batches", "threads"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be >= 1 (got {getattr(self, name)})")
        if self.lr <= 0:
            raise InputError(f"lr must be > 0 (got {self.lr})")
        if self.aux_coef < 0:
            raise InputError(f"aux_coef must be >= 0 (got {self.aux_coef})")
        if self.aux_scope not in ("layer", "pooled"):
            raise InputError(f"aux_scope must be layer or pooled (got {self.aux_scope})")


# Positions of a tiny model (its config's max_position_embeddings): an engine's max_model_len
# cannot exceed them.
MAX_POSITIONS = 2048


def build_model(arch: Arch, vocab_size: int, seed: int, max_len: int = MAX_POSITIONS,
                aux_coef: float = 0.0):
    """A freshly initialised HF model (deterministic in seed); aux_coef, the load-balancing loss's
    weight in training, is recorded in a MoE's config as router_aux_loss_coef."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

    arch.validate()
    common = dict(vocab_size=vocab_size, hidden_size=arch.hidden, num_hidden_layers=arch.layers,
                  num_attention_heads=arch.heads, num_key_value_heads=arch.kv_heads,
                  head_dim=arch.head_dim, max_position_embeddings=max_len,
                  tie_word_embeddings=True, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    torch.manual_seed(seed)
    if arch.kind == "moe":
        cfg = Qwen3MoeConfig(num_experts=arch.num_experts, num_experts_per_tok=arch.top_k,
                             moe_intermediate_size=arch.expert_intermediate,
                             intermediate_size=arch.expert_intermediate * arch.top_k,
                             decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True,
                             router_aux_loss_coef=aux_coef, **common)
        model = Qwen3MoeForCausalLM(cfg)
        # transformers' grouped GEMM over the experts, not its loop over them: transformers 5
        # picks it by default where it can; pinned here because the loop gives the same losses
        # (to 3.5e-5) at 0.58x the training tokens/s of tiny-fine on 2 cores (bench/training.py)
        model.set_experts_implementation("grouped_mm")
        return model
    cfg = Qwen3Config(intermediate_size=arch.intermediate, **common)
    return Qwen3ForCausalLM(cfg)


def _batches(tokens: np.ndarray, seq_len: int, batch: int, rng: np.random.Generator):
    import torch

    hi = tokens.size - seq_len - 1
    if hi <= 0:
        raise InputError(f"corpus of {tokens.size} tokens is shorter than seq_len={seq_len}")
    while True:
        starts = rng.integers(0, hi, batch)
        yield torch.from_numpy(np.stack([tokens[s:s + seq_len] for s in starts]).astype(np.int64))


def evaluate(model, tokens: np.ndarray, seq_len: int, batches: int, batch_size: int) -> float:
    """Mean next-token loss on fixed, evenly spaced windows of held-out tokens."""
    import torch

    n = batches * batch_size
    starts = np.linspace(0, tokens.size - seq_len - 1, n).astype(int)
    losses = []
    model.eval()
    with torch.no_grad(), deterministic():  # as in training: the expert scatter adds in order
        for i in range(0, n, batch_size):
            x = torch.from_numpy(np.stack([tokens[s:s + seq_len] for s in starts[i:i + batch_size]])
                                 .astype(np.int64))
            losses.append(float(model(input_ids=x, labels=x).loss))
    model.train()
    return float(np.mean(losses))


# OpenMP's settings for training. torch's threads meet at the end of every parallel region (a tiny
# model's step has thousands), and libgomp's default has a waiting thread spin ~300,000 times
# before it sleeps: with another busy process on the machine the thread it waits for is
# descheduled, and spinning takes the core it needs. tiny-fine's shape on 2 cores fell from 3.9-4.5
# steps/s alone to 1.1-1.2 beside one busy loop, and to 0.1 with several; passive waiting keeps it
# within 2x of the best rate alone (bench/train_contention.py). Only the waiting changes, not the
# order in which kernels add: the weights are bit-identical (the thread count is not: 1 and 2
# threads give different weights, so it stays the config's).
TRAIN_OMP_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}

# The numerics of training, the same on every x86-64 CPU with AVX2. Left to themselves, torch's
# CPU kernels run at the widest instruction set the CPU has (AVX2 or AVX512: different sums), and
# MKL's GEMMs take a code path chosen by the CPU's maker and model: tiny-fine trained on an AMD
# EPYC and on an Intel Xeon, both AVX512, came out different. Pinned: torch's own kernels at
# their AVX2 level (ATEN_CPU_CAPABILITY), MKL's GEMMs in conditional numerical reproducibility on
# its COMPATIBLE branch (MKL_CBWR; its AVX2 branch is Intel's only, other CPUs fall back to their
# own), oneDNN no wider than AVX2. They cost about 35% of a training step's time on a 2-core AMD
# EPYC (bench/train_numerics.py). They override the user's own settings: the checkpoints of a
# configuration are the same everywhere or the claim is void.
TRAIN_NUMERICS_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE",
                      "ONEDNN_MAX_CPU_ISA": "AVX2"}


def training_numerics() -> dict:
    """Put TRAIN_NUMERICS_ENV into this process's environment and return what training runs
    under, for its provenance: the variables and whether they take effect. torch and MKL read
    them when torch is first imported: call this before that; a process that has imported torch
    keeps the numerics it started with (applied: false), and its weights are that machine's."""
    import sys

    applied = "torch" not in sys.modules
    if applied:
        os.environ.update(TRAIN_NUMERICS_ENV)
    return {"applied": applied, **{k: os.environ.get(k) for k in TRAIN_NUMERICS_ENV}}


def training_threads(threads: int) -> dict:
    """Put TRAIN_OMP_ENV into this process's environment (a variable the user set is kept) and
    return what training runs under, for its provenance: threads, the OpenMP variables, and
    whether they take effect. libgomp reads them once, when torch is first imported: call this
    before that; a process that has imported torch keeps the settings it started with."""
    import sys

    # vLLM's CPU platform puts torch's libgomp into LD_PRELOAD of the process that imports it:
    # a child then loads libgomp at its start, before any setting here can apply
    applied = "torch" not in sys.modules and "libgomp" not in os.environ.get("LD_PRELOAD", "")
    if applied:
        for k, v in TRAIN_OMP_ENV.items():
            os.environ.setdefault(k, v)
    return {"threads": int(threads), "applied": applied,
            **{k: os.environ.get(k) for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}}


def train(model, tokens: np.ndarray, spec: TrainSpec, progress: bool = True) -> dict:
    """AdamW with linear warm-up and cosine decay; a tqdm bar shows the loss."""
    import torch

    spec.validate()
    # bit-reproducible training: a thread count from the config, and deterministic kernels (the
    # grouped expert GEMM's backward otherwise adds in varying order on 2 threads; the
    # deterministic path was also faster there: 0.16 vs 0.23 s a step for tiny-fine)
    torch.set_num_threads(spec.threads)
    with deterministic():
        return _train_loop(model, tokens, spec, progress)


@contextlib.contextmanager
def deterministic():
    """torch's deterministic kernels inside the block; the switch is process-wide, so the caller's
    own setting comes back on leaving it."""
    import torch

    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was)


def _train_loop(model, tokens: np.ndarray, spec: TrainSpec, progress: bool) -> dict:
    import torch
    from tqdm import tqdm

    torch.manual_seed(spec.seed)
    rng = np.random.default_rng(spec.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=0.01, betas=(0.9, 0.95))

    def lr_at(step):
        if step < spec.warmup:
            return (step + 1) / spec.warmup
        frac = (step - spec.warmup) / max(1, spec.steps - spec.warmup)
        return 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * frac))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    model.train()
    batches = _batches(tokens, spec.seq_len, spec.batch_size, rng)
    losses = []
    start = time.perf_counter()
    bar = tqdm(range(spec.steps), desc="train", disable=not progress, mininterval=2)
    moe = getattr(model.config, "num_experts", 0) > 0
    aux_losses = []
    for step in bar:
        x = next(batches)
        if moe and spec.aux_coef > 0:
            out = model(input_ids=x, output_router_logits=True)
            aux = load_balancing_loss(out.router_logits, model.config.num_experts,
                                      model.config.num_experts_per_tok, spec.aux_scope)
            loss = next_token_loss(out.logits, x)
            aux_losses.append(float(aux.detach()))
            (loss + spec.aux_coef * aux).backward()
        else:
            loss = model(input_ids=x, labels=x).loss
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
        if step % 10 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-10:]):.3f}")
        if step % 100 == 0:
            log.info("step %d loss %.3f", step, np.mean(losses[-10:]))
    return {"steps": spec.steps, "train_loss": float(np.mean(losses[-20:])),
            "aux_loss": float(np.mean(aux_losses[-20:])) if aux_losses else None,
            "wall_s": time.perf_counter() - start,
            "tokens_seen": spec.steps * spec.batch_size * spec.seq_len}


def next_token_loss(logits, x):
    """Mean cross-entropy of each position's prediction of the next token (transformers' loss for
    labels=input_ids)."""
    import torch

    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                                             x[:, 1:].reshape(-1))


def load_balancing_loss(router_logits, num_experts: int, top_k: int, scope: str = "layer"):
    """Switch Transformer's load-balancing loss N * sum_e f_e P_e (f_e: share of top-k slots routed
    to e, summing to k; P_e: mean router probability), equal to k when loads are uniform.

    scope "layer" takes it per MoE layer and averages over layers, as Qwen3-MoE's and Megatron's
    training do; "pooled" sums loads over layers first, as transformers' load_balancing_loss_func
    does, which leaves every layer free to skew as long as layers skew onto different experts."""
    import torch

    fs, ps = [], []
    for lg in router_logits:
        prob = torch.softmax(lg.float(), dim=-1)
        top = torch.topk(prob, top_k, dim=-1).indices
        fs.append(torch.bincount(top.reshape(-1), minlength=num_experts).float() / prob.shape[0])
        ps.append(prob.mean(dim=0))
    f, p = torch.stack(fs), torch.stack(ps)
    if scope == "pooled":
        return num_experts * (f.mean(dim=0) * p.mean(dim=0)).sum()
    return num_experts * (f * p).sum(dim=1).mean()


# --- files ----------------------------------------------------------------------------------------

def save_model(model, tokenizer_dir: str | Path, out_dir: str | Path, manifest: dict) -> None:
    """Weights (safetensors), config, tokenizer and manifest.json, atomically."""
    from ..provenance import write_json

    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        for f in Path(tokenizer_dir).glob("*token*.json"):
            shutil.copy(f, tmp / f.name)
        write_json(tmp / "manifest.json", manifest)


def arch_from_dict(d: dict) -> Arch:
    unknown = set(d) - set(Arch.__dataclass_fields__)
    if unknown:
        raise InputError(f"unknown arch key(s): {', '.join(sorted(unknown))}")
    missing = [f.name for f in fields(Arch) if f.default is MISSING and f.name not in d]
    if missing:
        raise InputError(f"arch needs {', '.join(missing)}")
    return Arch(**d)


def spec_from_dict(d: dict) -> TrainSpec:
    unknown = set(d) - set(TrainSpec.__dataclass_fields__)
    if unknown:
        raise InputError(f"unknown training key(s): {', '.join(sorted(unknown))}")
    return TrainSpec(**d)


def describe(arch: Arch, spec: TrainSpec) -> dict:
    """The architecture (its kind's sizes: none of the other kind's) and training settings."""
    return {"arch": {k: v for k, v in asdict(arch).items() if v is not None},
            "train": asdict(spec)}
