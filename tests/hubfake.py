"""Test helpers for the download stage, with no network: a Hugging Face cache laid out by hand
(refs/, snapshots/, blobs/, as huggingface_hub writes it), a loopback HTTP endpoint that answers
the hub's error responses, and one that serves a repository for huggingface_hub to download (both
for HF_ENDPOINT; a download from it also writes huggingface_hub's tree listing, trees/<commit>.json,
as the Hub's would)."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import threading
import urllib.parse
from pathlib import Path


def _blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def repo_folder(cache: Path, repo_id: str, repo_type: str = "model") -> Path:
    return cache / f"{repo_type}s--{repo_id.replace('/', '--')}"


def lay_out_cache(cache: Path, repo_id: str, files: dict[str, bytes], *, commit: str = "a" * 40,
                  ref: str = "main", lfs: set[str] = frozenset(), repo_type: str = "model") -> Path:
    """Write files the way huggingface_hub caches them: each blob once under blobs/ (named by its
    sha256 for LFS files, by its git blob sha1 otherwise), symlinked from snapshots/<commit>/, and
    refs/<ref> holding the commit. Returns the snapshot folder."""
    root = repo_folder(cache, repo_id, repo_type)
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / ref).write_text(commit)
    snap = root / "snapshots" / commit
    for rel, data in files.items():
        if rel in lfs:
            blob_name = hashlib.sha256(data).hexdigest()
        else:
            blob_name = _blob_sha1(data)
        blob = root / "blobs" / blob_name
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snap / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(os.path.relpath(blob, link.parent))
    return snap


class _Handler(http.server.BaseHTTPRequestHandler):
    routes: dict = {}

    def log_message(self, *args):  # keep test output clean
        pass

    def _answer(self):
        self.server.requests.append((self.command, self.path))  # type: ignore[attr-defined]
        for needle, (status, code, message) in self.routes.items():
            if needle in self.path:
                body = json.dumps({"error": message}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("X-Error-Code", code)
                self.send_header("X-Error-Message", message)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)
                return
        self.send_response(500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD = do_POST = _answer


class FakeHub:
    """A loopback endpoint answering the hub's error responses: routes map a substring of the path
    to (status, X-Error-Code, message)."""

    def __init__(self, routes: dict):
        self._serve(type("H", (_Handler,), {"routes": routes}))

    def _serve(self, handler):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.requests = []
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def requests(self):
        return self.httpd.requests

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


class _RepoHandler(http.server.BaseHTTPRequestHandler):
    repo_id = ""
    commit = ""
    files: dict = {}
    lfs: frozenset = frozenset()

    def log_message(self, *args):  # keep test output clean
        pass

    def _send(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _answer(self):
        self.server.requests.append((self.command, self.path))  # type: ignore[attr-defined]
        path = urllib.parse.urlparse(self.path).path
        tree = f"/api/models/{self.repo_id}/tree/{self.commit}"
        resolve = f"/{self.repo_id}/resolve/{self.commit}/"
        if path in (tree, tree + "/"):
            listing = []
            for rel, data in sorted(self.files.items()):
                entry = {"type": "file", "path": rel, "size": len(data), "oid": _blob_sha1(data)}
                if rel in self.lfs:
                    entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data),
                                    "pointerSize": 130}
                listing.append(entry)
            return self._send(200, json.dumps(listing).encode(),
                              [("Content-Type", "application/json")])
        rel = urllib.parse.unquote(path[len(resolve):]) if path.startswith(resolve) else None
        if rel in self.files:
            data = self.files[rel]
            etag = hashlib.sha256(data).hexdigest() if rel in self.lfs else _blob_sha1(data)
            return self._send(200, data, [("X-Repo-Commit", self.commit),
                                          ("ETag", f'"{etag}"'),
                                          ("Content-Type", "application/octet-stream")])
        self._send(404, b'{"error": "not served"}', [("X-Error-Code", "EntryNotFound"),
                                                     ("Content-Type", "application/json")])

    do_GET = do_HEAD = _answer


class RepoHub(FakeHub):
    """A loopback endpoint serving one repository at one commit (for HF_ENDPOINT): its file listing
    and each file's content, as the Hub answers snapshot_download of a pinned commit."""

    def __init__(self, repo_id: str, files: dict[str, bytes], *, commit: str = "a" * 40,
                 lfs: set[str] = frozenset()):
        handler = type("H", (_RepoHandler,), {"repo_id": repo_id, "commit": commit,
                                               "files": dict(files), "lfs": frozenset(lfs)})
        self._serve(handler)


# --- stand-ins for the study's drafters -----------------------------------------------------------
# config/paper.yaml's drafters with a repository whose config.json the package does not ship (it
# ships the targets' only: their published files). The preflight needs each drafter's config.json
# (else the dry run stops), and the Hub is not reachable from the tests, so a test that runs the
# study's configuration lays these stand-ins out in its Hugging Face cache. They are NOT the
# published files: each has the shape of its kind (a dense Qwen2 draft model, a Llama-style EAGLE-3
# head) with the widths and vocabulary of the target it drafts for, so every fit check passes by
# construction; only that the preflight reads them is tested with them.
QWEN2_TARGET = "Qwen/Qwen2-57B-A14B-Instruct"
STUDY_DRAFTERS = {  # drafter repository -> the target repository it drafts for (None: a draft model)
    "Qwen/Qwen2-0.5B-Instruct": None,
    "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3": "Qwen/Qwen3-30B-A3B",
    "RedHatAI/Qwen3-235B-A22B-Instruct-2507-speculator.eagle3":
        "Qwen/Qwen3-235B-A22B-Instruct-2507",
    "nvidia/gpt-oss-120b-Eagle3-long-context": "openai/gpt-oss-120b",
}


def drafter_stand_in(repo_id: str) -> dict:
    """A stand-in config.json for one of STUDY_DRAFTERS (see there: not the published file)."""
    from specmoe.checks.preflight import shipped_config

    target = STUDY_DRAFTERS[repo_id]
    if target is None:  # a dense draft model of the Qwen2 target's tokenizer
        t = shipped_config(QWEN2_TARGET)
        return {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
                "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
                "num_key_value_heads": 2, "vocab_size": t["vocab_size"],
                "max_position_embeddings": 32768, "tie_word_embeddings": True,
                "torch_dtype": "bfloat16"}
    t = shipped_config(target)
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": t["hidden_size"], "num_hidden_layers": 1,
            "num_attention_heads": t["num_attention_heads"],
            "num_key_value_heads": t["num_key_value_heads"],
            "head_dim": t.get("head_dim") or t["hidden_size"] // t["num_attention_heads"],
            "intermediate_size": 4 * t["hidden_size"], "vocab_size": t["vocab_size"],
            "torch_dtype": "bfloat16"}


def lay_out_study_drafters(cache: Path) -> Path:
    """The stand-ins of every STUDY_DRAFTERS repository in the Hugging Face cache `cache` (its
    hub folder); returns it."""
    for repo in STUDY_DRAFTERS:
        lay_out_cache(cache, repo, {"config.json": json.dumps(drafter_stand_in(repo)).encode()})
    return cache
