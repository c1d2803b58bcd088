"""Downloads from the Hugging Face Hub: the only stage of the pipeline that uses the network.

The Hugging Face cache is the store (`HF_HOME` / `HF_HUB_CACHE`, as huggingface_hub sets them):
weights are never copied into results/. A download writes a manifest: repo id, the commit it resolved
to, the snapshot path that later rules read, and every file with its size and sha256, computed from
its content (huggingface_hub checks only an LFS file's size: a cached blob whose content is not the
hub's hash that names it, an LFS file's sha256 or a git file's blob sha1, is refused).

- `revision` from the config is used as given; only a full commit pins the run: without one (or
  with a branch or tag) the newest commit is resolved once, recorded in the manifest, and a warning
  says the run is unpinned.
- `mode="full"`: what vLLM loads (safetensors and their index, config, generation config, tokenizer
  files), not duplicate `.bin`/`.pth`/`consolidated`/`original/` copies; `.bin` weights only where
  the repository has no safetensors (older EAGLE drafters). `mode="config"`: config.json,
  generation_config.json and the tokenizer, for the cost model without weights.
- With `HF_HUB_OFFLINE=1` everything resolves from the cache and nothing touches the network; where
  the Hub cannot be reached, a snapshot in the cache is used as huggingface_hub does. The weight
  format is then chosen as online, from the repository's listing that huggingface_hub cached on the
  online download (trees/<commit>.json), else from the files the snapshot holds.
- A weight index (*.index.json) naming a shard that the snapshot lacks stops the download.
- `HF_TOKEN` from the environment (huggingface_hub reads it).
- Every failure is one line naming the model and what to do (`InputError`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import importlib
import logging
import os
import re
import socket
import time
from pathlib import Path

from ..errors import InputError

log = logging.getLogger("specmoe")

CONFIG_PATTERNS = [
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "tokenizer.model", "special_tokens_map.json", "vocab.json", "merges.txt", "*.tiktoken",
    "tiktoken.model", "chat_template.jinja", "chat_template.json",
]
SAFETENSORS = ["*.safetensors", "*.safetensors.index.json"]
BIN = ["pytorch_model*.bin", "pytorch_model.bin.index.json"]
IGNORE = ["consolidated*", "original/*", "*.pth", "*.pt", "*.gguf", "*.onnx", "*.msgpack", "*.h5"]
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_GIT_SHA1 = COMMIT  # a file stored in git is cached under its blob's sha1: 40 hex digits


def check_repo_id(name: str, repo_id) -> str:
    if repo_id is None or repo_id == "":
        raise InputError(f"{name}: repo_id is not set; the study names none for this model: put "
                         "the Hugging Face repo id (owner/name) in the config")
    if not isinstance(repo_id, str) or not REPO_ID.match(repo_id):
        raise InputError(f"{name}: {repo_id!r} is not a Hugging Face repository id: it is "
                         "owner/name, e.g. Qwen/Qwen3-30B-A3B-FP8")
    return repo_id


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _errors():
    from huggingface_hub import errors

    return errors


def _transport_errors() -> tuple[type[BaseException], ...]:
    """What says the Hub could not be reached: the transport errors on which snapshot_download
    itself falls back to the cache (httpx2's from huggingface_hub 2 on, httpx's before), and the
    socket's own beneath them."""
    types: list[type[BaseException]] = [ConnectionError, TimeoutError, socket.gaierror]
    for mod in ("httpx2", "httpx"):
        with contextlib.suppress(ImportError):
            m = importlib.import_module(mod)
            types += [m.ConnectError, m.TimeoutException]
    return tuple(types)


class HubUnreachable(InputError):
    """The Hub could not be reached (worth another attempt, unlike every other download error)."""


# Seconds to wait before the second and third attempt of a Hub call that could not reach the Hub.
RETRY_WAITS_S = (5.0, 20.0)


def _network(call, name: str, repo_id: str, revision: str | None, *, local: bool = False):
    """A Hub call, tried again after RETRY_WAITS_S when the Hub cannot be reached; any other
    failure (gated, not found, not in an offline cache, disk full) is final at once, one line,
    and so is every failure of a call that reads the cache alone (local: another try reads the
    same cache)."""
    waits = () if local else RETRY_WAITS_S
    for attempt in range(len(waits) + 1):
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - mapped to one line
            err = _explain(name, repo_id, revision, exc)
            if not isinstance(err, HubUnreachable) or attempt == len(waits):
                raise err from None
            log.warning("%s (attempt %d of %d: trying again in %.0f s)", err, attempt + 1,
                        len(waits) + 1, waits[attempt])
            time.sleep(waits[attempt])


