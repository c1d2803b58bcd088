"""A stand-in for the API server serving.Server starts (`python -m fakeserver`, with this folder
on the server's PYTHONPATH): it takes the server's command line (serving.server_argv: --host,
--port and the engine's arguments as flags) and, after the engine's arguments say so, answers
what Server asks of a started engine (/health, one completion, /metrics with a KV cache).

Its engine arguments: engine_core (first start a second process in its group, as vLLM's engine
core), exit_code (then exit at once with it), traceback_lines (before exiting, an exception and
that many lines of another traceback after it, as vLLM's API server prints its own below its
engine core's), listen_after (seconds before it listens; negative: never).
It prints `fakeserver pid N` (and `fakeserver engine core pid M`) first, then
`fakeserver listening at T` (T: time.monotonic(), which perf_counter shares on Linux)."""

from __future__ import annotations

import argparse
import http.server
import json
import os
import subprocess
import sys
import time

KV = 'vllm:cache_config_info{block_size="16",kv_cache_size_tokens="4096"} 1.0\n'


class Handler(http.server.BaseHTTPRequestHandler):
    def _send(self, body: str, kind: str = "text/plain") -> None:
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send("" if self.path == "/health" else KV)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._send(json.dumps({"choices": [{"text": "0"}]}), "application/json")

    def log_message(self, *args):
        pass


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--exit-code", type=int)
    p.add_argument("--listen-after", type=float, default=0.0)
    p.add_argument("--engine-core", action="store_true")
    p.add_argument("--traceback-lines", type=int, default=0)
    args, _ = p.parse_known_args()
    print(f"fakeserver pid {os.getpid()}", flush=True)
    if args.engine_core:
        core = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        print(f"fakeserver engine core pid {core.pid}", flush=True)
    if args.exit_code is not None:
        if args.traceback_lines:
            print("Traceback (most recent call last):\nValueError: the engine core's own cause",
                  flush=True)
            for i in range(args.traceback_lines):
                print(f'  File "api_server.py", line {i}, in run', flush=True)
            print("RuntimeError: Engine core initialization failed. See root cause above.",
                  flush=True)
        sys.exit(args.exit_code)
    if args.listen_after < 0:
        time.sleep(3600)
    time.sleep(args.listen_after)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"fakeserver listening at {time.monotonic()}", flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
