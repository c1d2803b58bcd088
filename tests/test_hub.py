"""The download stage, for real and with no network: huggingface_hub's snapshot_download against a
cache laid out by hand with HF_HUB_OFFLINE=1, and against a loopback HF_ENDPOINT that answers the
hub's error responses. Each case runs `specmoe download` in a fresh process, as the rule does, since
huggingface_hub reads HF_ENDPOINT and HF_HUB_OFFLINE at import."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hubfake import FakeHub, RepoHub, lay_out_cache, repo_folder

pytest.importorskip("huggingface_hub")

FIXTURES = Path(__file__).parents[1] / "src" / "specmoe" / "data" / "hf_configs"
WEIGHTS = b"\x00" * 4096 + b"weights"


def run_download(args, env_extra, tmp_path, *, no_backoff=False):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_HUB_CACHE=str(tmp_path / "hf" / "hub"),
               HF_HUB_DISABLE_TELEMETRY="1", **env_extra)
    if no_backoff:
        # huggingface_hub's http_backoff sleeps 1+2+4+8+8 s between its retries of a connection
        # that fails; a sitecustomize in the child process makes time.sleep return at once, so
        # the retries (and the fall-back after them) still happen, without the 45 s of waiting
        site = tmp_path / "no_backoff"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text("import time\ntime.sleep = lambda s: None\n")
        env["PYTHONPATH"] = os.pathsep.join(
            [str(site)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    return subprocess.run([sys.executable, "-m", "specmoe.cli", "download", *args, "--json"],
                          capture_output=True, text=True, env=env, timeout=120)


def qwen_cache(tmp_path, commit="c" * 40):
    config = (FIXTURES / "Qwen3-30B-A3B-FP8.json").read_bytes()
    return lay_out_cache(tmp_path / "hf" / "hub", "Qwen/Qwen3-30B-A3B-FP8", {
        "config.json": config,
        "tokenizer.json": b'{"version": "1.0"}',
        "model-00001-of-00001.safetensors": WEIGHTS,
        "model.safetensors.index.json": b'{"weight_map": {}}',
    }, commit=commit, lfs={"model-00001-of-00001.safetensors"})


def test_offline_download_resolves_from_the_cache_with_lfs_sha256(tmp_path):
    snap = qwen_cache(tmp_path)
    r = run_download(["Qwen/Qwen3-30B-A3B-FP8", "--out", str(tmp_path / "m.json")],
                     {"HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}, tmp_path)
    assert r.returncode == 0, r.stderr
    man = json.loads(r.stdout)
    assert man["commit"] == "c" * 40 and man["snapshot_path"] == str(snap)
    assert not man["pinned"] and "unpinned" in r.stderr  # no revision: warned, commit recorded
    files = {f["path"]: f for f in man["files"]}
    w = files["model-00001-of-00001.safetensors"]
    assert w["sha256"] == hashlib.sha256(WEIGHTS).hexdigest() and w["sha256_source"] == "hub-lfs"
    assert w["size"] == len(WEIGHTS)
    c = files["config.json"]
    assert c["sha256"] == hashlib.sha256((FIXTURES / "Qwen3-30B-A3B-FP8.json").read_bytes()
                                         ).hexdigest() and c["sha256_source"] == "computed"
    on_disk = json.loads((tmp_path / "m.json").read_text())
    assert on_disk["commit"] == man["commit"] and "provenance" in on_disk


def test_offline_pinned_revision_and_config_only_mode(tmp_path):
    qwen_cache(tmp_path, commit="d" * 40)
    r = run_download(["Qwen/Qwen3-30B-A3B-FP8", "--revision", "d" * 40, "--mode", "config"],
                     {"HF_HUB_OFFLINE": "1"}, tmp_path)
    assert r.returncode == 0, r.stderr
    man = json.loads(r.stdout)
    assert man["pinned"] and man["mode"] == "config" and "unpinned" not in r.stderr


def test_offline_without_the_repo_in_the_cache_is_one_line(tmp_path):
    (tmp_path / "hf" / "hub").mkdir(parents=True)
    r = run_download(["Qwen/Qwen3-30B-A3B-FP8", "--name", "qwen3-30b"],
                     {"HF_HUB_OFFLINE": "1"}, tmp_path)
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()[-1]
    assert err.startswith("specmoe: error: qwen3-30b:") and "HF_HUB_OFFLINE=1" in err


def test_offline_full_mode_without_weights_in_the_cache(tmp_path):
    lay_out_cache(tmp_path / "hf" / "hub", "Qwen/Qwen3-30B-A3B-FP8",
                  {"config.json": (FIXTURES / "Qwen3-30B-A3B-FP8.json").read_bytes()})
    r = run_download(["Qwen/Qwen3-30B-A3B-FP8"], {"HF_HUB_OFFLINE": "1"}, tmp_path)
    assert r.returncode == 2 and "no weights in the cache" in r.stderr



def test_a_branch_is_not_a_pin(tmp_path):
    """Only a full commit pins a download: a branch such as "main" moves, so it is warned about as
    unpinned and the commit it resolved to is recorded."""
    qwen_cache(tmp_path)
    r = run_download(["Qwen/Qwen3-30B-A3B-FP8", "--revision", "main", "--mode", "config"],
                     {"HF_HUB_OFFLINE": "1"}, tmp_path)
    assert r.returncode == 0, r.stderr
    man = json.loads(r.stdout)
    assert man["revision_requested"] == "main" and man["commit"] == "c" * 40
    assert not man["pinned"] and "'main' is a branch or tag" in r.stderr and "unpinned" in r.stderr


def test_a_corrupt_lfs_blob_of_the_right_size_is_refused(tmp_path):
    """An LFS blob is named by the hub's sha256 and huggingface_hub checks only its size: a cached
    blob with other content of the same size is refused, not recorded under the hub's hash."""
    snap = qwen_cache(tmp_path)
    blob = (snap / "model-00001-of-00001.safetensors").resolve()
    blob.write_bytes(b"\xff" * len(WEIGHTS))
    r = run_download(["Qwen/Qwen3-30B-A3B-FP8", "--revision", "c" * 40, "--name", "qwen3-30b"],
                     {"HF_HUB_OFFLINE": "1"}, tmp_path)
    assert r.returncode == 2, r.stdout
    err = r.stderr.strip().splitlines()[-1]
    assert err.startswith("specmoe: error: qwen3-30b: model-00001-of-00001.safetensors in the "
                          "Hugging Face cache is corrupt") and str(blob) in err


