import json

import pandas as pd

from declared import report_job
from specmoe.report.tables import read_csv, to_latex, to_markdown, write_table


def test_write_table_four_formats_with_provenance(tmp_path):
    df = pd.DataFrame({"model": ["a_b", "c"], "step1": [0.4312, float("nan")], "n": [3, 4]})
    paths = write_table(df, tmp_path / "t", {"config_hash": "h1"}, caption="Cap 50%")
    assert [p.suffix for p in paths] == [".csv", ".md", ".tex", ".html"]
    back = read_csv(paths[0])
    pd.testing.assert_frame_equal(back, df)
    first = paths[0].read_text().splitlines()[0]
    assert json.loads(first.split(": ", 1)[1])["config_hash"] == "h1"
    md = paths[1].read_text()
    assert "| a_b | 0.431 | 3 |" in md and "| c | – | 4 |" in md
    tex = paths[2].read_text()
    assert r"\toprule" in tex and r"a\_b" in tex and r"Cap 50\%" in tex
    page = paths[3].read_text()
    assert "<p>Cap 50%</p>" in page and "<td>a_b</td>" in page and "0.431" in page
    assert "h1" in page.split("<!-- provenance:")[1]
    assert not list(tmp_path.glob(".*tmp"))


def test_a_cell_holding_a_hash_reads_back_whole(tmp_path):
    """Only the provenance line is skipped: read as comments, `#` cut a prompt category `C#` to
    `C` and its row's other cells to NaN. A CSV without the line reads from its first."""
    df = pd.DataFrame({"category": ["C#", "#1", "plain"], "x": [0.5, 1.0, 2.0]})
    back = read_csv(write_table(df, tmp_path / "t", {"config_hash": "h1"})[0])
    pd.testing.assert_frame_equal(back, df)
    df.to_csv(tmp_path / "own.csv", index=False)
    pd.testing.assert_frame_equal(read_csv(tmp_path / "own.csv"), df)


def test_markdown_alignment():
    md = to_markdown(pd.DataFrame({"x": ["a"], "y": [1.0]}))
    assert md.splitlines()[1] == "|:---|---:|"
    assert to_latex(pd.DataFrame({"x": ["a"], "y": [1.0]})).count(r"\midrule") == 1


def test_report_opens_with_its_caveats(tmp_path):
    """A skewed IPF fit that did not converge and batch sizes beyond the trace's sample are said at
    the top of the report, not only in JSON."""
    import pandas as pd

    from specmoe.contracts.report import ReportIndexParams
    from specmoe.stages.report import report_index_stage

    td = tmp_path / "tables"
    td.mkdir()
    run = {"model": "m", "drafter": "d", "k": 7, "dataset": "x"}
    pd.DataFrame([{**run, "ipf_skewed_window_unconverged_experts": 15,
                   "ipf_skewed_window_infeasible_experts": 4}]).to_csv(
        td / "unique_experts.csv", index=False)
    pd.DataFrame([{**run, "routing": "r", "batch": b, "te": 0.5, "compute_bound": False,
                   "sample_ok": b < 64} for b in (1, 64, 128)]).to_csv(td / "te_vs_batch.csv",
                                                                      index=False)
    out = tmp_path / "report" / "index.md"
    report_index_stage(*report_job(td, tmp_path / "figures", out), ReportIndexParams("x"),
                       run_root=None)
    text = out.read_text()
    assert "## Caveats" in text and ("skewed IPF fit stopped short of the margins of 15 "
                                     "expert(s), 4 of them with pair margins that cannot hold "
                                     "together") in text
    assert "too few windows for the measured-windows TE at batch 64, 128" in text


