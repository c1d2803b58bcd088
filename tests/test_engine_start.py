"""bench/engine_start.py's check that the process layout changed no tokens: with the output length
fixed (--ignore-eos), the only count it compared was prompts x length, equal whatever the engine
generated; the texts generated now are compared (vLLM's client drops them without
--save-detailed). No engine is started: the server and the client's run are stand-ins, the
client's arguments are parsed by vLLM's own parser."""

import importlib.util
from pathlib import Path

from specmoe.runtime import serving

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("engine_start", REPO / "bench" / "engine_start.py")
engine_start = importlib.util.module_from_spec(spec)
spec.loader.exec_module(engine_start)

START = {"at_s": {"first_token": 2.0, "up": 1.0},
         "phases_s": dict.fromkeys(engine_start.PHASES, 1.0), "processes": ["x"]}


class FakeServer:
    url = "http://127.0.0.1:1"
    start = START
    engine: dict = {}  # the served engine's arguments (bench reads its trust_remote_code)

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _result(texts: list[str]) -> dict:
    """What vLLM's `bench serve` returns for a point with --save-detailed (the keys read)."""
    stats = {f"{s}_{m}_ms": 1.0 for s in ("mean", "median", "p99", "std")
             for m in ("tpot", "itl", "ttft", "e2el")}
    return {**stats, "completed": len(texts), "failed": 0, "duration": 1.0,
            "output_throughput": 1.0, "request_throughput": 1.0,
            "total_output_tokens": 16 * len(texts), "generated_texts": texts}


def test_two_layouts_that_generated_different_texts_of_one_length_are_not_equal(monkeypatch):
    same = ["a b c d"] * len(engine_start.PROMPTS)
    other = ["a b c e"] + same[1:]
    results = iter([_result(same), _result(same), _result(other)])

    def fake_bench(server, model, jsonl, batch, n, out_len, seed=0, **kwargs):
        res = next(results)  # as vLLM's client: the texts only where asked for in detail
        return res if kwargs.get("detailed") else {k: v for k, v in res.items()
                                                     if k != "generated_texts"}

    monkeypatch.setattr(serving, "Server", FakeServer)
    monkeypatch.setattr(serving, "bench", fake_bench)
    runs = [engine_start.served({}, "m", 16, "log") for _ in range(3)]
    assert engine_start.summary(runs[:2])["counts_equal"] is True
    assert engine_start.summary(runs)["counts_equal"] is False


def test_the_detailed_point_asks_vllms_client_for_its_texts(monkeypatch, tmp_path):
    from vllm.benchmarks import serve

    seen = []
    monkeypatch.setattr(serve, "main", lambda args: seen.append(args) or {})
    for detailed in (False, True):
        serving.bench(FakeServer(), "m", tmp_path / "p.jsonl", 2, 4, 16, detailed=detailed)
    assert [a.save_detailed for a in seen] == [False, True]
