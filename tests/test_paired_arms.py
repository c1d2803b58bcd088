"""The two arms of an SD series (the SD engine and its target without SD): how they share the
machine (serving.arm_order: side by side on a CPU, one after the other on a GPU), run_series in
either order with recording stand-ins for the vLLM server and its client (the real engine's
paired series is tests/test_serving.py's), and the order as the series, the speedup and the
report's words record it."""

import collections
import os
import random
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
        # a machine on which a request to the other engine than the last one's is slower by
        # this share (caches, OS state), measured with a little noise (seeded)
        self.switch_cost, self.last, self.rng = 0.0, None, random.Random(0)
        # the job the stand-ins run in (each point's engine_start names it), and the requests
        # it has time for (None: no limit)
        self.job, self.requests_left = "job", None
        self.drafts = True  # whether the SD engine reports its drafts
        rec = self

        class FakeServer:
            def __init__(self, engine, log_path=None, startup_timeout=600):
                self.engine = engine
                self.arm = "sd" if "speculative_config" in engine else "plain"
                self.url, self.up = f"fake://{self.arm}", False
                self.startup_s = 10.0 if self.arm == "sd" else 7.0
                self.start = {"fake": True, "job": rec.job}
                self.kv = {"tokens": 2**20, "block_size": 16}
                # how it runs as a server on a CUDA build reports it (api_server): V2 unless
                # its environment pins V1
                pinned = (engine.get("env") or {}).get("VLLM_USE_V2_MODEL_RUNNER") == "0"
                self.runs = {"model_runner": "v1" if pinned else "v2",
                             "engine_mode": {"cudagraph_mode": "FULL_AND_PIECEWISE"}}

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
        if self.requests_left is not None:
            if self.requests_left == 0:
                raise TimeoutError(f"{self.job}: time limit")
            self.requests_left -= 1
        # the dataset: the directory of its prompts (points_dir/<dataset>/prompts.jsonl)
        self.events.append(("bench", server.arm, batch, num_prompts, len(self.alive),
                            prompts_jsonl.parent.name))
        t = 5.0
        if self.switch_cost:
            switched = self.last is not None and self.last is not server
            t *= (1 + self.switch_cost * switched) * (1 + 0.002 * self.rng.gauss(0, 1))
        self.last = server
        stat = {f"{s}_{n}_ms": t for n in ("tpot", "itl", "ttft", "e2el")
                for s in ("mean", "median", "p99", "std")}
        res = {**stat, "completed": num_prompts, "failed": 0, "duration": 1.0,
               "output_throughput": 10.0, "request_throughput": 1.0,
               "total_output_tokens": num_prompts * output_len}
        if server.arm == "sd" and self.drafts:
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
    # no tokenizer behind the stand-in's model: every prompt one token
    monkeypatch.setattr(serving, "prompt_lengths", lambda model, texts, trust: [1] * len(texts))
    # the client's import (vLLM's bench serve) is not needed by the stand-in
    monkeypatch.setattr(serving, "importlib", SimpleNamespace(import_module=lambda name: None))
    return rec


def _series(tmp_path, **kw):
    return serving.run_series(SD_ENGINE, "t", PROMPTS, [(1, 2), (2, 2)], 8, 1, tmp_path / "sd",
                              {"series": "sd"}, {"stage": "test"}, repeats=2,
                              paired=(PLAIN_ENGINE, {"series": "plain"}, tmp_path / "ar"),
                              **{"startup_timeout": 60, **kw})


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
    # one no-SD point lost: both engines start, for that point alone, on both (the two sides
    # of a pair from one job)
    (tmp_path / "ar" / "b2.r0.json").unlink()
    recorder.events.clear()
    sd2, ar2 = _series(tmp_path)
    assert recorder.starts() == ["sd", "plain"]
    benches = [(e[1], e[2]) for e in recorder.events if e[0] == "bench"]
    assert benches == [("sd", 2)] * 2 + [("plain", 2)] * 2  # each engine's warm-up, its point
    assert [p["reused"] for p in sd2] == [p["reused"] for p in ar2] == [True, True, False, True]
    # complete: nothing starts
    recorder.events.clear()
    sd3, ar3 = _series(tmp_path)
    assert recorder.events == [] and all(p["reused"] for p in sd3 + ar3)


