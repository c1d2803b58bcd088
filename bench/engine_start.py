"""Engine start-up with vLLM's CPU default process layout ("old") and with the worker inside the
engine core's process ("new"), side by side: the sweeps' served engine (`vllm serve` on loopback,
specmoe.runtime.serving.Server, with one point of the real benchmark client) and the capture's
offline engine (specmoe.runtime.engine.generate in a spawned child, as rule capture runs it).
Starts alternate old, new, old, new, ... one engine at a time, so that a drift of the machine
spreads over both; each start's phases come from the engine's own log lines
(specmoe.runtime.startup).

    .venv/bin/python bench/engine_start.py TARGET [--drafter DRAFTER --draft-length 3] [--n 3]
        [--compare layout|start] [--json]

--compare start (served engines only): both with the worker in the engine core's process; "old"
starts vLLM's own server module (on a CPU vLLM spawns the engine core, which imports vLLM and
torch again), "new" starts specmoe.runtime.api_server, which leaves the start method at vLLM's
default and so forks it from the server. Each start records how its server started the engine core (the old module does not say).

old: the worker in a process of its own (served: API server, engine core and worker, each
importing vLLM and torch; offline: the caller, an engine-core process and a worker process).
new: the worker in the engine core's process (served: API server and engine core; offline: the
caller alone). Printed per engine and layout: the median of each phase and of the total to the
first token, the processes vLLM named, and for the served engine one benchmark point's TPOT, its
generated texts and SD counts (equal: the layout changed no tokens), for the offline engine its
tokens.
An offline engine in the old layout logs from processes of its own, which its caller's clock
cannot read: only its import, its LLM() as a whole and its first token are timed, and the
processes listed are the caller's. Timings on a machine that other work shares are noisy:
compare medians of one run only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from specmoe.runtime.engine import engine_kwargs, generate, run_in_child  # noqa: E402
from specmoe.runtime.startup import PHASES  # noqa: E402

SCHEMA = Path(__file__).resolve().parents[1] / "workflow/schemas/config.schema.yaml"
PROMPTS = ["def main():\n", "import os\n\n", "class Cache:\n", "for i in range(10):\n"]


def served(engine: dict, model: str, out_len: int, log_path: str,
           module: str | None = None) -> dict:
    """Start a served engine, measure one point (batch 2, every prompt), stop it. Its counts: the
    texts generated (the output length is fixed, so only they can show a changed token) and,
    with a drafter, the SD counts."""
    from specmoe.runtime.serving import SERVER_MODULE, Server, bench, point_summary, \
        write_prompts_jsonl

    from specmoe.checks.schema import load_schema

    # the sweeps' start-up limit (sweep.startup_timeout_s's default, the schema's)
    limit = load_schema(SCHEMA)["properties"]["sweep"]["properties"]["startup_timeout_s"]["default"]
    with tempfile.TemporaryDirectory() as d, \
            Server(engine, log_path, startup_timeout=limit,
                   module=module or SERVER_MODULE) as server:
        jsonl = Path(d) / "prompts.jsonl"
        write_prompts_jsonl(PROMPTS, jsonl)
        res = bench(server, model, jsonl, 2, len(PROMPTS), out_len, detailed=True)
        start = server.start
    pt = point_summary(res, 2, len(PROMPTS), out_len)
    if pt["failed"]:
        sys.exit(f"served engine: {pt['failed']} of {len(PROMPTS)} requests failed: no texts to "
                 f"compare (see {log_path})")
    return {"start": start, "total_s": start["at_s"]["first_token"], "up_s": start["at_s"]["up"],
            "tpot_ms": pt["tpot_ms"]["mean"],
            "counts": {"generated_texts": res["generated_texts"],
                       **{k: pt["sd"][k] for k in ("num_drafts", "draft_tokens", "accepted_tokens")
                          if "sd" in pt}}}


def offline(engine: dict, out_len: int, log_path: str) -> dict:
    """One offline generation in a spawned child, as rule capture runs its engine. total_s: to
    the first token from generate's start (after the child's Python and this package); job_s:
    the whole child, spawn to result (the same generation and shutdown in both layouts)."""
    t0 = time.perf_counter()
    res = run_in_child(generate, PROMPTS, out_len, engine, log_path=log_path)
    return {"start": res["engine_start"], "total_s": res["engine_start"]["at_s"]["first_token"],
            "job_s": time.perf_counter() - t0,
            "counts": {"token_ids": res["token_ids"], **{k: res["spec"].get(k) for k in (
                "num_drafts", "num_draft_tokens", "num_accepted_tokens")}}}


def median(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 2) if xs else None


def summary(runs: list[dict]) -> dict:
    out = {"starts": len(runs), "total_s": median([r["total_s"] for r in runs]),
           **{key: median([r[key] for r in runs]) for key in ("up_s", "job_s") if key in runs[0]},
           "phases_s": {p: median([r["start"]["phases_s"][p] for r in runs]) for p in PHASES},
           "processes": runs[0]["start"]["processes"],
           "start_method": runs[0]["start"].get("start_method"),
           "counts_equal": all(r["counts"] == runs[0]["counts"] for r in runs)}
    if "tpot_ms" in runs[0]:
        out["tpot_ms"] = median([r["tpot_ms"] for r in runs])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target")
    ap.add_argument("--drafter")
    ap.add_argument("--draft-length", dest="k", type=int, default=3, help="the draft length K")
    ap.add_argument("--n", type=int, default=3, help="starts per engine and layout")
    ap.add_argument("--out-len", type=int, default=16)
    ap.add_argument("--engines", default="served,offline")
    ap.add_argument("--log", default=str(Path(tempfile.gettempdir()) / "engine_start.log"),
                    help="the engines' own output")
    ap.add_argument("--compare", choices=("layout", "start"), default="layout",
                    help="layout: the worker in a process of its own or not; start: the served "
                    "engine core spawned (vLLM's server module) or forked (specmoe's)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.compare == "start":
        a.engines = "served"
    k = a.k if a.drafter else None
    res = {}
    for kind in a.engines.split(","):
        runs = {"old": [], "new": []}
        for i in range(a.n):
            for layout in ("old", "new"):
                engine = engine_kwargs(a.target, a.drafter, k, max_num_seqs=2, kv_cache_mib=128,
                                       dtype="float32",
                                       in_process=layout == "new" or a.compare == "start")
                module = ("vllm.entrypoints.openai.api_server"
                          if a.compare == "start" and layout == "old" else None)
                r = (served(engine, a.target, a.out_len, a.log, module) if kind == "served" else
                     offline(engine, a.out_len, a.log))
                runs[layout].append(r)
                print(f"{kind} {layout} {i}: {r['total_s']:.1f} s to the first token, "
                      + ", ".join(f"{p} {v:.1f}" for p, v in r["start"]["phases_s"].items()
                                  if v is not None), file=sys.stderr, flush=True)
        res[kind] = {layout: summary(rs) for layout, rs in runs.items()}
        res[kind]["counts_equal_old_new"] = runs["old"][0]["counts"] == runs["new"][0]["counts"]
    if a.json:
        print(json.dumps(res, indent=1))
        return
    for kind, by in res.items():
        print(f"\n{kind} engine (median of {a.n} starts each; counts equal old/new: "
              f"{by['counts_equal_old_new']})")
        print(f"{'phase':<14}{'old s':>9}{'new s':>9}")
        for p in PHASES:
            o, n = by["old"]["phases_s"][p], by["new"]["phases_s"][p]
            print(f"{p:<14}{o if o is not None else '-':>9}{n if n is not None else '-':>9}")
        print(f"{'total':<14}{by['old']['total_s']:>9}{by['new']['total_s']:>9}")
        for key, name in (("up_s", "up (health)"), ("job_s", "child job")):
            if key in by["old"]:
                print(f"{name:<14}{by['old'][key]:>9}{by['new'][key]:>9}")
        if "tpot_ms" in by["old"]:
            print(f"{'TPOT ms':<14}{by['old']['tpot_ms']:>9}{by['new']['tpot_ms']:>9}")
        print(f"processes     old {by['old']['processes']}  new {by['new']['processes']}")
        if by["old"].get("start_method") or by["new"].get("start_method"):
            print(f"engine core   old {by['old']['start_method']}  new "
                  f"{by['new']['start_method']}")


if __name__ == "__main__":
    main()
