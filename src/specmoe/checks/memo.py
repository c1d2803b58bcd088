"""An answer the checks computed once, kept by the question it answers: a JSON file named by the
digest of everything the answer depends on (the question, the versions of what computed it, the
contents of the files it read, specmoe's own code that builds what it is asked: source_digest),
so a changed input asks again and an unchanged one is read back
without importing what computed it (vLLM's checks, transformers' tokenizers)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

# a model folder's weights: never what a tokenizer or a configuration is read from
WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".msgpack", ".h5", ".ckpt", ".onnx")


def cached(cache_dir: str | Path | None, kind: str, question: str, compute: Callable[[], object]):
    """compute()'s answer (JSON-serialisable), kept in cache_dir/<kind>-<digest of question>.json
    and read back when the same question is asked again; computed each time without cache_dir.
    A file that does not read back as JSON (cut short) is asked again and replaced. An
    exception from compute is raised as it is, and nothing is kept. Two processes that keep the
    same answer at once both finish (a shared file: provenance.atomic_path): workflows parsed
    side by side may share cache_dir."""
    from ..provenance import write_text

    digest = hashlib.sha256(question.encode()).hexdigest()[:16]
    path = Path(cache_dir) / f"{kind}-{digest}.json" if cache_dir else None
    if path is not None and path.is_file():
        try:
            return json.loads(path.read_text())
        except ValueError:
            pass
    answer = compute()
    if path is not None:
        write_text(path, json.dumps(answer), shared=True)
    return answer


def file_digests(folder: str | Path) -> dict[str, str]:
    """sha256 of each file directly in folder (links followed), weights left out: what a
    tokenizer or a configuration read from that folder can depend on."""
    out = {}
    for p in sorted(Path(folder).iterdir()):
        if p.is_file() and not p.name.endswith(WEIGHTS):
            out[p.name] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def source_digest(*files: str) -> str:
    """sha256 of specmoe's own source files an answer depends on (paths in the package:
    "runtime/engine.py"), each with its name: a kept answer is asked again after an update of
    the code that built its question or computed it, not only after one of vLLM or the
    tokenizers."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for name in files:
        h.update(name.encode() + b"\0")
        h.update(hashlib.sha256((root / name).read_bytes()).digest())
    return h.hexdigest()