def test_a_blocks_series_stopped_in_its_no_sd_block_measures_both_sides_again_when_retried(
        recorder, monkeypatch, tmp_path):
    """On a GPU (faked) a job whose time runs out during the no-SD block leaves SD points whose
    no-SD side is missing; the retry re-measured the no-SD side alone, and the series paired
    SD points of one job with no-SD points of another while recording 'one engine at a time in
    the same job'. The retry now measures both sides of those points: each pair from one job."""
    monkeypatch.setattr(engine_mod, "device", lambda: "cuda")
    # every SD point (its 6 requests, warm-ups included), then the no-SD points of repeat 0
    # (4 requests): the job's time is up at the no-SD points of repeat 1
    recorder.job, recorder.requests_left = "job1", 10
    with pytest.raises(SpecmoeError, match="job1: time limit"):
        _series(tmp_path)
    assert len(list((tmp_path / "sd").glob("b*.json"))) == 4
    assert sorted(f.name for f in (tmp_path / "ar").glob("b*.json")) == ["b1.r0.json",
                                                                        "b2.r0.json"]
    recorder.job, recorder.requests_left = "job2", None
    sd, ar = _series(tmp_path)
    pairs = [(p["batch"], p["repeat"], p["engine_start"]["job"], q["engine_start"]["job"])
             for p, q in zip(sd, ar)]
    assert pairs == [(1, 0, "job1", "job1"), (1, 1, "job2", "job2"), (2, 0, "job1", "job1"),
                     (2, 1, "job2", "job2")]


def test_an_sd_point_without_drafts_is_refused_when_measured_and_not_kept(recorder,
                                                                         monkeypatch, tmp_path):
    """An SD engine that reports no drafts (bench serve's spec_decode_num_drafts 0 or absent)
    gave a point without acceptance that was kept, and the series failed only at the speedup
    stage ('was SD on?'). It is refused at once, in one line, and no file is written for it."""
    monkeypatch.setattr(engine_mod, "device", lambda: "cpu")
    recorder.drafts = False
    with pytest.raises(SpecmoeError) as exc:
        _series(tmp_path)
    assert str(exc.value) == (
        "batch 1 repeat 0: the SD engine reported no drafts (bench serve's "
        "spec_decode_num_drafts: None), so the point has no acceptance; not kept")
    assert not list((tmp_path / "sd").glob("b*.json"))
    # the engine without SD is not asked for drafts
    ar = serving.run_series(PLAIN_ENGINE, "t", PROMPTS, [(1, 2)], 8, 0, tmp_path / "ar", {}, {},
                            startup_timeout=60)
    assert [p["batch"] for p in ar] == [1] and "sd" not in ar[0]


def test_a_paired_series_on_a_cpu_keeps_both_servers_and_alternates(recorder, monkeypatch,
                                                                     tmp_path):
    """The CPU's order through the same stand-ins: both servers alive, AB BA by point and by
    repeat."""
    monkeypatch.setattr(engine_mod, "device", lambda: "cpu")
    _series(tmp_path)
    assert recorder.most_alive == 2 and sorted(recorder.starts()) == ["plain", "sd"]
    written = sorted(((tmp_path / arm / f"b{b}.r{r}.json").stat().st_mtime_ns, arm)
                     for arm in ("sd", "ar") for b, r in ((1, 0), (2, 0), (1, 1), (2, 1)))
    # AB BA within a repeat, and each batch size in the other order at the next repeat
    assert [w[1] for w in written] == ["sd", "ar", "ar", "sd", "ar", "sd", "sd", "ar"]
    with pytest.raises(InputError, match="arm order 'sideways'"):
        _series(tmp_path / "x", order="sideways")


def test_on_a_cpu_each_dataset_and_batch_alternates_its_first_arm_from_repeat_to_repeat(
        recorder, monkeypatch, tmp_path):
    """The arm order counted over the whole series gave each (dataset, batch) point the same
    first arm in every repeat where a repeat has an even number of points (2 datasets x 4
    batch sizes here): on a machine where switching engines costs 3%, SD exactly as fast as no
    SD read as 1.03 at batches 1 and 4 and 0.97 at 2 and 8 in every repeat, a decided shape.
    Each point's first arm now alternates from repeat to repeat, and the switch cost falls on
    both arms alike: no shape but flat or undecided."""
    from specmoe.measured.sweep import FLAT, UNDECIDED, speedup_curve

    monkeypatch.setattr(engine_mod, "device", lambda: "cpu")
    recorder.switch_cost = 0.03
    texts = {ds: PROMPTS * 2 for ds in ("aya", "mt-bench")}
    sd, ar = serving.run_series(SD_ENGINE, "t", texts, [(1, 4), (2, 4), (4, 4), (8, 8)], 8, 0,
                                tmp_path / "sd", {"series": "sd"}, {}, repeats=3,
                                startup_timeout=60,
                                paired=(PLAIN_ENGINE, {"series": "plain"}, tmp_path / "ar"))
    benches = [e for e in recorder.events if e[0] == "bench"]
    first = collections.defaultdict(collections.Counter)
    for a, b in zip(benches[::2], benches[1::2]):
        assert {a[1], b[1]} == {"sd", "plain"} and (a[2], a[5]) == (b[2], b[5])  # one pair
        first[(a[5], a[2])][a[1]] += 1
    assert len(first) == 8
    for point, counts in first.items():
        assert sum(counts.values()) == 3 and abs(counts["sd"] - counts["plain"]) <= 1, point
    for ds in texts:
        res = speedup_curve(ar[ds], sd[ds], None, 3, 0.05, "client", 0.0)
        assert res["shape"] in (FLAT, UNDECIDED), (ds, [r["speedup"] for r in res["rows"]])


