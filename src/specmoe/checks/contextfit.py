"""Do the prompts fit the engines' context? Checked when the workflow is parsed, for every engine
job whose prompt table and target tokenizer exist by then (the embedded prompt table with the tiny
models' tokenizer once it is trained; a study dataset's table with its target's tokenizer once
both are downloaded): the longest prompt, as the engine receives it (specmoe.sources.promptfit:
the dataset's chat template, the target's tokens), plus what the engine adds to it (the output
length, and K+1 for SD) against the engine's max_model_len.

A prompt over the limit is left out by the engine stages (promptfit.POLICY, filter): a note here
says how many. A dataset none of whose prompts fits, or a chat template the tokenizer lacks, stops
the run. What is not there yet (or where the launcher's environment has no transformers) is
checked by each engine job before its engine starts, in the same function; the summary line says
which datasets that leaves.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError


@dataclass(frozen=True)
class Context:
    """One engine job's context, as the engine stages set it (specmoe.config.Config.contexts)."""
    job: str
    model: str
    datasets: tuple[str, ...]
    max_model_len: int
    reserved: int          # output tokens, plus K+1 of SD (a sweep: at the model's largest K)
    manifests: tuple[str, ...] = ()  # a study model's download manifests (its tokenizer)


def _tokenizer_dir(c: Context) -> Path | None:
    """Where the served model's tokenizer is by now (None: not yet): a tiny model's is the
    trained tokenizer's, a study model's in its download."""
    import json

    from .. import paths as P
    from ..sources.promptfit import tokenizer_dir

    if not c.manifests:
        return tokenizer_dir(P.TOKENIZER) if Path(P.TOKENIZER).is_dir() else None
    for man in map(Path, c.manifests):
        if man.exists():
            snap = Path(json.loads(man.read_text()).get("snapshot_path", ""))
            if snap.is_dir():
                return tokenizer_dir(snap)
    return None


def _table(cfg, dataset: str) -> str | None:
    from .. import paths as P

    if dataset in cfg.datasets:
        return P.prompts(dataset) if Path(P.prompts(dataset)).exists() else None
    return cfg.prompts


class _NoTokenizer(Exception):
    """The tokenizer would not load (a note says why): its engine jobs check the prompts."""


# specmoe's own code behind the prompt lengths: how a prompt is rendered and measured.
PROMPT_LENGTH_SOURCES = ("sources/promptfit.py",)


def _question(tokenizer: dict[str, str], texts: list[str], chat: bool, trust: bool) -> str:
    """All that the lengths of a dataset's prompts (texts, in order) under a tokenizer depend on
    (specmoe.checks.memo): the tokenizer's files (their digests), the texts, the chat setting,
    the tokenizer packages, specmoe's rendering code (PROMPT_LENGTH_SOURCES)."""
    import hashlib
    import json

    from specmoe.provenance import package_versions

    from . import memo

    versions = package_versions()
    return json.dumps({"chat_template": chat, "trust_remote_code": trust,
                       "code": memo.source_digest(*PROMPT_LENGTH_SOURCES),
                       "texts": hashlib.sha256(json.dumps(texts).encode()).hexdigest(),
                       "tokenizer": tokenizer,
                       "versions": {d: versions.get(d, "-") for d in ("transformers", "tokenizers")}},
                      sort_keys=True)


def check(cfg, cache_dir=None) -> tuple[list[str], list[str]]:
    """(problems, notes) of every engine job's prompts against its context; one line each. The
    prompt lengths are kept in cache_dir by all they depend on (_question): a workflow parsed
    again with the same tokenizers and tables reads them back without loading transformers."""
    import functools
    from importlib.util import find_spec

    from ..sources import promptfit
    from ..sources import prompts as prompt_table
    from . import memo

    jobs = cfg.contexts()
    if not jobs:
        return [], []
    lengths: dict[tuple, list[int]] = {}   # (model's tokenizer dir, dataset) -> prompt lengths
    unchecked: set[str] = set()
    problems: list[str] = []
    notes: list[str] = []
    can_tokenize = find_spec("transformers") is not None
    tokenizers: dict[Path, object] = {}
    digests = functools.cache(memo.file_digests)  # a tokenizer folder's files, read once

    def measure(c: Context, tok_dir: Path, rows: list, chat: dict, trust: bool):
        if tok_dir not in tokenizers:
            try:
                tokenizers[tok_dir] = promptfit.load_tokenizer(tok_dir, trust)
            except InputError as exc:  # its engine jobs load it again, and stop there
                tokenizers[tok_dir] = None
                notes.append(f"preflight: prompts: {c.model}: {exc}; its engine jobs "
                             "check the prompts (and stop) before their engines start")
        if tokenizers[tok_dir] is None:
            raise _NoTokenizer
        return [n for _, n in promptfit.measure(rows, tokenizers[tok_dir], chat, c.model)]

    for c in jobs:
        tok_dir = _tokenizer_dir(c)
        for ds in c.datasets:
            table = _table(cfg, ds)
            if tok_dir is None or table is None or not can_tokenize:
                unchecked.add(ds)
                continue
            if (tok_dir, ds) in lengths:
                continue
            trust = bool(cfg.entry(c.model).get("trust_remote_code"))
            chat = cfg.prompting(c.model, [ds])["chat_template"]
            try:
                rows = prompt_table.load(table, [ds])
                question = _question(digests(tok_dir), [r.text for r in rows],
                                     bool(chat.get(ds)), trust) if cache_dir else ""
                lengths[(tok_dir, ds)] = memo.cached(
                    cache_dir, "prompt-lengths", question,
                    lambda: measure(c, tok_dir, rows, chat, trust))
            except _NoTokenizer:
                unchecked.add(ds)
            except InputError as exc:
                problems.append(f"preflight: prompts: {c.job}: {exc}")
                lengths[(tok_dir, ds)] = []
    longest: dict[str, int] = {}
    over_by: dict[tuple, list] = {}  # (tokenizer, dataset, context): [jobs, prompts over, found]
    for c in jobs:
        tok_dir = _tokenizer_dir(c)
        for ds in c.datasets:
            found = lengths.get((tok_dir, ds))
            if not found:
                continue
            longest[ds] = max(found)
            over = sum(n > c.max_model_len - c.reserved for n in found)
            if over:
                key = (tok_dir, ds, c.max_model_len, c.reserved)
                over_by.setdefault(key, [[], over, found])[0].append(c.job)
    for (_, ds, limit, reserved), (names, over, found) in over_by.items():
        n = len(names) - 1
        more = f" (and {n} more job{'s' if n > 1 else ''})" if n else ""
        line = (f"preflight: prompts: {names[0]}{more}: {ds}: {over} of {len(found)} prompts are "
                f"longer than max_model_len {limit:,} less {reserved} tokens of output and "
                f"drafts (the longest: {max(found):,})")
        if over == len(found):
            problems.append(f"{line}: none fits; raise max_model_len")
        else:
            notes.append(f"{line}: the engine leaves them out ({promptfit.POLICY})")
    if not longest:  # nothing to measure yet: each engine job checks before its engine starts,
        return problems, notes  # and a clean dry run stays silent
    summary = "preflight: prompts: longest as each target's tokenizer counts it: " + ", ".join(
        f"{ds} {n:,} tokens" for ds, n in sorted(longest.items()))
    summary += f" (engine contexts {', '.join(sorted({f'{c.max_model_len:,}' for c in jobs}))})"
    if unchecked:
        summary += (f"; {', '.join(sorted(unchecked))}: checked by each engine job before its "
                    "engine starts" + ("" if can_tokenize else " (no transformers here)"))
    return problems, notes + [summary]