def test_report_says_what_the_routing_shows(tmp_path):
    """Run by run, in words decided by the intervals over requests: the decay inside windows (with
    the share of the temporal overlap that step 1 above the exact shuffle null certifies: the
    same contrast, given once, never as a second direction), the decay among pairs of one
    acceptance status, with and without the windows that repeat a token."""
    import pandas as pd

    from specmoe.contracts.report import ReportIndexParams
    from specmoe.stages.report import report_index_stage

    td = tmp_path / "tables"
    td.mkdir()
    iv = lambda name, v, h: {name: v, f"{name}_low": v - h, f"{name}_high": v + h}  # noqa: E731
    rows = [
        {"model": "trained", "drafter": "d", "k": 3, "dataset": "x", "step1": 0.47, "step2": 0.47,
         "step3": 0.45, "independent": 0.38, "shuffle1": 0.47, "step1_no_repetition": 0.465,
         "step2_no_repetition": 0.426, "step3_no_repetition": 0.414,
         "repetitive_windows_pct": 28.0, **iv("window_decay", 0.02, 0.03),
         **iv("above_shuffle", 0.0, 0.01), **iv("above_shuffle_share", 0.0, 0.1),
         **iv("window_decay_within_status", 0.03, 0.01),
         **iv("window_decay_no_repetition", 0.051, 0.02),
         **iv("window_decay_within_status_no_repetition", 0.04, 0.01)},
        {"model": "control", "drafter": "d", "k": 3, "dataset": "x", "step1": 0.54, "step2": 0.57,
         "step3": 0.53, "independent": 0.16, "shuffle1": 0.55, "step1_no_repetition": 0.455,
         "step2_no_repetition": 0.454, "step3_no_repetition": 0.456,
         "repetitive_windows_pct": 98.0, **iv("window_decay", 0.01, 0.005),
         **iv("above_shuffle", -0.01, 0.02)},
    ]
    pd.DataFrame(rows).to_csv(td / "overlap_by_distance.csv", index=False)
    out = tmp_path / "report" / "index.md"
    report_index_stage(*report_job(td, tmp_path / "figures", out), ReportIndexParams("x"),
                       run_root=None)
    text = out.read_text()
    assert "### What the routing shows, run by run" in text
    assert ("trained, K=3, x: inside windows, overlap at d = 1..3 0.470 / 0.470 / 0.450, from "
            "d = 1 to 3 undecided (+0.020 [-0.010, +0.050]); step 1 not decidedly above the "
            "within-window shuffle null (+0.000 [-0.010, +0.010]): no within-window ordering "
            "certified; among pairs of one acceptance status, from d = 1 to 2 decays (+0.030 "
            "[+0.020, +0.040])") in text
    assert "certifies 0%" not in text  # an undecided share certified nothing
    assert "null: undecided" not in text and "null: above" not in text
    assert ("28% of windows repeat a token, and without them 0.465 / 0.426 / 0.414, decays "
            "(+0.051 [+0.031, +0.071]), among pairs of one acceptance status decays (+0.040 "
            "[+0.030, +0.050])") in text
    assert ("control, K=3, x: inside windows, overlap at d = 1..3 0.540 / 0.570 / 0.530, from "
            "d = 1 to 3 decays (+0.010 [+0.005, +0.015])") in text
    assert "without them 0.455 / 0.454 / 0.456, no interval: no direction is claimed" in text


def test_tables_keep_identifiers_for_programs_and_words_for_people(tmp_path):
    """CSV headers are the identifiers programs join on; Markdown, LaTeX and HTML show words."""
    from specmoe.report.tables import read_csv, write_table

    df = pd.DataFrame({"k": [3], "te_sweep_low": [0.5], "tpot_ar_ms": [4.0], "tau": [2.1]})
    paths = write_table(df, tmp_path / "t", {"config_hash": "x"})
    assert list(read_csv(paths[0]).columns) == list(df.columns)
    md, tex, html_ = (p.read_text() for p in paths[1:])
    for text in (md, tex.replace("\\%", "%"), html_):
        assert "TE sweep 95% low" in text and "TPOT no-SD (ms)" in text
        assert "te\\_sweep\\_low" not in text and "<th>te_sweep_low" not in text
    assert "| K | TE sweep 95% low | TPOT no-SD (ms) | acceptance length τ |" in md


def test_a_table_of_no_rows_reads_back_empty(tmp_path):
    """A configuration without prompts (a synthetic trace) gives prompt_fit no rows and so no
    columns: the report read its CSV with pandas' EmptyDataError and stopped."""
    import pandas as pd

    from specmoe.report import tables

    tables.write_table(pd.DataFrame(), tmp_path / "prompt_fit", {"config": "x"})
    assert tables.read_csv(tmp_path / "prompt_fit.csv").empty
