"""The two arms of an SD series (the SD engine and its target without SD): how they share the
machine (serving.arm_order: side by side on a CPU, one after the other on a GPU), run_series in
either order with recording stand-ins for the vLLM server and its client (the real engine's
paired series is tests/test_serving.py's), and the order as the series, the speedup and the
report's words record it."""

from types import SimpleNamespace

import pandas as pd
import pytest

from specmoe.errors import InputError, SpecmoeError
from specmoe.runtime import engine as engine_mod
from specmoe.runtime import serving

PROMPTS = ["def main():\n", "import os\n\n", "class Cache:\n", "for i in range(10):\n"]
SD_ENGINE = {"model": "t", "speculative_config": {"method": "draft_model", "model": "d",
                                                  "num_speculative_tokens": 3}}
PLAIN_ENGINE = {"model": "t"}


def test_the_arms_interleave_on_a_cpu_and_run_in_blocks_on_a_gpu():
    assert serving.arm_order("cpu") == serving.INTERLEAVED
    assert serving.arm_order("cuda") == serving.BLOCKS
    with pytest.raises(InputError, match="no arm order for device 'tpu'"):
        serving.arm_order("tpu")


class Recorder:
    """Stand-ins for serving.Server and serving.bench that log every start, stop and request,
    and how many servers were alive at each."""

    def __init__(self):
        self.events: list[tuple] = []
        self.alive: list = []
        self.most_alive = 0
        rec = self

        class FakeServer:
            def __init__(self, engine, log_path=None, startup_timeout=600):
                self.engine = engine
                self.arm = "sd" if "speculative_config" in engine else "plain"
                self.url, self.up = f"fake://{self.arm}", False
                self.startup_s, self.start = 10.0 if self.arm == "sd" else 7.0, {"fake": True}

            def __enter__(self):
                rec.alive.append(self)
                rec.most_alive = max(rec.most_alive, len(rec.alive))
                self.up = True
                rec.events.append(("start", self.arm))
                return self

            def stop(self):
                if self.up:
                    self.up = False
                    rec.alive.remove(self)
                    rec.events.append(("stop", self.arm))

            def __exit__(self, *exc):
                self.stop()

            def alive(self):
                return self.up

            def failure(self, what):
                return SpecmoeError(what)

        self.Server = FakeServer

    def bench(self, server, model, prompts_jsonl, batch, num_prompts, output_len, seed=0):
        assert server.up and prompts_jsonl.is_file()
        self.events.append(("bench", server.arm, batch, num_prompts, len(self.alive)))
        stat = {f"{s}_{n}_ms": 5.0 for n in ("tpot", "itl", "ttft", "e2el")
                for s in ("mean", "median", "p99", "std")}
        res = {**stat, "completed": num_prompts, "failed": 0, "duration": 1.0,
               "output_throughput": 10.0, "request_throughput": 1.0,
               "total_output_tokens": num_prompts * output_len}
        if server.arm == "sd":
            res.update(spec_decode_num_drafts=4, spec_decode_acceptance_length=2.0,
                       spec_decode_acceptance_rate=50.0, spec_decode_draft_tokens=12,
                       spec_decode_accepted_tokens=6)
        return res

    def starts(self):
        return [e[1] for e in self.events if e[0] == "start"]


