"""A run's identity (specmoe.runs): one type, one path form, one label form, each read back in one
place; whether a run's model is an untrained control is data in the tables, not its name."""

import json

import pandas as pd
import pytest

from specmoe import paths as P
from specmoe.errors import InputError
from specmoe.names import job_label
from specmoe.report import tables
from specmoe.report.runs import build_tables, control_models, is_control, load
from specmoe.runs import Run, label_of, path_of

RUN = Run("tiny-fine", "tiny-drafter", 3, "tinybench+heldout-code+heldout-prose")


def test_a_run_has_one_path_form_and_one_label_form():
    assert RUN.path == "tiny-fine/tiny-drafter/K3/tinybench+heldout-code+heldout-prose"
    assert RUN.label == "tiny-fine, K=3, tinybench+2"
    assert str(RUN) == RUN.path
    assert label_of("tiny-fine", 3.0, shape="rising") == "tiny-fine, K=3 (rising)"
    # the results/ patterns, a series and an engine job's name are the same form
    assert P.RUN == "{model}/{drafter}/K{k}/{dataset}" and P.SERIES == "{model}/{drafter}/K{k}"
    assert RUN.fill(P.TRACE) == f"results/traces/{RUN.path}.parquet"
    assert path_of("m", "d", 3) == "m/d/K3" and path_of("m") == "m"
    assert job_label("capture", *RUN.as_dict().values()) == f"capture {RUN.path}"
    assert job_label("sweep_sd", "m", "d", 5) == "sweep_sd m/d/K5"
    assert job_label("sweep_ar", "m") == "sweep_ar m"


def test_a_run_reads_back_from_each_of_its_forms():
    assert Run.parse(RUN.path) == RUN
    assert Run.of(RUN.as_dict()) == RUN
    # a job's wildcards are strings; a table's row holds K as a float where a column has a gap
    wildcards = type("W", (), {"model": "tiny-fine", "drafter": "tiny-drafter", "k": "3",
                               "dataset": RUN.dataset})()
    assert Run.of(wildcards) == RUN
    assert Run.of({**RUN.as_dict(), "k": 3.0}) == RUN
    assert json.loads(json.dumps(RUN.as_dict())) == {"model": "tiny-fine",
                                                      "drafter": "tiny-drafter", "k": 3,
                                                      "dataset": RUN.dataset}


@pytest.mark.parametrize("text, message", [
    ("tiny-fine/tiny-drafter/3/tinybench",
     "not a run: 'tiny-fine/tiny-drafter/3/tinybench' (a run reads model/drafter/K<n>/dataset)"),
    ("tiny-fine/tiny-drafter/K3", "not a run: 'tiny-fine/tiny-drafter/K3' (a run reads "
                                  "model/drafter/K<n>/dataset)"),
    ("m//K3/x", "not a run: 'm//K3/x' (a run reads model/drafter/K<n>/dataset)"),
    ("m/d/K0/x", "run of m: K must be a whole number >= 1 (got 0)"),
])
def test_a_malformed_path_is_refused_in_one_line(text, message):
    with pytest.raises(InputError) as err:
        Run.parse(text)
    assert str(err.value) == message


def test_a_record_missing_a_field_or_with_a_broken_k_is_refused_in_one_line():
    with pytest.raises(InputError, match=r"^not a run: .* has no drafter$"):
        Run.of({"model": "m", "k": 3, "dataset": "x"})
    with pytest.raises(InputError, match=r"^run of m: K must be a whole number >= 1 \(got 2\.5\)$"):
        Run.of({"model": "m", "drafter": "d", "k": 2.5, "dataset": "x"})


def _overlap(run: Run, control_target: str | None = None) -> dict:
    """The parts of an overlap result that rule tables reads (one layer, one slice)."""
    s = {"top_k": 2, "num_experts": 8, "uniform": 0.25, "independent": 0.3, "step1": 0.4,
         "temporal": 0.1, "temporal_share": 0.25, "overlap_by_distance": [0.4, 0.35]}
    out = {"run": run.as_dict(), "summary": s, "per_layer": {"overlap": [[0.4]],
                                                             "independent": [0.3]},
           "unique": {"empirical": 3.0, "empirical_over_k": 1.5, "uniform": 3.5,
                      "independent": 3.2}}
    if control_target:
        out["control"] = {"target": control_target, "matched": True, "comparable": True,
                          "input_repeat_pct": 0.0, "n_requests": 4}
    return out


