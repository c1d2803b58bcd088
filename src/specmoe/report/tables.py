"""Tables as CSV, Markdown, LaTeX (booktabs) and HTML, each written atomically with provenance.

CSV files start with one `# provenance: {...}` comment line; read them with `read_csv`.
"""

from __future__ import annotations

import html as _html
import io
import json
import math
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from ..paths import TABLE_FORMATS as FORMATS
from ..provenance import CSV_PROVENANCE, past_provenance, provenance_line, write_csv, write_text
from . import registry

# Column identifiers (kept in CSV, for programs) as people read them (Markdown, LaTeX, HTML). The
# symbols are the method's: k experts per token, N experts per layer, K draft length.
_WORDS = {"te": "TE", "tpot": "TPOT", "ar": "no-SD", "sd": "SD", "ms": "(ms)", "us": "(µs)",
          "ipf": "IPF", "moe": "MoE", "tau": "acceptance length τ",
          "low": "95% low", "high": "95% high", "rel": "relative", "err": "error",
          "costmodel": "cost model", "ctas": "CTAs", "sm": "SM", "hf": "HF", "kv": "KV",
          "pos": "position", "seq": "seq.", "num": "number of", "pct": "(%)", "gib": "(GiB)",
          "mib": "(MiB)", "p": "p"}
_COLUMNS = {  # whole identifiers whose parts would read wrongly
    "k": "K", "top_k": "k (experts per token)", "k_over_n": "k/N", "num_experts": "N",
    "n": "n", "n_requests": "requests", "drafter_experts": "drafter's N",
    "empirical_over_k": "measured / k", "p_by_request": "p (by request)",
    "p_tokens_welch": "p Welch (tokens)", "p_tokens_mannwhitney": "p Mann-Whitney (tokens)",
    "delta_low_by_request": "delta 95% low (by request)",
    "delta_high_by_request": "delta 95% high (by request)",
    "delta_low_tokens": "delta 95% low (tokens)", "delta_high_tokens": "delta 95% high (tokens)",
    "se_by_request": "SE (by request)", "se_tokens": "SE (tokens)",
    "k_draft": "K", "cohens_d": "Cohen's d", "target_experts": "target's N",
    # a range physics allows, not an interval: never "95% low/high"
    "physical_low": "physical range low", "physical_high": "physical range high"}


def header(col: str) -> str:
    """A column's header for people: words for the identifier's parts ("te_sweep_low" reads
    "TE sweep 95% low", "tpot_ar_ms" "TPOT no-SD (ms)")."""
    if str(col) in _COLUMNS:
        return _COLUMNS[str(col)]
    return " ".join(_WORDS.get(w, w) for w in str(col).split("_") if w)


def _fmt(v, digits: int, col: str = "") -> str:
    """One number format per kind of quantity: fixed decimals (never scientific notation), a
    p-value below 0.001 as "< 0.001", a percent (a `_pct` column) with one decimal, an unbounded
    value as "∞"."""
    if v is None or v is pd.NA:  # one symbol for a missing value in every table
        return "–"
    if isinstance(v, float):
        if math.isnan(v):
            return "–"
        if math.isinf(v):
            return "∞" if v > 0 else "-∞"
        col = str(col)
        if col.startswith("p_") or col == "p_value":
            return "< 0.001" if v < 0.001 else f"{v:.3f}"
        if col.endswith("_pct"):
            return f"{v:+.1f}" if "error" in col or "diff" in col else f"{v:.1f}"
        if abs(v) >= 1e4:
            return f"{v:,.0f}"
        out = f"{v:.{digits}f}"
        return out.replace("-", "", 1) if float(out) == 0 else out  # no "-0.000"
    return str(v)


def to_markdown(df: pd.DataFrame, digits: int = 3) -> str:
    cols = [header(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |",
             "|" + "|".join("---:" if pd.api.types.is_numeric_dtype(df[c]) else ":---"
                            for c in df.columns) + "|"]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(_fmt(v, digits, c) for v, c in zip(row, df.columns))
                     + " |")
    return "\n".join(lines) + "\n"


def _tex_escape(s: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("_", r"\_"),
                 ("#", r"\#"), ("$", r"\$"), ("{", r"\{"), ("}", r"\}")):
        s = s.replace(a, b)
    return s.replace(r"\textbackslash\{\}", r"\textbackslash{}")


def to_latex(df: pd.DataFrame, caption: str = "", digits: int = 3) -> str:
    align = "".join("r" if pd.api.types.is_numeric_dtype(df[c]) else "l" for c in df.columns)
    out = [r"\begin{table}[t]", r"\centering"]
    if caption:
        out.append(r"\caption{" + _tex_escape(caption) + "}")
    out += [r"\begin{tabular}{" + align + "}", r"\toprule",
            " & ".join(_tex_escape(header(c)) for c in df.columns) + r" \\", r"\midrule"]
    for row in df.itertuples(index=False):
        out.append(" & ".join(_tex_escape(_fmt(v, digits, c)) for v, c in zip(row, df.columns))
                   + r" \\")
    out += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(out) + "\n"