def test_a_corrupt_git_blob_is_refused(tmp_path):
    """A file stored in git, not LFS (tokenizer.json), is cached under its git blob sha1, which
    huggingface_hub never checks either: a truncated one is refused, not recorded under a sha256
    computed from what is left of it."""
    snap = qwen_cache(tmp_path)
    blob = (snap / "tokenizer.json").resolve()
    blob.write_bytes(blob.read_bytes()[:-4])
    r = run_download(["Qwen/Qwen3-30B-A3B-FP8", "--revision", "c" * 40, "--name", "qwen3-30b"],
                     {"HF_HUB_OFFLINE": "1"}, tmp_path)
    assert r.returncode == 2, r.stdout
    err = r.stderr.strip().splitlines()[-1]
    assert err.startswith("specmoe: error: qwen3-30b: tokenizer.json in the Hugging Face cache "
                          "is corrupt") and str(blob) in err


def test_full_mode_reads_a_cached_pinned_snapshot_when_the_hub_cannot_be_reached(tmp_path):
    """Nothing listens at HF_ENDPOINT and HF_HUB_OFFLINE is unset: listing the repository's files
    cannot connect, so the weights are taken from the cached snapshot as offline (as
    snapshot_download itself falls back to the cache), with a warning instead of a failure."""
    snap = qwen_cache(tmp_path)
    r = run_download(["Qwen/Qwen3-30B-A3B-FP8", "--revision", "c" * 40],
                     {"HF_ENDPOINT": "http://127.0.0.1:9"}, tmp_path, no_backoff=True)
    assert r.returncode == 0, r.stderr[-2000:]
    man = json.loads(r.stdout)
    assert man["pinned"] and man["snapshot_path"] == str(snap) and not man["offline"]
    assert {f["path"] for f in man["files"]} == {
        "config.json", "tokenizer.json", "model-00001-of-00001.safetensors",
        "model.safetensors.index.json"}
    assert "could not reach the Hub" in r.stderr and "cached snapshot" in r.stderr