def _speedup(tmp_path, arm_order):
    """The speedup of a series whose no-SD points were taken in `arm_order` (None: a series
    that records none)."""
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
    write_json(tmp_path / "sd.json", sd, {"engine": "vllm 0.32.0 (cpu)"})
    params = SpeedupParams(run={"model": "m", "dataset": ds, "k": 3}, margin=0.05,
                           timing="client", engine_log_sd=0.043, engine_log_sd_df=6,
                           engine_log_sd_device="cpu")
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
    """One description of each arm order: the one the sweep records beside its arm order
    (measure.PAIR_ORDER) is the speedup's no_sd_series, and the report words each. The speedup
    kept a second wording of its own, and took a series without a recorded arm order for an
    interleaved one: it is refused in one line naming the file."""
    from specmoe.runtime import serving
    from specmoe.stages.measure import PAIR_ORDER

    assert set(PAIR_ORDER) == {serving.INTERLEAVED, serving.BLOCKS}
    for order in PAIR_ORDER:
        assert _speedup(tmp_path, order) == PAIR_ORDER[order]
    with pytest.raises(InputError, match=r"sd\.json: its paired_no_sd records no arm_order .*"
                                         r"rerun the sweep"):
        _speedup(tmp_path, None)
    with pytest.raises(InputError, match="unknown arm order 'sideways'"):
        _speedup(tmp_path, "sideways")
    blocks = _opening_words(tmp_path, [PAIR_ORDER["blocks"]])
    assert "in blocks in the same job" in blocks and "AB BA" not in blocks
    inter = _opening_words(tmp_path, [PAIR_ORDER["interleaved"]])
    assert "the SD and no-SD points interleaved, AB BA" in inter and "blocks" not in inter
    both = _opening_words(tmp_path, [PAIR_ORDER["interleaved"], PAIR_ORDER["blocks"]])
    assert "AB BA in some series" in both and "in blocks in the same job" in both


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A directory a sweep serves as target and drafter: a byte-level BPE tokenizer of the tiny
    models' kind (trained in seconds) and a config.json vLLM reads (the sweep stage records the
    dtype vLLM resolves from it); no engine reads its weights here."""
    from specmoe.runtime import tiny

    out = tmp_path_factory.mktemp("ckpt") / "t"
    tiny.train_tokenizer(tiny.corpus_files(False, 10)[:30], 300, out)
    (out / "config.json").write_text('{"model_type": "qwen3", "torch_dtype": "float32"}')
    return out


def _swept_engines(checkpoint, tmp_path, monkeypatch, k: int, largest: int,
                   method: str | None = None) -> tuple:
    """The engine arguments of an SD series' two arms as sweep_stage builds them (K = k, batches
    up to `largest`; its drafter's speculative method, none: a separate draft model; mtp: no
    drafter input, the target's own layers), from a stand-in for run_series that keeps them."""
    from specmoe.contracts import Named
    from specmoe.contracts.engines import SweepSdParams
    from specmoe.sources import prompts as prompt_table
    from specmoe.stages.measure import sweep_stage

    kept = {}

    class Stop(Exception):
        pass

    def series(engine, *a, paired=None, **kw):
        kept.update(sd=engine, plain=paired[0])
        raise Stop

    monkeypatch.setattr(serving, "run_series", series)
    sweep = {"schedule": [{"batch": b, "prompts": largest} for b in (1, largest)],
             "output_len": 16, "warmups": 0, "repeats": 1, "startup_timeout_s": 10}
    params = SweepSdParams(job={"model": "t", "drafter": "d", "k": k, "datasets": ["tinybench"]},
                           settings=sweep, method=method, gpu=False,
                           prompts=prompt_table.DEFAULT_SOURCE, prompting={"draft_slack": k + 1})
    with pytest.raises(Stop):
        drafter = {} if method == "mtp" else {"drafter": str(checkpoint)}
        sweep_stage(Named({"target": str(checkpoint), **drafter, "prompts": []}),
                    Named({"json": str(tmp_path / "s.json")}), params)
    return kept["sd"], kept["plain"]


