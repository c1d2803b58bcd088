"""Test helpers for the download stage, with no network: a Hugging Face cache laid out by hand
(refs/, snapshots/, blobs/, as huggingface_hub writes it) and a loopback HTTP endpoint that answers
the hub's error responses (for HF_ENDPOINT)."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import threading
from pathlib import Path


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
            blob_name = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
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
        handler = type("H", (_Handler,), {"routes": routes})
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
