"""A real headless Chromium, driven over the DevTools protocol, for opening the reports.

`open_page(url)` loads a page and returns what a reader's browser saw: the number of images, the
ones that did not load, the page's text and any JavaScript exceptions. Chromium comes from the
distribution (`chromium-headless-shell`, installed by .ci/run); where it is missing the tests that
need it skip, unless SPECMOE_REQUIRE_BROWSER=1 makes them fail.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

CANDIDATES = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")


def chromium() -> str:
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("SPECMOE_REQUIRE_BROWSER") == "1":
        pytest.fail("no headless Chromium (apt-get install chromium-headless-shell)")
    pytest.skip("no headless Chromium installed")


CHECK = """(() => {
  const imgs = Array.from(document.images);
  return JSON.stringify({
    images: imgs.length,
    broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src.slice(0, 80)),
    text: document.body ? document.body.innerText : "",
    // tables whose box runs past the right edge of the page's column
    overflowing: document.body ? Array.from(document.querySelectorAll("table")).filter(
      t => t.getBoundingClientRect().right > document.body.getBoundingClientRect().right + 1
    ).length : 0,
  });
})()"""


# Snakemake's HTML report keeps every result in a global `results` (path -> caption, data URI):
# decode each image as the report's viewer would, and look for reStructuredText errors in captions.
SNAKEMAKE_REPORT = """(async () => {
  const out = {items: Object.keys(results), images: 0, broken: [], caption_errors: [],
               empty: [], text: document.body.innerText};
  for (const [path, r] of Object.entries(results)) {
    if (/System Message|Unknown target|Undefined substitution/.test(r.caption || ""))
      out.caption_errors.push(path);
    if (!r.data_uri || r.data_uri.split(",")[1].length < 100) out.empty.push(path);
    if (path.endsWith(".png")) {
      out.images += 1;
      const img = new Image();
      img.src = r.data_uri;
      try { await img.decode(); } catch (e) { out.broken.push(path); continue; }
      if (!img.naturalWidth) out.broken.push(path);
    }
  }
  return JSON.stringify(out);
})()"""


def open_page(url: str, settle_s: float = 3.0, timeout_s: float = 60.0,
              expression: str = CHECK) -> dict:
    from websockets.sync.client import connect

    exe = chromium()
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0",
             f"--user-data-dir={profile}", "--allow-file-access-from-files", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)  # its own process group: Chromium forks renderers and zygotes
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            deadline = time.time() + timeout_s
            while not port_file.exists() or not port_file.read_text().strip():
                if time.time() > deadline or proc.poll() is not None:
                    raise RuntimeError("headless Chromium did not start")
                time.sleep(0.1)
            port = port_file.read_text().split()[0]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                page = next(t for t in json.load(r) if t["type"] == "page")
            with connect(page["webSocketDebuggerUrl"], max_size=None,
                         open_timeout=timeout_s) as ws:
                ids = iter(range(1, 10**6))
                errors: list[str] = []

                def call(method, **params):
                    i = next(ids)
                    ws.send(json.dumps({"id": i, "method": method, "params": params}))
                    while True:
                        msg = json.loads(ws.recv(timeout=timeout_s))
                        if msg.get("method") == "Runtime.exceptionThrown":
                            errors.append(msg["params"]["exceptionDetails"].get("text", ""))
                        if msg.get("id") == i:
                            return msg.get("result", {})

                call("Runtime.enable")
                call("Page.enable")
                call("Page.navigate", url=url)
                end = time.time() + settle_s
                while time.time() < end:  # let the page run its scripts and load its images
                    try:
                        msg = json.loads(ws.recv(timeout=0.2))
                        if msg.get("method") == "Runtime.exceptionThrown":
                            errors.append(msg["params"]["exceptionDetails"].get("text", ""))
                    except TimeoutError:
                        pass
                res = call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
                out = json.loads(res["result"]["value"])
                out["errors"] = errors
                return out
        finally:
            # the whole group: killing the first process alone leaves its renderers and zygotes
            # running, reparented to init
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=30)