def test_a_longer_job_runtime_keeps_the_series_config_hash(tmp_path, monkeypatch, checkpoint):
    """A serving series' provenance hashes its settings, not the timeouts its job's runtime sets:
    a SLURM retry doubles the runtime, and the same series got another config hash; the runtime
    still bounds the engine's start."""
    from specmoe.contracts import Named
    from specmoe.contracts.engines import SweepArParams
    from specmoe.sources import prompts as prompt_table
    from specmoe.stages.measure import sweep_stage

    kept = []

    class Stop(Exception):
        pass

    def series(engine, *a, startup_timeout=None, **kw):
        kept.append((a[7]["config_hash"], startup_timeout))  # its provenance
        raise Stop

    monkeypatch.setattr(serving, "run_series", series)
    sweep = {"schedule": [{"batch": 1, "prompts": 2}], "output_len": 16, "warmups": 0,
             "repeats": 1, "startup_timeout_s": 7200}
    for runtime in (60, 120):
        params = SweepArParams(job={"model": "t", "k": None, "datasets": ["tinybench"]},
                               settings=sweep,
                               method=None, gpu=False, prompts=prompt_table.DEFAULT_SOURCE,
                               prompting={"draft_slack": 0})
        with pytest.raises(Stop):
            sweep_stage(Named({"target": str(checkpoint), "prompts": []}),
                        Named({"json": str(tmp_path / "s.json")}), params, runtime=runtime)
    assert kept[0][0] == kept[1][0]
    assert [t for _, t in kept] == [pytest.approx(60 * 60 * 0.95), pytest.approx(120 * 60 * 0.95)]


def _series_key(checkpoint, tmp_path, monkeypatch) -> dict:
    """The key of a series' points (all but the point's own part) as sweep_stage builds it."""
    return _alone_series(checkpoint, tmp_path, monkeypatch, "t")[1][6]


def _alone_series(checkpoint, tmp_path, monkeypatch, model: str, prompting=None) -> tuple:
    """What sweep_stage hands run_series for a model served alone (rule sweep_ar): the engine's
    arguments and the other positional arguments, from a stand-in for run_series that keeps
    them."""
    from specmoe.contracts import Named
    from specmoe.contracts.engines import SweepArParams
    from specmoe.sources import prompts as prompt_table
    from specmoe.stages.measure import sweep_stage

    kept = []

    class Stop(Exception):
        pass

    def series(engine, *a, **kw):
        kept.append((engine, a))
        raise Stop

    monkeypatch.setattr(serving, "run_series", series)
    sweep = {"schedule": [{"batch": 1, "prompts": 2}], "output_len": 16, "warmups": 0,
             "repeats": 1, "startup_timeout_s": 10}
    params = SweepArParams(job={"model": model, "k": None, "datasets": ["tinybench"]},
                           settings=sweep, method=None, gpu=False,
                           prompts=prompt_table.DEFAULT_SOURCE,
                           prompting=prompting or {"draft_slack": 0})
    with pytest.raises(Stop):
        sweep_stage(Named({"target": str(checkpoint), "prompts": []}),
                    Named({"json": str(tmp_path / "s.json")}), params)
    return kept[0]


def test_a_series_whose_prompting_names_no_draft_slack_is_refused(tmp_path, monkeypatch,
                                                                  checkpoint):
    """A series' contract always sets its prompting's draft_slack (Config.draft_slack); the stage
    fell back to a default of its own (K + 1, 0 without SD), a second one beside the
    configuration's that differs from it for a drafter swept at more than one K."""
    from specmoe.contracts import Named
    from specmoe.contracts.engines import SweepSdParams
    from specmoe.errors import InputError
    from specmoe.sources import prompts as prompt_table
    from specmoe.stages.measure import sweep_stage

    monkeypatch.setattr(serving, "run_series", lambda *a, **kw: pytest.fail("ran a series"))
    sweep = {"schedule": [{"batch": 1, "prompts": 2}], "output_len": 16, "warmups": 0,
             "repeats": 1, "startup_timeout_s": 10}
    params = SweepSdParams(job={"model": "t", "drafter": "d", "k": 3, "datasets": ["tinybench"]},
                           settings=sweep, method=None, gpu=False,
                           prompts=prompt_table.DEFAULT_SOURCE,
                           prompting={"chat_template": {"tinybench": False}})
    with pytest.raises(InputError, match="names no draft_slack") as err:
        sweep_stage(Named({"target": str(checkpoint), "drafter": str(checkpoint), "prompts": []}),
                    Named({"json": str(tmp_path / "s.json")}), params)
    assert "\n" not in str(err.value)

def test_a_series_moved_to_other_gpus_measures_every_point_again(tmp_path, monkeypatch,
                                                                  checkpoint, request):
    """A point on disk is reused where its key matches: the key names the GPUs' model as
    nvidia-smi reports it (the provenance's reading; faked by an nvidia-smi first on PATH), so
    that a series moved from H100s to B200s measures again; without GPUs it is as before."""
    from specmoe.provenance import hardware, write_json

    request.addfinalizer(hardware.cache_clear)  # read once per process: not the fake's after

    def on(*gpus):
        bin_dir = tmp_path / "bin" / str(len(list((tmp_path / "bin").glob("*"))))
        bin_dir.mkdir(parents=True)
        (bin_dir / "nvidia-smi").write_text("#!/bin/sh\n" + "".join(f"echo '{g}'\n"
                                                                     for g in gpus))
        (bin_dir / "nvidia-smi").chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        hardware.cache_clear()
        return _series_key(checkpoint, tmp_path, monkeypatch)

    (tmp_path / "bin").mkdir()
    h100, b200 = on(*["NVIDIA H100 80GB HBM3"] * 2), on("NVIDIA B200")
    assert "gpus" not in on()
    schedule, points = [(1, 2), (2, 2)], tmp_path / "points"
    for *_, key, path in serving.plan_points(PROMPTS, schedule, 8, 1, points, h100)[2]:
        write_json(path, {"key": key})  # measured on the H100s
    assert serving.plan_points(PROMPTS, schedule, 8, 1, points, h100)[2] == []
    assert len(serving.plan_points(PROMPTS, schedule, 8, 1, points, b200)[2]) == 2


