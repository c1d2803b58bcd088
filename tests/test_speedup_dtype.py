"""Rule speedup compares the dtype the drafter served alone ran in with the dtype its draft ran
in inside the SD series (vLLM gives it the target's), as the series record them
(tests/test_sweep_dtype.py), not the configured names: under dtype "auto" they differ where the
two checkpoints were saved in different dtypes."""

import pytest

from specmoe.contracts import Named
from specmoe.errors import InputError
from specmoe.provenance import read_json, write_json
from test_sweep_dtype import DS, _sweep, checkpoints  # noqa: F401 (a fixture)

pytest.importorskip("vllm")


def _speedup(sd: str, dr: str, tmp_path):
    from specmoe.contracts.analysis import SpeedupParams
    from specmoe.stages.analysis import speedup_stage

    params = SpeedupParams(run={"model": "t", "drafter": "d", "dataset": DS, "k": 3},
                           margin=0.05, timing="client", engine_log_sd=0.0,
                           engine_log_sd_df=None, engine_log_sd_device="cpu")
    out = tmp_path / "speedup.json"
    out.unlink(missing_ok=True)
    speedup_stage(Named({"sd": sd, "drafter": [dr]}), Named({"json": out}), params)
    return read_json(out)


def test_a_drafter_alone_in_another_resolved_dtype_than_its_draft_is_refused(
        checkpoints, tmp_path, monkeypatch):
    """A bf16 target drafting with an fp16 checkpoint, both series configured "auto": the draft
    ran in bfloat16 inside SD and the drafter alone in float16, and the speedup took c from the
    two without a word (the configured "auto" of both series agreed). The series now record
    what each model ran in, and the speedup refuses the pair in one line naming both files and
    dtypes; configured explicitly, the same checkpoints run in one dtype and pass."""
    sd = _sweep(checkpoints, tmp_path, monkeypatch, "bfloat16", "float16", "auto")
    dr = _sweep(checkpoints, tmp_path, monkeypatch, "float16", None, "auto")
    with pytest.raises(InputError) as err:
        _speedup(sd, dr, tmp_path)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{dr}: the drafter ran alone in float16 at TP 1")
    assert f"drafts in bfloat16 at TP 1 in {sd}" in msg and "sweep.dtype" in msg
    assert not (tmp_path / "speedup.json").exists()
    # the same checkpoints in one explicit dtype: both ran in it, and the speedup has its c
    sd = _sweep(checkpoints, tmp_path, monkeypatch, "bfloat16", "float16", "bfloat16")
    dr = _sweep(checkpoints, tmp_path, monkeypatch, "float16", None, "bfloat16")
    rows = _speedup(sd, dr, tmp_path)["rows"]
    assert [r["draft_cost"] for r in rows] == pytest.approx([3 * 1.0 / 10.0, 3 * 1.1 / 11.0],
                                                            rel=0.01)


@pytest.mark.parametrize("which", ["sd", "dr"])
def test_a_series_of_dtype_auto_that_records_no_resolved_dtype_is_refused(
        checkpoints, tmp_path, monkeypatch, which):
    """A series written before the resolved dtypes were recorded: one configured "auto" cannot
    say what it ran in, so the speedup refuses it in one line (rerunning its rule reuses its
    points and records it); one configured explicitly ran in that dtype (vLLM serves an explicit
    dtype as named, the draft in its target's), so it stands."""
    paths = {"sd": _sweep(checkpoints, tmp_path, monkeypatch, "bfloat16", "float16", "auto"),
             "dr": _sweep(checkpoints, tmp_path, monkeypatch, "bfloat16", None, "auto")}
    assert _speedup(paths["sd"], paths["dr"], tmp_path)["rows"]  # both bfloat16: it runs
    old = read_json(paths[which])
    prov = old.pop("provenance")
    for key in ("resolved_dtype", "draft_resolved_dtype"):
        old.pop(key)
    write_json(paths[which], old, prov)
    rule = {"sd": "sweep_sd", "dr": "sweep_ar"}[which]
    with pytest.raises(InputError, match=f"^{paths[which]}: ran in dtype auto and records not "
                                         f"what it resolved to .* rerun rule {rule} "):
        _speedup(paths["sd"], paths["dr"], tmp_path)
    old["engine"]["dtype"] = "bfloat16"  # configured explicitly: it ran in bfloat16
    write_json(paths[which], old, prov)
    assert _speedup(paths["sd"], paths["dr"], tmp_path)["rows"]