@pytest.fixture
def recorder(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(serving, "Server", rec.Server)
    monkeypatch.setattr(serving, "bench", rec.bench)
    monkeypatch.setattr(serving, "engine_metrics", lambda url: {})
    # the client's import (vLLM's bench serve) is not needed by the stand-in
    monkeypatch.setattr(serving, "importlib", SimpleNamespace(import_module=lambda name: None))
    return rec


def _series(tmp_path, **kw):
    return serving.run_series(SD_ENGINE, "t", PROMPTS, [(1, 2), (2, 2)], 8, 1, tmp_path / "sd",
                              {"series": "sd"}, {"stage": "test"}, repeats=2,
                              paired=(PLAIN_ENGINE, {"series": "plain"}, tmp_path / "ar"), **kw)


def test_a_paired_series_on_a_faked_cuda_platform_runs_one_server_at_a_time(
        recorder, monkeypatch, tmp_path):
    """On a GPU (faked: the engine's device says cuda) the arms run in blocks: the SD server
    measures every point and stops before the no-SD server starts; a rerun reuses each arm's
    files and starts only the arm with a point missing."""
    monkeypatch.setattr(engine_mod, "device", lambda: "cuda")
    sd, ar = _series(tmp_path)
    assert recorder.most_alive == 1
    assert all(e[4] == 1 for e in recorder.events if e[0] == "bench")
    kinds = [e[:2] for e in recorder.events if e[0] != "bench"]
    assert kinds == [("start", "sd"), ("stop", "sd"), ("start", "plain"), ("stop", "plain")]
    benches = [e[1] for e in recorder.events if e[0] == "bench"]
    assert benches == sorted(benches, key=lambda a: a != "sd")  # every SD request first
    want = [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert [(p["batch"], p["repeat"]) for p in sd] == [(p["batch"], p["repeat"]) for p in ar] \
        == want
    assert all("sd" in p for p in sd) and not any("sd" in p for p in ar)
    assert not any(p["reused"] for p in sd + ar)
    for arm in ("sd", "ar"):
        assert sorted(f.name for f in (tmp_path / arm).glob("b*.json")) == \
            sorted(f"b{b}.r{r}.json" for b, r in want)
    # one no-SD point lost: only the no-SD engine starts, for that point alone
    (tmp_path / "ar" / "b2.r0.json").unlink()
    recorder.events.clear()
    sd2, ar2 = _series(tmp_path)
    assert recorder.starts() == ["plain"]
    assert [(e[1], e[2]) for e in recorder.events if e[0] == "bench"][-1] == ("plain", 2)
    assert all(p["reused"] for p in sd2)
    assert [p["reused"] for p in ar2] == [True, True, False, True]
    # complete: nothing starts
    recorder.events.clear()
    sd3, ar3 = _series(tmp_path)
    assert recorder.events == [] and all(p["reused"] for p in sd3 + ar3)


def test_a_paired_series_on_a_cpu_keeps_both_servers_and_alternates(recorder, monkeypatch,
                                                                     tmp_path):
    """The CPU's order through the same stand-ins: both servers alive, AB BA by point."""
    monkeypatch.setattr(engine_mod, "device", lambda: "cpu")
    _series(tmp_path)
    assert recorder.most_alive == 2 and sorted(recorder.starts()) == ["plain", "sd"]
    written = sorted(((tmp_path / arm / f"b{b}.r{r}.json").stat().st_mtime_ns, arm)
                     for arm in ("sd", "ar") for b, r in ((1, 0), (2, 0), (1, 1), (2, 1)))
    assert [w[1] for w in written] == ["sd", "ar", "ar", "sd", "sd", "ar", "ar", "sd"]
    with pytest.raises(InputError, match="arm order 'sideways'"):
        _series(tmp_path / "x", order="sideways")


def _speedup(tmp_path, arm_order):
    """The speedup of a series whose no-SD points were taken in `arm_order` (None: a series
    from before the order was recorded)."""
    from specmoe.contracts.analysis import SpeedupParams
    from specmoe.provenance import read_json, write_json
    from specmoe.stages.analysis import speedup_stage

    ds = "tinybench"

    from test_sweep import point

    def pts(tpots, sd):
        return [point(b, t * (1 + 0.01 * r), tau=2.0 if sd else None, per_pos=[0.5])
                | {"repeat": r} for b, t in tpots for r in range(2)]

    sd = {"datasets": {ds: {"points": pts([(1, 8.0), (2, 10.0)], True),
                            "paired_no_sd": {"points": pts([(1, 10.0), (2, 11.0)], False)}}},
          "paired_no_sd": {"engine": {}, **({"arm_order": arm_order} if arm_order else {})}}
    write_json(tmp_path / "sd.json", sd, {})
    params = SpeedupParams(run={"model": "m", "dataset": ds, "k": 3}, margin=0.05,
                           timing="client", engine_log_sd=0.043, engine_log_sd_df=6)
    speedup_stage(SimpleNamespace(sd=tmp_path / "sd.json", drafter=[]),
                  SimpleNamespace(json=tmp_path / "out.json"), params)
    return read_json(tmp_path / "out.json")["no_sd_series"]


def _opening_words(tmp_path, no_sd_series: list[str]) -> str:
    """The report's timing scope over a speedup table whose rows carry `no_sd_series`."""
    from pathlib import Path

    from specmoe.report import prose
    from specmoe.report.tables import Tables

    fixture = Path(__file__).parent / "fixtures" / "report_tables" / "speedup_vs_batch.csv"
    sp = pd.read_csv(fixture)
    sp["no_sd_series"] = [no_sd_series[i % len(no_sd_series)] for i in range(len(sp))]
    path = tmp_path / "speedup_vs_batch.csv"
    sp.to_csv(path, index=False)
    return prose._timing_scope(Tables([path]))


def test_the_speedup_and_the_report_say_how_the_no_sd_points_were_taken(tmp_path):
    from specmoe.stages.analysis import NO_SD_BLOCKS, NO_SD_PAIRED

    assert _speedup(tmp_path, "blocks") == NO_SD_BLOCKS
    assert _speedup(tmp_path, "interleaved") == NO_SD_PAIRED
    assert _speedup(tmp_path, None) == NO_SD_PAIRED  # every series before the blocks
    with pytest.raises(InputError, match="unknown arm order 'sideways'"):
        _speedup(tmp_path, "sideways")
    blocks = _opening_words(tmp_path, [NO_SD_BLOCKS])
    assert "in blocks in the same job" in blocks and "AB BA" not in blocks
    inter = _opening_words(tmp_path, [NO_SD_PAIRED])
    assert "the SD and no-SD points interleaved, AB BA" in inter and "blocks" not in inter
    both = _opening_words(tmp_path, [NO_SD_PAIRED, NO_SD_BLOCKS])
    assert "AB BA in some series" in both and "in blocks in the same job" in both