def _explain(name: str, repo_id: str, revision: str | None, exc: BaseException) -> InputError:
    """The most specific cause in the exception chain, as one line."""
    errs = _errors()
    chain, e = [], exc
    while e is not None and e not in chain:
        chain.append(e)
        e = e.__cause__ or e.__context__
    rev = revision or "main"
    for e in chain:
        if isinstance(e, errs.GatedRepoError):
            return InputError(f"{name}: {repo_id} is gated: accept its terms on the Hub with your "
                              "account and set HF_TOKEN to a token of that account")
        if isinstance(e, errs.RevisionNotFoundError):
            return InputError(f"{name}: revision '{rev}' does not exist in {repo_id}: fix "
                              "`revision` in the config (or remove it to take the newest commit)")
        if isinstance(e, errs.RepositoryNotFoundError):
            return InputError(f"{name}: repository {repo_id} was not found on the Hub: check "
                              "`repo_id` (a private repository also needs HF_TOKEN)")
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            return InputError(f"{name}: the disk is full while downloading {repo_id}: free space "
                              "or point HF_HOME at a larger disk, then rerun")
    # not (completely) in the cache; the names differ between huggingface_hub releases
    missing = tuple(getattr(errs, n) for n in ("LocalEntryNotFoundError",
                                               "IncompleteSnapshotError", "OfflineModeIsEnabled")
                    if hasattr(errs, n))
    for e in chain:
        if isinstance(e, missing):
            if offline():
                return InputError(f"{name}: {repo_id}@{rev} is not (completely) in the Hugging Face "
                                  "cache and HF_HUB_OFFLINE=1 forbids downloading: unset it, or "
                                  "download on a machine with network into the same HF_HOME")
            return HubUnreachable(f"{name}: could not reach the Hub for {repo_id}@{rev} and it is "
                                  f"not in the cache ({type(exc).__name__}): check the network or "
                                  "HF_ENDPOINT")
    if any(isinstance(e, _transport_errors()) for e in chain):
        return HubUnreachable(f"{name}: could not reach the Hub for {repo_id}@{rev} "
                              f"({type(exc).__name__}): check the network or HF_ENDPOINT, or set "
                              "HF_HUB_OFFLINE=1 to use the Hugging Face cache alone")
    return InputError(f"{name}: download of {repo_id}@{rev} failed: "
                      f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")


def _weight_patterns(files: list[str]) -> list[str]:
    """The one choice of weight format, from a repository's files: safetensors where it has any,
    else pytorch_model*.bin (online from the Hub's listing, from the cache from its tree listing or
    the files the snapshot holds)."""
    kept = [f for f in files if not any(Path(f).match(p) or f.startswith("original/")
                                        for p in IGNORE)]
    if any(f.endswith(".safetensors") for f in kept):
        return SAFETENSORS
    if any(f.endswith(".bin") for f in kept):
        return BIN
    raise InputError("no safetensors or pytorch_model*.bin weights in the repository")


def _cached_listing(repo_id: str, repo_type: str, commit: str,
                    cache_dir: str | None) -> list[str] | None:
    """The repository's files at `commit` as huggingface_hub cached them on an online download
    (trees/<commit>.json, from huggingface_hub 2 on), or None where no listing is cached."""
    try:
        from huggingface_hub import get_cached_repo_tree
    except ImportError:  # an older huggingface_hub caches no tree listing
        return None
    not_cached = getattr(_errors(), "CachedRepoTreeNotFoundError", ())
    try:
        return [f.path for f in get_cached_repo_tree(repo_id, repo_type=repo_type,
                                                     revision=commit, cache_dir=cache_dir)]
    except not_cached:
        return None


def _present(snapshot: Path) -> list[str]:
    """The files a cache snapshot holds (its links that resolve), relative to it."""
    return [p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*")
            if p.is_file() or (p.is_symlink() and p.exists())]


def _missing_shards(snapshot: Path, files: list[str]) -> list[tuple[str, list[str]]]:
    """Each weight index among `files` (*.index.json with a weight_map) with the shards it names
    that are not among `files`: the loader needs every one of them."""
    import json

    have = set(files)
    missing = []
    for rel in files:
        if not rel.endswith(".index.json"):
            continue
        try:
            index = json.loads((snapshot / rel).read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"{rel} in {snapshot} is not a readable weight index ({exc}): delete "
                             "it and download again") from None
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict):
            continue
        folder = Path(rel).parent
        shards = sorted({(folder / s).as_posix() for s in weight_map.values()
                         if isinstance(s, str)})
        absent = [s for s in shards if s not in have]
        if absent:
            missing.append((rel, absent))
    return missing


