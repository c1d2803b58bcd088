"""What a report job would declare, listed from a folder a test filled: {stem: path} of the files
of one format. The pipeline's jobs are given theirs by their rules and never list a folder; a test
that writes its fixture tables into a folder declares them all."""

from __future__ import annotations

from pathlib import Path

from specmoe.report.tables import Tables


def in_folder(folder, ext: str = "csv") -> dict[str, Path]:
    return {p.stem: p for p in sorted(Path(folder).glob(f"*.{ext}"))}


def tables_in(folder) -> Tables:
    """Every CSV table in the folder, as a job reads its declared tables."""
    return Tables(in_folder(folder))


def report_inputs(table_dir, figure_dir) -> tuple[dict, dict, dict]:
    """The report's declared inputs: the tables' CSVs and Markdown, and the figures' PNGs."""
    return in_folder(table_dir), in_folder(table_dir, "md"), in_folder(figure_dir, "png")


def report_job(table_dir, figure_dir, index) -> tuple:
    """Rule report_index's (inputs, outputs) for a report of every table and figure in these
    folders, written to `index` (index.md; its HTML page and summary beside it)."""
    from specmoe.contracts import Named

    csvs, mds, pngs = report_inputs(table_dir, figure_dir)
    index = Path(index)
    return (Named({"tables": csvs, "markdown": mds, "figures": pngs}),
            Named({"md": index, "html": index.with_suffix(".html"),
                   "summary": index.parent / "summary.txt"}))
