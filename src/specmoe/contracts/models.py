"""The contracts of the tiny models' rules (workflow/rules/models.smk; their stages:
specmoe.stages.models). See specmoe.contracts for what a record holds. The training settings'
defaults are the configuration schema's (tiny.train, and a tiny model's seed, filled by the
validation)."""

from __future__ import annotations

from dataclasses import dataclass

from ..runs import draft_length
from . import canonical, wildcard

# The keys of the `tiny` section the tokenizer and its corpora depend on.
TOKENIZER_KEYS = ("vocab_size", "heldout_every", "max_train_tokens", "max_heldout_tokens")
# The training settings an untrained control depends on (its evaluation only).
EVAL_KEYS = ("seq_len", "batch_size", "eval_batches")


@dataclass(frozen=True)
class TokenizerParams:
    """Rule tokenizer: the byte-level BPE tokenizer and the encoded corpora
    (specmoe.stages.models.tokenizer_stage); no input, output dir. It depends on
    TOKENIZER_KEYS of the `tiny` section."""

    INPUTS = ()
    OUTPUTS = ("dir",)
    STAGE = "specmoe.stages.models.tokenizer_stage"

    tiny: dict

    @classmethod
    def from_config(cls, cfg, w=None) -> "TokenizerParams":
        tiny = cfg.raw.get("tiny", {})
        return cls(tiny=canonical({k: tiny[k] for k in TOKENIZER_KEYS if k in tiny}))


@dataclass(frozen=True)
class TrainParams:
    """Rules train_model and random_model: one tiny model, trained or only initialised
    (specmoe.stages.models.train_stage), from the tokenizer (input tokenizer); output dir.

    model: what its weights depend on (architecture, budget and seed; not its drafters, datasets,
    K or hardware, which only its runs use; an untrained control: no budget); tiny: the `tiny`
    section's vocabulary and training settings, the thread count included (training adds in an
    order that depends on it, so the weights do too; an untrained control: EVAL_KEYS only)."""

    INPUTS = ("tokenizer",)
    OUTPUTS = ("dir",)
    STAGE = "specmoe.stages.models.train_stage"

    model: dict
    tiny: dict
    trained: bool

    @classmethod
    def from_config(cls, cfg, w, trained: bool = True) -> "TrainParams":
        m = cfg.entry(w.tiny)
        recipe = {"name": m["name"], "arch": m["arch"], "seed": m["seed"]}
        if trained:
            recipe["steps"] = m["steps"]
        tiny = cfg.raw.get("tiny", {})
        train = dict(tiny.get("train") or {})
        if not trained:
            train = {k: v for k, v in train.items() if k in EVAL_KEYS}
        return cls(model=canonical(recipe),
                   tiny=canonical({"vocab_size": tiny.get("vocab_size"), "train": train}),
                   trained=trained)

    @staticmethod
    def threads(cfg) -> int:
        """The job's threads: the training's (`tiny.train.threads`, the schema's default filled
        by the validation)."""
        return int(cfg.raw["tiny"]["train"]["threads"])


@dataclass(frozen=True)
class SdCheckParams:
    """Rule sd_check: speculative vs plain greedy decoding of a tiny target (input target) with
    its drafter (input drafter) at K on a real engine (specmoe.stages.models.sd_check_stage): do
    they commit the same tokens, and how many drafts are accepted; output json. It depends on the
    `tiny.sd_check` section (its engine settings and prompt count) and the tiny models' prompt
    table (input tiny_prompts where it is a file of the user's); its K and dataset are the job's
    wildcards (Files.targets: tiny.sd_check's)."""

    INPUTS = ("target", "drafter", "tiny_prompts")
    OUTPUTS = ("json",)
    STAGE = "specmoe.stages.models.sd_check_stage"

    sd: dict
    prompts: str
    k: int = wildcard(int)
    dataset: str = wildcard()

    @classmethod
    def from_config(cls, cfg, w) -> "SdCheckParams":
        return cls(sd=cfg.section("sd_check", tiny=True), prompts=cfg.prompts,
                   k=draft_length(w.k, "wildcard k"),
                   dataset=w.dataset)