def test_a_longer_job_runtime_keeps_the_profiles_config_hash(tmp_path, monkeypatch, checkpoint):
    """The profile's provenance likewise hashes its settings, not its job's timeouts; the
    profiler is replaced by a recorder of the timeout it was given."""
    from specmoe.contracts import Named
    from specmoe.contracts.engines import ProfileParams
    from specmoe.provenance import read_json
    from specmoe.runtime import kernelprof
    from specmoe.sources import prompts as prompt_table
    from specmoe.stages.measure import profile_stage

    timeouts = []

    def profile(*a, timeout=None, **kw):
        timeouts.append(timeout)
        return {"k": 3, "batches": []}

    monkeypatch.setattr(kernelprof, "profile_model", profile)
    prof = {"batch_sizes": [1], "max_tokens": 8, "engines": 1, "startup_timeout_s": 7200}
    hashes = []
    for runtime in (60, 120):
        out = tmp_path / f"p{runtime}.json"
        profile_stage(Named({"target": str(checkpoint), "drafter": str(checkpoint),
                             "prompts": []}),
                      Named({"json": str(out), "traces": str(tmp_path / f"t{runtime}")}),
                      ProfileParams(job={"model": "t", "drafter": "d", "k": 3,
                                         "dataset": "tinybench"}, settings=prof, method=None,
                                    gpu=False, prompts=prompt_table.DEFAULT_SOURCE,
                                    prompting={}), runtime=runtime)
        hashes.append(read_json(out)["provenance"]["config_hash"])
    assert hashes[0] == hashes[1]
    assert timeouts == [pytest.approx(60 * 60 * 0.95), pytest.approx(120 * 60 * 0.95)]