def test_the_tables_say_which_runs_are_controls_from_the_results_not_the_names(tmp_path):
    """A control named like nothing in particular is one because its overlap result reads its
    target's windows (rule overlap, from the configuration); a model named "-random" that is no
    control is none."""
    target = Run("fine", "d", 3, "x")
    control = Run("baseline-0", "d", 3, "x")
    lookalike = Run("fine-random", "d", 3, "x")
    ovs = [_overlap(target), _overlap(control, "fine"), _overlap(lookalike)]
    dfs = build_tables(_written(tmp_path, "overlap", ovs),
                       _written(tmp_path, "ipf", [_ipf(r) for r in (target, control, lookalike)]),
                       [], [])
    ob = dfs["overlap_by_distance"]
    assert list(ob.columns[:5]) == ["model", "drafter", "k", "dataset", "control_of"]
    assert ob["control_of"].notna().tolist() == [False, True, False]
    assert ob["control_of"][1] == "fine"
    assert "control_of" not in dfs["matched_controls"]  # its own target column says it
    tables.write_tables({"overlap_by_distance": ob}, tmp_path, {})
    read = load(tables.Tables([tmp_path / "overlap_by_distance.csv"]), "overlap_by_distance")
    assert is_control(read).tolist() == [False, True, False]
    assert control_models(read) == {"fine": "baseline-0"}
    assert read["run"].tolist() == ["fine/d/K3/x", "baseline-0/d/K3/x", "fine-random/d/K3/x"]
    assert read["label"].tolist() == ["fine, K=3, x", "baseline-0, K=3, x", "fine-random, K=3, x"]


def _ipf(run: Run, prediction: float = 3.0) -> dict:
    """The parts of an IPF result that rule tables reads."""
    keys = ("uniform_sequence", "uniform_window", "skewed_window")
    return {"run": run.as_dict(), "prediction": {k: prediction for k in keys},
            "relative_error": {k: 0.0 for k in keys}, "converged": {"a": True},
            "n_clipped": {"a": 0}, "n_unconverged_experts": {"skewed_window": 0},
            "n_infeasible_experts": {"skewed_window": 0}}


def _written(where, kind: str, results: list[dict]) -> list:
    out = []
    for i, obj in enumerate(results):
        out.append(where / f"{kind}{i}.json")
        out[-1].write_text(json.dumps(obj))
    return out


def test_overlap_and_ipf_results_pair_by_the_run_each_records(tmp_path):
    """The unique-experts table set each run's overlaps beside the IPF fit at the same place of
    the other list (zip): right only while both lists came in one order, and a run without its
    fit silently lost its row."""
    a, b, c = (Run(m, "d", 3, "x") for m in ("a", "b", "c"))
    ovs = _written(tmp_path, "overlap", [_overlap(r) for r in (a, b, c)])
    ips = _written(tmp_path, "ipf", [_ipf(c, 7.0), _ipf(a, 5.0), _ipf(b, 6.0)])
    ue = build_tables(ovs, ips, [], [])["unique_experts"]
    assert ue[["model", "ipf_uniform_sequence"]].values.tolist() == [["a", 5.0], ["b", 6.0],
                                                                     ["c", 7.0]]
    with pytest.raises(InputError, match=r"^the overlap and IPF results are not of the same "
                                         r"runs \(overlap alone: b/d/K3/x; IPF alone: none\)$"):
        build_tables(ovs, [ips[0], ips[1]], [], [])


def test_a_table_that_cannot_say_which_runs_are_controls_is_an_error():
    df = pd.DataFrame([{"model": "m", "drafter": "d", "k": 3, "dataset": "x"}])
    with pytest.raises(ValueError, match="has no control_of column"):
        is_control(df)
    assert is_control(pd.DataFrame()).tolist() == []


def test_a_runs_dataset_splits_into_its_main_and_held_out_sets_in_one_place():
    from specmoe.runs import dataset_parts, datasets_in, short_dataset

    assert dataset_parts("tinybench+heldout-code+heldout-prose") == [
        "tinybench", "heldout-code", "heldout-prose"]
    assert dataset_parts("synth") == ["synth"]
    assert datasets_in(["b+a", "a", "c+b"]) == ["a", "b", "c"]
    assert short_dataset("tinybench+heldout-code+heldout-prose") == "tinybench+2"