def error_line(r) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("specmoe: error:")]
    assert len(lines) == 1, r.stderr[-2000:]
    return lines[0]


CONFIG = b'{"model_type": "x"}'
SHARDS = {"model-00001-of-00002.safetensors": b"\x01" * 64,
          "model-00002-of-00002.safetensors": b"\x02" * 64}
SHARD_INDEX = json.dumps({"metadata": {"total_size": 128}, "weight_map": {
    "a.weight": "model-00001-of-00002.safetensors",
    "b.weight": "model-00002-of-00002.safetensors"}}).encode()


def test_where_the_hub_cannot_be_reached_the_cache_is_read_without_asking_it_again(
        tmp_path, monkeypatch):
    """Once listing the repository's files finds the Hub unreachable, every snapshot_download
    after it reads the cache alone (local_files_only): asking the network again would only wait
    through huggingface_hub's retries (about 23 s a call on a refused port) to end in the same
    cache. In process, with the listing refused and snapshot_download recorded: the recorder
    reads the cache whatever it is asked, so no call goes to the network."""
    import huggingface_hub

    from specmoe.sources import hub

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "RETRY_WAITS_S", ())
    cache = tmp_path / "hf" / "hub"
    snap = lay_out_cache(cache, "acme/m", {"config.json": CONFIG,
                                           "model.safetensors": b"\x03" * 64},
                         commit="a" * 40, lfs={"model.safetensors"})

    def refused(self, *args, **kwargs):
        raise ConnectionError("[Errno 111] Connection refused")

    asked = []
    real = huggingface_hub.snapshot_download

    def recorded(*args, local_files_only=False, **kwargs):
        asked.append(local_files_only)
        return real(*args, local_files_only=True, **kwargs)

    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", refused)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", recorded)
    man = hub.download("m", "acme/m", "a" * 40, cache_dir=str(cache))
    assert man["snapshot_path"] == str(snap) and not man["offline"]
    assert [f["path"] for f in man["files"]] == ["config.json", "model.safetensors"]
    assert asked and all(asked), asked


def test_a_read_of_the_cache_alone_is_not_tried_again_and_a_network_call_is(tmp_path,
                                                                           monkeypatch):
    """Where the Hub cannot be reached, the cache is read alone (local_files_only): a repository
    that is not in it is final at once, one call and no wait (trying it again after 5 and 20 s
    reads the same cache); a call that may reach the Hub is tried again after those waits."""
    import huggingface_hub

    from specmoe.sources import hub

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    sleeps, asked = [], []
    monkeypatch.setattr(hub.time, "sleep", sleeps.append)

    def refused(*args, **kwargs):
        raise ConnectionError("[Errno 111] Connection refused")

    real = huggingface_hub.snapshot_download

    def recorded(*args, local_files_only=False, **kwargs):
        asked.append(local_files_only)
        if not local_files_only:
            refused()
        return real(*args, local_files_only=True, **kwargs)

    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", refused)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", recorded)
    cache = str(tmp_path / "hf" / "hub")
    with pytest.raises(hub.HubUnreachable, match="not in the cache"):
        hub.download("m", "acme/m", "a" * 40, cache_dir=cache)
    assert (asked, sleeps) == ([True], [])
    asked.clear()
    with pytest.raises(hub.HubUnreachable, match="could not reach the Hub"):
        hub.download("d", "acme/d", "a" * 40, repo_type="dataset",
                     allow_patterns=["question.jsonl"], cache_dir=cache)
    assert (asked, sleeps) == ([False] * 3, list(hub.RETRY_WAITS_S))