def graphed_batches(engine: dict, k: int) -> list[int]:
    """The batch sizes whose decode step (k = 0) or verify step (K = k) vLLM 0.32 runs as a CUDA
    graph on an H100 served with these engine arguments: the capture sizes by vLLM's own
    VllmConfig._set_cudagraph_sizes (the rest of its config a stand-in; the platform faked as
    Hopper; max_num_batched_tokens the server's default there), then Model Runner V2's uniform
    decode graphs, each size rounded up to a multiple of K + 1 tokens and kept within the
    ceiling and max_num_seqs (vllm/v1/worker/gpu/cudagraph_utils.py, _init_candidates)."""
    from unittest import mock

    from vllm.config.compilation import CompilationConfig, CUDAGraphMode
    from vllm.config.vllm import VllmConfig
    from vllm.platforms import current_platform

    from specmoe.checks.preflight import batched_tokens

    cc = CompilationConfig(**engine.get("compilation_config", {}),
                           cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE)
    q, seqs = k + 1, engine["max_num_seqs"]
    config = SimpleNamespace(
        model_config=SimpleNamespace(enforce_eager=False), compilation_config=cc,
        uniform_decode_query_len=q, performance_mode="balanced",
        scheduler_config=SimpleNamespace(
            max_num_seqs=seqs,
            max_num_batched_tokens=batched_tokens(80, False, engine, "H100", {})),
        speculative_config=(SimpleNamespace(uses_dynamic_speculative_decoding=lambda: False)
                            if k else None))
    with mock.patch.object(type(current_platform), "is_device_capability_family",
                           lambda *a, **kw: False, create=True):
        VllmConfig._set_cudagraph_sizes(config)
    graphs = {g for g in (-(-c // q) * q for c in cc.cudagraph_capture_sizes)
              if g <= min(cc.max_cudagraph_capture_size, seqs * q)}
    return [b for b in range(1, seqs + 1) if any(g >= b * q for g in graphs)]


def test_on_a_faked_cuda_platform_both_arms_graph_every_verify_step_by_vllms_own_sizing(
        checkpoint, tmp_path, monkeypatch):
    """vLLM's default ceiling, min(2 x 128 x 8, 512) tokens on an H100, left the SD engine's
    verify steps above batch 64 at K = 7 without CUDA graphs while the engine without SD had
    its decode steps graphed at every batch. Both arms now capture up to 128 x 8 tokens, the
    same setting, recorded with the engine's arguments; a CPU's engines are unchanged."""
    pytest.importorskip("vllm")
    monkeypatch.setattr(engine_mod, "device", lambda: "cuda")
    sd, plain = _swept_engines(checkpoint, tmp_path, monkeypatch, k=7, largest=128)
    assert graphed_batches(sd, 7) == list(range(1, 129))
    assert graphed_batches(plain, 0) == list(range(1, 129))
    # a separate draft model's series: up to its first draft pass, 128 x 9 tokens
    assert sd["compilation_config"] == plain["compilation_config"] == \
        engine_mod.cuda_graph_config(None, 128, 7, draft_model=True)
    assert max(sd["compilation_config"]["cudagraph_capture_sizes"]) == 1152
    assert {n: v for n, v in sd.items() if n != "speculative_config"} == plain
    monkeypatch.setattr(engine_mod, "device", lambda: "cpu")
    sd, plain = _swept_engines(checkpoint, tmp_path, monkeypatch, k=7, largest=128)
    assert "compilation_config" not in sd and "compilation_config" not in plain


def _alone_engine(checkpoint, tmp_path, monkeypatch) -> dict:
    """The engine arguments of a draft model served alone (rule sweep_ar) as sweep_stage builds
    them."""
    return _alone_series(checkpoint, tmp_path, monkeypatch, "d")[0]


def vllm_picks_v2(env: dict, monkeypatch) -> bool:
    """Whether vLLM 0.32's own VllmConfig.use_v2_model_runner picks Model Runner V2 for a
    separate draft model's SD engine on CUDA under the environment `env`: the property run on
    a stand-in config (draft_model, one GPU, nothing else asked for) with Triton there, as in
    vLLM's CUDA build (the CPU wheel has none)."""
    import types

    import vllm.config.vllm as vc
    from vllm import envs

    envs.disable_envs_cache()  # read the environment now, not as an engine in this process did
    config = SimpleNamespace(
        attention_config=SimpleNamespace(hisparse_config=None),
        speculative_config=SimpleNamespace(method="draft_model", parallel_drafting=False,
                                           use_heterogeneous_vocab=False),
        parallel_config=SimpleNamespace(distributed_executor_backend="mp",
                                        pipeline_parallel_size=1, use_ubatching=False))
    config._get_v2_model_runner_unsupported_features = types.MethodType(
        vc.VllmConfig._get_v2_model_runner_unsupported_features, config)
    var = "VLLM_USE_V2_MODEL_RUNNER"
    with monkeypatch.context() as m:  # this process's environment as it was, afterwards
        if var in env:
            m.setenv(var, env[var])
        else:
            m.delenv(var, raising=False)
        m.setattr(vc, "HAS_TRITON", True)
        return vc.VllmConfig.use_v2_model_runner.fget(config)


def test_on_a_faked_cuda_platform_a_draft_model_series_runs_vllms_v1_runner_in_all_engines(
        checkpoint, tmp_path, monkeypatch):
    """On CUDA vLLM 0.32 picks Model Runner V2 for a separate draft model's SD engine (its own
    choice, below, without the pin), whose StandaloneARSpeculator drafts without CUDA graphs,
    while the draft model served alone for the draft cost runs graphed. With the platform faked
    as CUDA, the three engines of such a series (the SD engine, its target without SD, the draft
    model alone) each get a server environment under which vLLM's own choice is V1; the pin is
    recorded with the engine's arguments (and so in its points' key), and vLLM's server is not
    given it as an argument. An EAGLE-3 series and a CPU's engines are left as they were."""
    pytest.importorskip("vllm")
    from specmoe.runtime.engine import ENGINE_ENV, V1_RUNNER_ENV

    monkeypatch.setattr(engine_mod, "device", lambda: "cuda")
    assert vllm_picks_v2({}, monkeypatch)  # vLLM's default there
    sd, plain = _swept_engines(checkpoint, tmp_path, monkeypatch, k=3, largest=4)
    alone = _alone_engine(checkpoint, tmp_path, monkeypatch)
    assert sd["speculative_config"]["method"] == "draft_model"
    for engine in (sd, plain, alone):
        env = serving.Server(engine, startup_timeout=60).environment()
        assert env["VLLM_USE_V2_MODEL_RUNNER"] == "0" and engine[ENGINE_ENV] == V1_RUNNER_ENV
        assert not vllm_picks_v2(env, monkeypatch)
        argv = serving.server_argv(engine, 0)
        assert "--env" not in argv and "VLLM_USE_V2_MODEL_RUNNER" not in " ".join(argv)
    assert {n: v for n, v in sd.items() if n != "speculative_config"} == plain
    # V1 drafts in PIECEWISE graphs only (llm_base_proposer.initialize_cudagraph_keys): the draft
    # model alone runs those too, the target's engines vLLM's default
    assert alone["compilation_config"]["cudagraph_mode"] == "PIECEWISE"
    assert "cudagraph_mode" not in sd["compilation_config"]
    assert "cudagraph_mode" not in plain["compilation_config"]
    from vllm.config import CompilationConfig
    assert CompilationConfig(**alone["compilation_config"]).cudagraph_mode.name == "PIECEWISE"
    eagle, eagle_plain = _swept_engines(checkpoint, tmp_path, monkeypatch, k=3, largest=4,
                                        method="eagle3")
    assert eagle["speculative_config"]["method"] == "eagle3"
    assert ENGINE_ENV not in eagle and ENGINE_ENV not in eagle_plain
    assert vllm_picks_v2(serving.Server(eagle, startup_timeout=60).environment(), monkeypatch)
    monkeypatch.setattr(engine_mod, "device", lambda: "cpu")
    sd, plain = _swept_engines(checkpoint, tmp_path, monkeypatch, k=3, largest=4)
    assert ENGINE_ENV not in sd and ENGINE_ENV not in plain


def test_a_server_reports_its_engines_model_runner_and_graph_mode(monkeypatch, capsys):
    """The server prints how its engine runs once vLLM has built its config (the model runner
    and engine mode a profile records, kernelprof.engine_runs), and Server reads that line."""
    pytest.importorskip("vllm")
    from vllm.engine.arg_utils import EngineArgs

    from specmoe.runtime import api_server, kernelprof
    from specmoe.runtime.startup import StartClock

    mode, graphs = SimpleNamespace(name="VLLM_COMPILE"), SimpleNamespace(name="FULL_AND_PIECEWISE")
    config = SimpleNamespace(
        use_v2_model_runner=False,
        compilation_config=SimpleNamespace(mode=mode, cudagraph_mode=graphs),
        scheduler_config=SimpleNamespace(async_scheduling=True))
    monkeypatch.setattr(EngineArgs, "create_engine_config", lambda self, *a, **kw: config)
    api_server.report_engine_runs()
    assert EngineArgs.create_engine_config(None) is config
    server = serving.Server({"model": "t"}, startup_timeout=60)
    server.clock, server.proc = StartClock(), SimpleNamespace(
        stdout=iter(["(APIServer pid=1) INFO starting\n", capsys.readouterr().err]))
    server._pump()
    want = {"model_runner": "v1", "engine_mode": {"compilation_mode": "VLLM_COMPILE",
                                                  "cudagraph_mode": "FULL_AND_PIECEWISE",
                                                  "async_scheduling": True}}
    assert server.runs == want == kernelprof.engine_runs(config)


def test_a_series_records_each_engines_model_runner_and_graph_mode(recorder, checkpoint,
                                                                   tmp_path, monkeypatch):
    """Every point keeps how its server's engine ran (the stand-in reports V1 where its
    environment pins it, else V2), and the series records each arm's, also where its points
    are reused: a draft_model series on a (faked) GPU, both arms pinned to V1."""
    from specmoe.contracts import Named
    from specmoe.contracts.engines import SweepSdParams
    from specmoe.provenance import read_json
    from specmoe.sources import prompts as prompt_table
    from specmoe.stages.measure import sweep_stage

    monkeypatch.setattr(engine_mod, "device", lambda: "cuda")
    sweep = {"schedule": [{"batch": 1, "prompts": 2}], "output_len": 8, "warmups": 0,
             "repeats": 1, "startup_timeout_s": 10}
    params = SweepSdParams(job={"model": "t", "drafter": "d", "k": 3, "datasets": ["tinybench"]},
                           settings=sweep, method=None, gpu=False,
                           prompts=prompt_table.DEFAULT_SOURCE, prompting={"draft_slack": 4})
    for run in range(2):  # measured, then every point reused
        sweep_stage(Named({"target": str(checkpoint), "drafter": str(checkpoint), "prompts": []}),
                    Named({"json": str(tmp_path / "s.json")}), params)
        out = read_json(tmp_path / "s.json")
        assert out["datasets"]["tinybench"]["measured"] == 1 - run
        for arm in (out, out["paired_no_sd"]):
            assert arm["model_runner"] == "v1", run
            assert arm["engine_mode"] == {"cudagraph_mode": "FULL_AND_PIECEWISE"}
            assert arm["engine"]["env"] == {"VLLM_USE_V2_MODEL_RUNNER": "0"}


def test_a_users_compilation_config_is_kept_and_one_that_caps_the_graphs_is_refused(
        monkeypatch):
    monkeypatch.setattr(engine_mod, "device", lambda: "cuda")
    kw = engine_mod.engine_kwargs("t", graph_k=3, max_num_seqs=64,
                                  extra={"compilation_config": {"cudagraph_mode": "PIECEWISE"}})
    assert kw["compilation_config"] == {"cudagraph_mode": "PIECEWISE",
                                        **engine_mod.cuda_graph_config(None, 64, 3)}
    for given in ({"max_cudagraph_capture_size": 512}, {"cudagraph_capture_sizes": [1, 2, 512]}):
        kw = engine_mod.engine_kwargs("t", graph_k=3, max_num_seqs=64,
                                      extra={"compilation_config": given})
        assert kw["compilation_config"] == given  # wide enough: as given
        with pytest.raises(InputError) as exc:
            engine_mod.engine_kwargs("t", graph_k=3, max_num_seqs=256,
                                     extra={"compilation_config": given})
        assert str(exc.value) == (
            "engine_args compilation_config captures CUDA graphs up to 512 tokens, below the "
            "1024 of a verify step at batch 256 with K = 3: those steps would run without "
            "graphs; " + ("add 1024 to its sizes" if "cudagraph_capture_sizes" in given
                          else "raise it to 1024") + " or remove it")
    # eager engines capture nothing
    assert "compilation_config" not in engine_mod.engine_kwargs(
        "t", graph_k=3, extra={"enforce_eager": True})


def test_a_datasets_max_batch_keeps_its_series_points_and_speedup_below_it(
        recorder, checkpoint, tmp_path, monkeypatch):
    """The study-cpu case (a study model served on a CPU, its datasets downloaded) with its
    long-prompt set capped at batch 1 (datasets.<name>.max_batch): the SD series that the rule's
    record starts measures that dataset at batch 1 alone, on both arms, and every other dataset
    at the schedule's every batch; each dataset's speedup comes from its own points, the capped
    one's shape too few points to decide. (The server and its client are the stand-ins above.)"""
    import csv

    import yaml
    from snakemake.utils import update_config

    from specmoe.config import Config
    from specmoe.contracts import Named
    from specmoe.contracts.analysis import SpeedupParams
    from specmoe.contracts.engines import SweepSdParams
    from specmoe.measured.sweep import TOO_FEW
    from specmoe.provenance import read_json
    from specmoe.stages.analysis import speedup_stage
    from specmoe.stages.measure import sweep_stage
    from wf import REPO

    monkeypatch.setattr(engine_mod, "device", lambda: "cpu")
    raw = yaml.safe_load((REPO / "config.yaml").read_text())
    update_config(raw, yaml.safe_load((REPO / ".test/study-cpu/config.yaml").read_text()))
    raw["datasets"]["speed-bench"]["max_batch"] = 1
    raw["sweep"]["timing"] = "client"  # the stand-in server has no engine-side timing
    cfg = Config.load(raw, REPO / "workflow/schemas/config.schema.yaml")
    series = {"model": "fine-cpu", "drafter": "tiny-draft", "k": "3"}
    params = SweepSdParams.from_config(cfg, Named(series))
    assert params.job["datasets"] == ["aya", "mt-bench", "speed-bench"]
    tables = []
    for ds in params.job["datasets"]:
        tables.append(tmp_path / f"{ds}.csv")
        with open(tables[-1], "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["prompt_id", "dataset", "category", "text"])
            w.writerows([f"{ds}-{i}", ds, "c", f"Say {i} things about {ds}."] for i in range(4))
    sweep_stage(Named({"target": str(checkpoint), "drafter": str(checkpoint),
                       "prompts": [str(t) for t in tables]}),
                Named({"json": str(tmp_path / "K3.json")}), params)
    out = read_json(tmp_path / "K3.json")["datasets"]
    for ds, want in (("speed-bench", [1, 1]), ("mt-bench", [1, 1, 2, 2]), ("aya", [1, 1, 2, 2])):
        for arm in (out[ds], out[ds]["paired_no_sd"]):
            assert [p["batch"] for p in arm["points"]] == want, ds
    assert not list((tmp_path / "K3.points" / "speed-bench").glob("b2.*"))
    assert not list((tmp_path / "K3.nosd.points" / "speed-bench").glob("b2.*"))
    for ds, batches in (("speed-bench", [1]), ("mt-bench", [1, 2])):
        run = Named({**series, "dataset": ds})
        speedup_stage(Named({"sd": tmp_path / "K3.json", "drafter": []}),
                      Named({"json": tmp_path / f"{ds}.speedup.json"}),
                      SpeedupParams.from_config(cfg, run))
        sp = read_json(tmp_path / f"{ds}.speedup.json")
        assert [r["batch"] for r in sp["rows"]] == batches
        # how the no-SD points were taken: the sweep's own words
        assert sp["no_sd_series"] == read_json(tmp_path / "K3.json")["paired_no_sd"]["order"]
        assert (sp["shape"] == TOO_FEW) == (len(batches) == 1)


def test_a_series_provenance_tells_its_prompting_apart(tmp_path, monkeypatch, checkpoint):
    """A sweep's config hash left out its prompting (each dataset's chat_template and the tokens
    kept free for drafts, which change the tokens every point is measured on), so two series
    differing only there had one hash; the capture's had the same gap
    (tests/test_capture_provenance.py)."""
    hashes = []
    for slack in (4, 6):
        _, args = _alone_series(checkpoint, tmp_path, monkeypatch, "t",
                                prompting={"draft_slack": slack})
        hashes += [x["config_hash"] for x in args if isinstance(x, dict) and "config_hash" in x]
    assert len(hashes) == 2 and hashes[0] != hashes[1]