def _file_record(name: str, snapshot: Path, rel: str) -> dict:
    """A file's size and the sha256 of its content. huggingface_hub names a cached blob by the
    hub's hash of it and never checks it (an LFS file's size alone): an LFS blob is named by its
    sha256, a file stored in git by its git blob sha1 (git_hash); a blob whose content is not the
    one its name says is refused."""
    from huggingface_hub.utils.sha import git_hash

    real = (snapshot / rel).resolve()
    h = hashlib.sha256()
    git = _GIT_SHA1.match(real.name)
    with open(real, "rb") as fh:
        if git:  # a file stored in git: small (the Hub keeps larger ones in LFS)
            data = fh.read()
            h.update(data)
            actual, kind = git_hash(data), "git blob sha1"
        else:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    sha256 = h.hexdigest()
    if _SHA256.match(real.name):
        actual, kind = sha256, "sha256"
    if (git or _SHA256.match(real.name)) and real.name != actual:
        raise InputError(f"{name}: {rel} in the Hugging Face cache is corrupt: its content's "
                         f"{kind} is {actual[:12]}, not the hub's {real.name[:12]}: delete {real} "
                         "and download again")
    return {"path": rel, "size": real.stat().st_size, "sha256": sha256,
            "sha256_source": "hub-lfs" if _SHA256.match(real.name) else "computed"}