def test_a_download_online_reruns_offline_from_the_same_cache(tmp_path):
    """The documented workflow: download with network (huggingface_hub 2 also caches the
    repository's whole file listing, trees/<commit>.json), then run with HF_HUB_OFFLINE=1 or where
    the Hub cannot be reached. A repository shipping safetensors and a pytorch_model.bin copy gets
    its safetensors only, and the cache holding them is complete for the reruns: snapshot_download
    checks a snapshot against that listing with exactly the patterns it is given, so the reruns
    must ask for the format the online download took, not both (which it refused)."""
    repo = {"config.json": CONFIG, "model.safetensors": b"\x03" * 64,
            "pytorch_model.bin": b"\x04" * 96}
    commit = "e" * 40
    with RepoHub("acme/both", repo, commit=commit,
                 lfs={"model.safetensors", "pytorch_model.bin"}) as hub:
        r = run_download(["acme/both", "--revision", commit], {"HF_ENDPOINT": hub.url}, tmp_path)
        assert hub.requests, "the download never asked the endpoint"
    assert r.returncode == 0, r.stderr[-2000:]
    online = json.loads(r.stdout)
    assert [f["path"] for f in online["files"]] == ["config.json", "model.safetensors"]
    listing = repo_folder(tmp_path / "hf" / "hub", "acme/both") / "trees" / f"{commit}.json"
    assert "pytorch_model.bin" in json.loads(listing.read_text())["files"]

    r = run_download(["acme/both", "--revision", commit], {"HF_HUB_OFFLINE": "1"}, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["files"] == online["files"]
    r = run_download(["acme/both", "--revision", commit], {"HF_ENDPOINT": "http://127.0.0.1:9"},
                     tmp_path, no_backoff=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["files"] == online["files"]
    assert "could not reach the Hub" in r.stderr


@pytest.mark.parametrize("env,fix", [
    ({"HF_HUB_OFFLINE": "1"}, "rerun without HF_HUB_OFFLINE to fetch them"),
    ({"HF_ENDPOINT": "http://127.0.0.1:9"}, "the Hub could not be reached to fetch them"),
])
def test_a_cached_sharded_checkpoint_missing_a_shard_is_refused(tmp_path, env, fix):
    """A cache with no tree listing (an older huggingface_hub, a copied cache) that holds one of
    two shards its index names: snapshot_download cannot tell it is incomplete, so it would be
    accepted and the GPU job fail at model load; it is refused in one line naming the shard."""
    first = "model-00001-of-00002.safetensors"
    lay_out_cache(tmp_path / "hf" / "hub", "acme/sharded", {
        "config.json": CONFIG, "model.safetensors.index.json": SHARD_INDEX,
        first: SHARDS[first]}, lfs={first})
    r = run_download(["acme/sharded", "--revision", "a" * 40, "--name", "sharded"], env,
                     tmp_path, no_backoff=True)
    assert r.returncode == 2, r.stdout
    err = error_line(r)
    assert err.startswith("specmoe: error: sharded: acme/sharded@aaaaaaaaaaaa: "
                          "model.safetensors.index.json names 1 shard(s) absent from the "
                          "snapshot (model-00002-of-00002.safetensors)") and fix in err, err


def test_an_index_naming_a_shard_the_repository_lacks_is_refused_online(tmp_path):
    """Online, every shard the weight index names must be in the snapshot after the download."""
    first = "model-00001-of-00002.safetensors"
    with RepoHub("acme/broken", {"config.json": CONFIG,
                                 "model.safetensors.index.json": SHARD_INDEX,
                                 first: SHARDS[first]}, lfs={first}) as hub:
        r = run_download(["acme/broken", "--revision", "a" * 40, "--name", "broken"],
                         {"HF_ENDPOINT": hub.url}, tmp_path)
    assert r.returncode == 2, r.stdout
    err = error_line(r)
    assert "names 1 shard(s) absent from the snapshot (model-00002-of-00002.safetensors)" in err
    assert "the repository does not hold them at this commit" in err


@pytest.mark.parametrize("status,code,expect", [
    (404, "RepoNotFound", "was not found on the Hub"),
    (401, "GatedRepo", "is gated"),
    (404, "RevisionNotFound", "does not exist in"),
])
def test_hub_errors_from_a_loopback_endpoint(tmp_path, status, code, expect):
    with FakeHub({"/api/": (status, code, "answer of the fake hub")}) as hub:
        r = run_download(["acme/moe-model", "--revision", "v1", "--name", "acme-moe"],
                         {"HF_ENDPOINT": hub.url}, tmp_path)
        assert hub.requests, "the download never asked the endpoint"
    assert r.returncode == 2, r.stdout
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("specmoe: error:")]
    assert len(lines) == 1 and lines[0].startswith("specmoe: error: acme-moe:"), r.stderr
    assert expect in lines[0]
    assert not list((tmp_path / "hf" / "hub").glob("*/snapshots/*")), "partial snapshot left"


def test_unset_repo_id_is_named(tmp_path):
    from specmoe.errors import InputError
    from specmoe.sources.hub import check_repo_id

    with pytest.raises(InputError, match="Kimi-K2.5: repo_id is not set"):
        check_repo_id("Kimi-K2.5", None)
    assert check_repo_id("x", "moonshotai/Kimi-K2.5") == "moonshotai/Kimi-K2.5"


@pytest.mark.parametrize("damage", ["deleted", "truncated"])
def test_a_snapshot_missing_a_file_of_its_manifest_is_refused(tmp_path, monkeypatch, damage):
    """The rules that read a download (its engine jobs among them) take its snapshot only where
    every file of its manifest is there at its recorded size: a weight blob deleted from the
    cache (or cut short) after the download is one line naming it, not a failure inside vLLM."""
    from specmoe.errors import InputError
    from specmoe.sources import hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cache = tmp_path / "hf" / "hub"
    snap = lay_out_cache(cache, "acme/m", {"config.json": CONFIG,
                                           "model.safetensors": b"\x03" * 64},
                         commit="a" * 40, lfs={"model.safetensors"})
    man = tmp_path / "acme--m.full.json"
    man.write_text(json.dumps(hub.download("m", "acme/m", "a" * 40, cache_dir=str(cache))))
    assert hub.snapshot_of(man) == snap
    blob = (snap / "model.safetensors").resolve()
    if damage == "deleted":
        blob.unlink()
    else:
        blob.write_bytes(b"\x03" * 10)
    with pytest.raises(InputError, match=r"model\.safetensors.*rerun the download"):
        hub.snapshot_of(man)


def test_provenance_names_where_a_checkpoint_comes_from(tmp_path):
    """A Hugging Face snapshot is "hf" at its commit, a model the pipeline trained is "tiny" at
    the revision of its manifest (the capture and profile stages once wrote "tiny" for both)."""
    from specmoe.stages.engines import model_provenance

    snap = lay_out_cache(tmp_path / "hub", "specmoe-test/tiny-moe", {"config.json": b"{}"},
                         commit="c" * 40)
    assert model_provenance("study-model", snap) == {
        "name": "study-model", "source": "hf", "revision": "c" * 40}
    tiny = tmp_path / "models" / "t"
    tiny.mkdir(parents=True)
    (tiny / "manifest.json").write_text(json.dumps(
        {"provenance": {"model": {"revision": "seed0-steps60"}}}))
    assert model_provenance("t-bf16", tiny) == {
        "name": "t-bf16", "source": "tiny", "revision": "seed0-steps60"}
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "config.json").write_text("{}")
    assert model_provenance("x", other)["source"] == "local"
