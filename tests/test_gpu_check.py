"""The GPU smoke check's parts that run without a GPU (bench/gpu_check.py): its command line, and
the comparison of the eager and the default capture on synthetic traces (the same committed
sequence split into other windows is the same; one committed token routed elsewhere, or another
token committed, is not; rejected drafts do not count). The check itself needs vLLM's CUDA build
and a GPU, and is not run here."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from specmoe.routing.synth import SynthParams, generate
from specmoe.routing.trace import STATUS, Trace
from wf import REPO

spec = importlib.util.spec_from_file_location("gpu_check", REPO / "bench" / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_check)


def trace() -> Trace:
    return generate(SynthParams(num_experts=16, top_k=2, num_layers=2, k_draft=3, requests=4,
                                steps=6, accept_prob=0.6, seed=3))


def copy(tr: Trace) -> Trace:
    return Trace(experts=tr.experts.copy(), columns={k: v.copy() for k, v in tr.columns.items()},
                 num_experts=tr.num_experts, k_draft=tr.k_draft, meta=dict(tr.meta))


def test_the_command_line():
    a = gpu_check.parse_args(["smoke", "--out-dir", "o"])
    assert (a.mode, a.target, a.drafter, a.k, a.prompts, a.out_dir) == (
        "smoke", gpu_check.SMOKE_TARGET, gpu_check.SMOKE_DRAFTER, 3, 16, "o")
    assert gpu_check.parse_args(["--out", "x.json"]).mode == "kernels"  # as before
    with pytest.raises(SystemExit):
        gpu_check.parse_args(["smoke", "--k", "0"])
    with pytest.raises(SystemExit):
        gpu_check.parse_args(["warp"])


def test_identical_captures_compare_identical():
    tr = trace()
    res = gpu_check.compare_committed(tr, copy(tr))
    committed = np.isin(tr.columns["status"], [0, 1]).sum()
    assert res["identical"] and res["committed_tokens"] == committed
    assert res["requests"] == 4 and res["first_mismatch"] is None


def test_a_committed_token_routed_elsewhere_is_a_mismatch_a_rejected_one_is_not():
    tr = trace()
    b = copy(tr)
    rejected = np.flatnonzero(b.columns["status"] == STATUS.index("first_rejected"))[0]
    b.experts[rejected, 0] = (b.experts[rejected, 0] + 1) % 16
    assert gpu_check.compare_committed(tr, b)["identical"]
    accepted = np.flatnonzero(b.columns["status"] == STATUS.index("accepted"))[0]
    b.experts[accepted, 1, 0] = (b.experts[accepted, 1].max() + 1) % 16
    res = gpu_check.compare_committed(tr, b)
    assert not res["identical"] and res["routing_mismatches"] == 1 and res["token_mismatches"] == 0
    assert res["first_mismatch"]["request"] == int(b.columns["request"][accepted])


def test_the_order_of_experts_within_a_layer_does_not_matter():
    tr = trace()
    b = copy(tr)
    b.experts = b.experts[:, :, ::-1].copy()
    assert gpu_check.compare_committed(tr, b)["identical"]


def test_another_committed_token_is_a_mismatch():
    tr = trace()
    b = copy(tr)
    i = np.flatnonzero(b.columns["status"] == STATUS.index("committed"))[2]
    b.columns["token_id"][i] += 1
    res = gpu_check.compare_committed(tr, b)
    assert not res["identical"] and res["token_mismatches"] == 1


def test_other_window_splits_of_one_committed_sequence_are_identical():
    """Async scheduling may accept differently; the committed sequence is what must agree. A
    request's windows rebuilt as one token per window (no drafts) commit the same sequence."""
    tr = trace()
    seqs = gpu_check.committed_sequences(tr)
    cols = {k: [] for k in tr.columns}
    experts = []
    for r, (tokens, routed) in seqs.items():
        first = np.flatnonzero(tr.columns["request"] == r)[0]
        for step, (tok, ex) in enumerate(zip(tokens, routed)):
            for k in cols:
                cols[k].append(tr.columns[k][first])
            cols["step"][-1], cols["position"][-1], cols["token_id"][-1] = step, 0, tok
            cols["status"][-1], cols["accepted"][-1], cols["n_drafts"][-1] = 0, 0, 0
            experts.append(ex)
    b = Trace(experts=np.array(experts), columns={k: np.array(v, dtype=tr.columns[k].dtype)
                                                 for k, v in cols.items()},
              num_experts=tr.num_experts, k_draft=tr.k_draft)
    assert gpu_check.compare_committed(tr, b)["identical"]