def download(name: str, repo_id, revision: str | None = None, *, mode: str = "full",
             repo_type: str = "model", trust_remote_code: bool = False,
             allow_patterns: list[str] | None = None, cache_dir: str | None = None,
             pin_hint: str = "put the recorded commit in the config as `revision` to pin it"
             ) -> dict:
    """Resolve (and fetch unless offline) one repository into the HF cache; return its manifest.
    pin_hint: how to pin an unpinned download, for the warning (the config's key, a flag)."""
    from huggingface_hub import HfApi, snapshot_download

    repo_id = check_repo_id(name, repo_id)
    if mode not in ("full", "config"):
        raise InputError(f"{name}: unknown download mode '{mode}' (full, config)")
    pinned = revision is not None and bool(COMMIT.match(revision))
    if not pinned:
        given = ("no revision given" if revision is None else
                 f"revision '{revision}' is a branch or tag, not a commit")
        log.warning("%s: %s: taking the newest commit of %s and recording it in the manifest; "
                    "this run is unpinned (%s)", name, given, repo_id, pin_hint)
    patterns = list(allow_patterns or [])
    ignore = None
    # offline, or where the Hub cannot be reached, the weight format is chosen from the cache:
    # snapshot_download checks a snapshot against huggingface_hub's tree listing with exactly the
    # patterns it is given, so it is given the chosen format's alone
    from_cache = offline()
    weights_from_cache = False
    if repo_type == "model" and not allow_patterns:
        patterns = list(CONFIG_PATTERNS) + (["*.py"] if trust_remote_code else [])
        if mode == "full":
            ignore = IGNORE
            if not from_cache:
                try:
                    files = HfApi().list_repo_files(repo_id, revision=revision,
                                                    repo_type=repo_type)
                except Exception as exc:  # noqa: BLE001 - mapped to one line
                    err = _explain(name, repo_id, revision, exc)
                    if not isinstance(err, HubUnreachable):
                        raise err from None
                    log.warning("%s (taking the weights that the cached snapshot holds)", err)
                    from_cache = True
            if from_cache:
                weights_from_cache = True
            else:
                try:
                    patterns += _weight_patterns(files)
                except InputError as exc:
                    raise InputError(f"{name}: {repo_id}: {exc}") from None

    def fetch(allow: list[str]) -> Path:
        snap = Path(_network(lambda: snapshot_download(
            repo_id, repo_type=repo_type, revision=revision, allow_patterns=allow,
            ignore_patterns=ignore, cache_dir=cache_dir, local_files_only=from_cache),
            name, repo_id, revision, local=from_cache))
        if not COMMIT.match(snap.name):
            raise InputError(f"{name}: {snap} is not a Hugging Face cache snapshot")
        return snap

    def refetch(what: str) -> str:
        return (f"rerun without HF_HUB_OFFLINE to fetch {what}" if offline() else
                f"the Hub could not be reached to fetch {what}: check the network or HF_ENDPOINT")

    present: tuple[Path, list[str]] | None = None  # a snapshot walked already, and its files
    if weights_from_cache:
        snapshot = fetch(patterns)  # the config files first: which snapshot, and is it there
        listing = _cached_listing(repo_id, repo_type, snapshot.name, cache_dir)
        if listing is None:
            present = (snapshot, _present(snapshot))
        try:  # the repository's listing where cached (as online), else the files the cache holds
            patterns += _weight_patterns(present[1] if listing is None else listing)
        except InputError as exc:
            if listing is not None:
                raise InputError(f"{name}: {repo_id}: {exc}") from None
            # none in the cache: reported below, with the snapshot's other files checked
    snapshot = fetch(patterns)
    commit = snapshot.name
    from huggingface_hub.utils import filter_repo_objects

    # the snapshot may hold more than this mode asked for (another mode's download of the repo)
    held = present[1] if present and present[0] == snapshot else _present(snapshot)
    files = sorted(filter_repo_objects(held, allow_patterns=patterns or None,
                                       ignore_patterns=ignore))
    if allow_patterns and not files:  # a dataset's files: its prompt table would fail later
        raise InputError(f"{name}: no file of {repo_id}@{commit[:12]} matches "
                         f"{', '.join(patterns)}: check `files` in the config"
                         + (f", or {refetch('them')}" if from_cache else ""))
    if repo_type == "model" and "config.json" not in files:
        raise InputError(f"{name}: {repo_id}@{commit[:12]} has no config.json")
    if repo_type == "model" and mode == "full" and not any(
            f.endswith((".safetensors", ".bin")) for f in files):
        raise InputError(f"{name}: {repo_id}@{commit[:12]} has no weights in the cache "
                         f"({snapshot}); {refetch('them')}")
    try:
        missing = _missing_shards(snapshot, files)
    except InputError as exc:
        raise InputError(f"{name}: {repo_id}@{commit[:12]}: {exc}") from None
    if missing:
        index, absent = missing[0]
        fix = (refetch("them") if from_cache else "the repository does not hold them at this "
               f"commit: check `revision`, or delete {snapshot} and download again")
        raise InputError(f"{name}: {repo_id}@{commit[:12]}: {index} names {len(absent)} "
                         f"shard(s) absent from the snapshot ({', '.join(absent[:3])}"
                         f"{', ...' if len(absent) > 3 else ''}); {fix}")
    records = [_file_record(name, snapshot, f) for f in files]
    return {"name": name, "repo_id": repo_id, "repo_type": repo_type, "mode": mode,
            "revision_requested": revision, "commit": commit, "pinned": pinned,
            "snapshot_path": str(snapshot), "offline": offline(), "files": records,
            "total_bytes": sum(r["size"] for r in records)}


def snapshot_of(manifest_or_dir) -> Path:
    """The model directory a later rule reads: a download manifest's snapshot, or a directory.
    Every file of the manifest is in the snapshot at its recorded size (not hashed again: the
    download did), else InputError naming the first one that is not: a blob deleted from the
    cache after the download would otherwise fail the engine job inside vLLM."""
    import json

    p = Path(manifest_or_dir)
    if p.is_dir():
        return p
    try:
        man = json.loads(p.read_text())
        snap, files = Path(man["snapshot_path"]), list(man["files"])
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise InputError(f"{p}: not a download manifest ({type(exc).__name__}: {exc})") from None
    rerun = "rerun the download rule (snakemake --forcerun download_model)"
    if not (snap / "config.json").exists():
        raise InputError(f"{p}: its snapshot {snap} is gone from the Hugging Face cache: {rerun}")
    for f in files:
        path = snap / f["path"]
        size = path.stat().st_size if path.exists() else None
        if size != f["size"]:
            found = "is gone" if size is None else f"has {size} bytes, not {f['size']}"
            raise InputError(f"{p}: {f['path']} of its snapshot {snap} {found} in the Hugging "
                             f"Face cache: {rerun}")
    return snap