def to_html(df: pd.DataFrame, caption: str = "", digits: int = 3) -> str:
    """A standalone HTML page: the caption, then the table (numbers right-aligned)."""
    shown = pd.DataFrame({c: [_fmt(v, digits, c) for v in df[c]] for c in df.columns},
                         columns=df.columns)
    body = shown.rename(columns=header).to_html(index=False, border=0, classes="specmoe")
    style = ("body{font-family:sans-serif;font-size:13px} table{border-collapse:collapse} "
             "td,th{padding:2px 8px;border-bottom:1px solid #ddd} td{text-align:right} "
             "th{text-align:left}")
    cap = f"<p>{_html.escape(caption)}</p>" if caption else ""
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><style>{style}</style></head>"
            f"<body>{cap}{body}</body></html>")


def _counts_as_integers(df: pd.DataFrame) -> pd.DataFrame:
    """Count columns (n_...) that a missing value made floating point, as integers again."""
    out = df.copy()
    for c in df.columns:
        col = df[c]
        if (str(c).startswith("n_") and pd.api.types.is_float_dtype(col)
                and (col.dropna() % 1 == 0).all()):
            out[c] = col.astype("Int64")
    return out


def provenance_comment(prov: dict, html: bool = False) -> str:
    """A Markdown (or, html, an HTML page's) provenance comment: its record's one line
    (provenance_line), as every table's .md (and, escaped, .html) file and the report's pages
    carry it."""
    line = provenance_line(prov)
    return f"<!-- provenance: {_html.escape(line) if html else line} -->"


def write_table(df: pd.DataFrame, stem: str | Path, prov: dict, caption: str = "",
                digits: int = 3) -> list[Path]:
    """Write stem.csv, stem.md, stem.tex and stem.html. Returns the paths."""
    stem = Path(stem)
    df = _counts_as_integers(df)
    prov_line = provenance_line(prov)
    buf = io.StringIO()
    df.to_csv(buf, index=False)
    paths = [stem.with_suffix(f".{ext}") for ext in FORMATS]
    write_csv(paths[0], buf.getvalue(), prov)
    head = f"**{caption}**\n\n" if caption else ""
    write_text(paths[1], head + to_markdown(df, digits) + f"\n{provenance_comment(prov)}\n")
    write_text(paths[2], f"% provenance: {prov_line}\n" + to_latex(df, caption, digits))
    write_text(paths[3], to_html(df, caption, digits)
               + f"\n{provenance_comment(prov, html=True)}\n")
    return paths


def read_provenance(path: str | Path) -> dict:
    """The provenance record of a table written by write_table (its CSV's first line)."""
    with open(path) as f:
        line = f.readline()
    return (json.loads(line[len(CSV_PROVENANCE):]) if line.startswith(CSV_PROVENANCE)
            else {})


def read_csv(path: str | Path, **kwargs) -> pd.DataFrame:
    """A table written by write_table (pandas.read_csv's `kwargs`), past its provenance line
    alone: a cell holding `#` reads whole. One of no rows has no columns either (its CSV holds
    only the provenance line), and reads back as an empty frame."""
    with open(path, newline="") as f:
        try:
            return pd.read_csv(past_provenance(f), **kwargs)
        except pd.errors.EmptyDataError:
            return pd.DataFrame()


def by_stem(paths) -> dict[str, str]:
    """A rule's declared files as {stem: path} (a mapping is taken as it is); two files of one
    stem cannot be told apart, and are an error."""
    if isinstance(paths, Mapping):
        return {str(stem): str(p) for stem, p in paths.items()}
    out: dict[str, str] = {}
    for p in [paths] if isinstance(paths, (str, Path)) else paths:
        stem = Path(p).stem
        if stem in out:
            raise ValueError(f"two tables of stem {stem}: {out[stem]} and {p}")
        out[stem] = str(p)
    return out


class Tables:
    """The tables a job reads, exactly those its rule declares: {stem: CSV path}. A stem it does
    not declare reads as an empty frame (the configuration does not make that table), whatever
    lies in the folder; each declared CSV is parsed once per job (kept by path), and every read
    returns a copy."""

    def __init__(self, paths=()):
        self.paths = {stem: Path(p) for stem, p in by_stem(paths).items()}
        self._parsed: dict[Path, pd.DataFrame] = {}

    @classmethod
    def of(cls, tables) -> "Tables":
        """`tables` itself if it is a Tables, else the Tables of its paths."""
        return tables if isinstance(tables, cls) else cls(tables)

    def __contains__(self, stem: str) -> bool:
        return stem in self.paths

    def __iter__(self):
        return iter(self.paths)

    def read(self, stem: str) -> pd.DataFrame:
        """The declared table `stem` as written (an undeclared one: an empty frame)."""
        path = self.paths.get(stem)
        if path is None:
            return pd.DataFrame()
        if path not in self._parsed:
            self._parsed[path] = read_csv(path)
        return self._parsed[path].copy()


def write_tables(dfs: dict[str, pd.DataFrame], outdir, prov: dict) -> list[Path]:
    paths = []
    for stem, df in dfs.items():
        paths += write_table(df, Path(outdir) / stem, prov, registry.text(stem))
    return paths
