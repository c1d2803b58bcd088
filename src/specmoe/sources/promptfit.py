"""Prompts as an engine receives them: rendered with the target's chat template where the dataset
says so, measured in the target's tokens, and fitted to the engine's context.

- Chat template (`datasets.<name>.chat_template`, default false): the prompt text becomes what
  vLLM 0.32's `bench serve` custom dataset sends for it (vllm/benchmarks/datasets/datasets.py,
  CustomDataset.sample): the tokenizer's `apply_chat_template([{"role": "user", "content":
  text}], add_generation_prompt=True, tokenize=False)`. Capture (LLM.generate) and the sweeps
  (`bench serve --skip-chat-template`) both send the rendered text, so there is one renderer. A
  tokenizer without a chat template where a dataset asks for one is an error.
- Length: `len(tokenizer(text).input_ids)`, as `bench serve` counts a prompt (and as vLLM
  tokenizes a text prompt, special tokens included).
- Fit (POLICY, filter): a prompt whose tokens plus the tokens the engine adds to it (the output
  length, and K+1 for the drafts of SD) exceed the engine's max_model_len is left out, and
  counted; vLLM would refuse it part-way through a job. A dataset none of whose prompts fits is
  an error. Where every prompt fits, the prompts are exactly those of the table.

The transformers import is lazy: reading a prompt table needs none of it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..errors import InputError
from .prompts import Prompt

POLICY = "filter"


def load_tokenizer(model_dir, trust_remote_code: bool = False):
    """The target's tokenizer as vLLM loads it by default (its model directory)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(model_dir), trust_remote_code=trust_remote_code)
    except Exception as exc:  # noqa: BLE001 - transformers' readers raise KeyError, TypeError...
        raise InputError(f"{model_dir}: no tokenizer to measure the prompts with "
                         f"({str(exc).splitlines()[0]})") from None


def render(tokenizer, text: str, chat_template: bool, where: str = "the target") -> str:
    """The text the engine receives for a prompt (see the module's docstring)."""
    if not chat_template:
        return text
    if not getattr(tokenizer, "chat_template", None):
        raise InputError(f"{where}'s tokenizer has no chat template, but the dataset's "
                         "chat_template is true (set it false for raw text)")
    return tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                         add_generation_prompt=True, tokenize=False)


def measure(rows: list[Prompt], tokenizer, chat: dict[str, bool],
            where: str = "the target") -> list[tuple[Prompt, int]]:
    """Each row as the engine receives it (its text rendered where its dataset's chat
    setting says so) with its length in the tokenizer's tokens."""
    out = []
    for r in rows:
        text = render(tokenizer, r.text, bool(chat.get(r.dataset)), where)
        out.append((dataclasses.replace(r, text=text) if text != r.text else r,
                    len(tokenizer(text).input_ids)))
    return out


def prepare(rows: list[Prompt], tokenizer, chat: dict[str, bool], max_model_len: int,
            reserved: int, where: str = "the target") -> tuple[list[Prompt], dict]:
    """(the rows as the engine receives them, fitted; what was done, per dataset).

    chat: dataset -> its chat_template setting (absent: false). reserved: the tokens the engine
    adds to a prompt (output length, plus K+1 with SD)."""
    budget = max_model_len - reserved
    kept: list[Prompt] = []
    info: dict[str, dict] = {}
    for r, n in measure(rows, tokenizer, chat, where):
        d = info.setdefault(r.dataset, {"chat_template": bool(chat.get(r.dataset)),
                                        "policy": POLICY, "max_model_len": max_model_len,
                                        "reserved": reserved, "prompts": 0, "over_limit": 0,
                                        "longest": 0, "longest_prompt_id": None})
        d["prompts"] += 1
        if n > d["longest"]:
            d["longest"], d["longest_prompt_id"] = n, r.prompt_id
        if n > budget:
            d["over_limit"] += 1
        else:
            kept.append(r)
    for ds, d in info.items():
        if d["over_limit"] == d["prompts"]:
            raise InputError(f"{ds}: none of its {d['prompts']} prompts fits {where}'s context: "
                             f"the shortest needs more than max_model_len {max_model_len:,} - "
                             f"{reserved} tokens (output and drafts); raise max_model_len")
    return kept, info


def summary_line(info: dict[str, dict]) -> str:
    """One line per job for its log: each dataset's longest prompt and what was left out."""
    return "; ".join(
        f"{ds}: longest prompt {d['longest']:,} tokens + {d['reserved']} reserved vs "
        f"max_model_len {d['max_model_len']:,}, {d['over_limit']} of {d['prompts']} over the "
        f"limit left out{' (chat template)' if d['chat_template'] else ''}"
        for ds, d in info.items())


def tokenizer_dir(model_dir) -> Path | None:
    """The directory a checkpoint's tokenizer is read from, where one is there (a tiny model
    or a snapshot; None: not yet)."""
    p = Path(model_dir)
    return p if any(p.glob("tokenizer*")) else None
