"""How a table or figure appears in the report: a heading in words, its caption, its files, and
the table itself split into readable parts (the columns that name a row repeated in each part,
empty columns left out) with its main rows inline where it is long."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from ..runs import short_dataset
from . import registry, tables
from .runs import first_run, is_control

MAX_INLINE_ROWS = 40
# a curve's batch sizes are all shown inline where they are this many or fewer, else every other
# one (shown_batches)
FEW_BATCHES = 4
# the quantities of the comparison shown inline: the study's headline numbers
COMPARISON_MAIN = ("seq1", "seq2", "seq3", "independent", "sequence_temporal_share", "empirical",
                   "ipf_uniform_sequence", "te_sweep", "decode_kernel_share", "delta")


def parts(df: pd.DataFrame, stem: str) -> list[tuple[str, pd.DataFrame]]:
    """The table as (title, part) pairs: the key columns (registry.KEYS) in every part, the value
    columns grouped as registry.GROUPS says (else in runs of at most registry.MAX_COLUMNS),
    columns without any value left out."""
    keys = [c for c in df.columns if c in registry.KEYS]
    values = [c for c in df.columns if c not in keys and df[c].notna().any()]
    groups = registry.GROUPS.get(stem)
    split: list[tuple[str, list[str]]] = []
    if groups:
        left = list(values)
        for title, pattern in groups.items():
            cols = [c for c in left if re.fullmatch(pattern, str(c))]
            left = [c for c in left if c not in cols]
            if cols:
                split.append((title, cols))
        if left:
            split.append(("other columns", left))
    elif len(values) > registry.MAX_COLUMNS:
        n = -(-len(values) // registry.MAX_COLUMNS)
        size = -(-len(values) // n)
        split = [(f"part {i + 1} of {n}", values[i * size:(i + 1) * size]) for i in range(n)]
    else:
        split = [("", values)]
    return [(title, df[keys + cols]) for title, cols in split]


# Curves shown with one column per line (the file keeps one row per point): stem -> (the column
# naming the line, the value, a word for the value)
PIVOTS = {"draft_ratio_model": ("drafter_kind", "draft_cost", "draft cost ratio c"),
          "te_vs_batch": ("routing", "te", "TE")}


def shown_batches(batches) -> list[int]:
    """The batch sizes of a curve shown inline, of those it has: all where they are few
    (FEW_BATCHES), else every other one from the smallest (1, 4, 16, ... of the powers of 2)."""
    sizes = sorted({int(b) for b in batches})
    return sizes if len(sizes) <= FEW_BATCHES else sizes[::2]


def _sizes(sizes) -> str:
    return ", ".join(str(int(s)) for s in sizes)


def pivoted(df: pd.DataFrame, stem: str) -> tuple[pd.DataFrame, str]:
    """A curve table as people read it: each model's first run (untrained controls, whose
    dimensions are their targets', left out), one row per batch size (shown_batches), one column
    per line."""
    line, value, word = PIVOTS[stem]
    df = first_run(df[~is_control(df)])
    every = sorted({int(b) for b in df["batch"]})
    shown = shown_batches(every)
    df = df[df["batch"].astype(int).isin(shown)]
    index = [c for c in ("model", "k", "target_experts", "batch") if c in df]
    # rows and lines in the table's own order (pivot sorts them)
    rows = pd.MultiIndex.from_tuples(list(dict.fromkeys(map(tuple, df[index].values))),
                                     names=index)
    cols = list(dict.fromkeys(df[line]))
    marks = _marks(df, value)
    if f"{value}_raw" in df:  # a flagged cell shows its raw number beside its mark
        df = df.assign(**{value: df[value].where(marks.ne("‡"), df[f"{value}_raw"])})
    wide, mark = (df.assign(_mark=marks).pivot(index=index, columns=line, values=v)
                  .reindex(index=rows, columns=cols) for v in (value, "_mark"))
    for c in cols:  # a flagged cell reads as its number and its mark, not as a value
        flagged = mark[c].notna() & mark[c].ne("")
        if flagged.any():
            wide[c] = wide[c].astype(object).where(
                ~flagged, wide[c].map(lambda v: f"{v:.3f}") + " " + mark[c])
    wide = wide.reset_index()
    wide.columns.name = None
    which = _sizes(shown) + ("" if shown == every else
                             f": every other one of the table's {len(every)}")
    note = (f"Shown: {word} by batch size ({which}), one column per "
            f"{line.replace('_', ' ')}, at each model's first run, untrained controls left "
            "out (their dimensions are their targets'); every row is in the files above.")
    return wide, " ".join([note] + [MARKS[m] for m in MARKS if marks.eq(m).any()])


# Marks of a curve's cells that are not ordinary values, and what each means
MARKS = {"†": "†: the trace has too few windows for the measured-windows estimate at that "
              "batch size (sample_ok false): not a reliable value.",
         "‡": "‡: not physical (te_status), so not a target efficiency: the raw value is "
              "shown (te_raw)."}


def _marks(df: pd.DataFrame, value: str) -> pd.Series:
    """Each row's mark (MARKS; "" for an ordinary value): a TE whose te_status is not "ok"
    though a raw value was measured (report.bounds decided it) first, then a row flagged
    sample_ok False."""
    out = pd.Series("", index=df.index, dtype=object)
    if "sample_ok" in df:
        out[df["sample_ok"].eq(False)] = "†"
    if value == "te" and {"te_status", "te_raw"} <= set(df):
        out[df["te_status"].ne("ok") & df["te_raw"].astype(float).notna()] = "‡"
    return out


def main_rows(df: pd.DataFrame, stem: str) -> tuple[pd.DataFrame, str]:
    """The rows shown inline and a note saying which, where the table is long: the comparison's
    headline quantities; a held-out table's summary rows; else each model's first run, and of a
    curve its batch sizes as pivoted shows them (shown_batches), named."""
    if len(df) <= MAX_INLINE_ROWS:
        return df, ""
    out, what, thinned = df, [], False
    if stem == "comparison" and "quantity" in df:
        out = first_run(df[df["quantity"].isin(COMPARISON_MAIN)])
        what = ["the headline quantities at each model's first run"]
    elif "slice" in df and df["slice"].astype(str).str.match(r"(mean|median) of").any():
        out = df[df["slice"].astype(str).str.match(r"(mean|median) of")]
        what = ["the summary row of each held-out dataset"]
    else:
        if {"model", "k", "dataset", "drafter"} <= set(df.columns):
            out, what = first_run(df), ["each model's first run"]
        if "batch" in out and len(out) > MAX_INLINE_ROWS:
            shown = shown_batches(out["batch"])
            thinned = len(shown) < out["batch"].nunique()
            out = out[out["batch"].astype(int).isin(shown)]
    out = out.iloc[:MAX_INLINE_ROWS]
    if thinned:  # the sizes of the rows shown (the first MAX_INLINE_ROWS of those kept)
        what.append(f"batch sizes {_sizes(sorted(set(out['batch'].astype(int))))}")
    note = f"Shown: {', '.join(what)} ({len(out)} of {len(df)} rows)"
    return out, note + "; every row is in the files above."


def empty_arms(df: pd.DataFrame, stem: str) -> str:
    """The acceptance table's positions with no rejected (or no accepted) draft, by run, said in
    words: their empty columns are not missing data but nothing to compare."""
    from ..routing.acceptance import NONE_ACCEPTED, NONE_REJECTED

    if stem != "acceptance_consecutive" or "size" not in df:
        return ""
    out = []
    for label, what in ((NONE_REJECTED, "no draft was rejected, every one was accepted"),
                        (NONE_ACCEPTED, "no draft was accepted")):
        rows = df[df["size"] == label]
        where = "; ".join(
            f"{m}, K={k}, {short_dataset(ds)}: position{'s' if len(g) > 1 else ''} "
            + ", ".join(str(int(j)) for j in g["draft_position"])
            for (m, k, ds), g in rows.groupby(["model", "k", "dataset"], sort=False))
        if where:
            out.append(f"At these positions {what} ({where}): the other side and the delta are "
                       f"empty, with nothing to compare (size: \"{label}\").")
    return " ".join(out)


# What CommonMark reads as markup in running text: emphasis (* _), raw HTML and autolinks (< >),
# links ([ ]), entities (&) and the backslash itself; backticks are left alone (a caption's code)
_MARKUP = re.compile(r"([\\*_<>\[\]&])")
# what starts a block (heading, list, quote, rule) at the start of a line
_BLOCK_START = re.compile(r"^(\s*)([#>+=-]|\d+[.)])", re.M)


def md_text(text: str) -> str:
    """A caption as Markdown that renders as the text itself: `step<d>`, `<column>_raw` and
    `ipf_<fit>_...` are words, not HTML tags or emphasis. Code spans (`max_model_len`) stay code."""
    out = []
    for i, piece in enumerate(re.split(r"(`[^`]*`)", text)):
        out.append(piece if i % 2 else _MARKUP.sub(r"\\\1", piece))
    return _BLOCK_START.sub(lambda m: m.group(1) + "\\" + m.group(2), "".join(out))


def table_block(md: Path, df: pd.DataFrame, rel, level: str = "###") -> list[str]:
    """A table in the report (`df`: its rows as its CSV holds them): its heading in words,
    caption, files, then its parts."""
    stem = md.stem
    links = ", ".join(f"[{ext}](../{rel(md.with_suffix('.' + ext))})"
                      for ext in tables.FORMATS if md.with_suffix('.' + ext).exists())
    lines = [f"{level} {registry.title(stem)}", "", md_text(registry.text(stem)), "",
             f"(file `{stem}`: {links})", ""]
    if df.empty:
        return lines + ["(no rows in this configuration)", ""]
    if empty := empty_arms(df, stem):
        lines += [empty, ""]
    shown, note = pivoted(df, stem) if stem in PIVOTS and "batch" in df else main_rows(df, stem)
    if "dataset" in shown:  # the files keep the full name; the page its short form
        shown = shown.assign(dataset=shown["dataset"].map(short_dataset))
    if note:
        lines += [note, ""]
    for title, part in parts(shown, stem):
        if title:
            lines += [f"*{title}*", ""]
        lines += [tables.to_markdown(part).rstrip("\n"), ""]
    return lines


def figure_block(png: Path, rel, level: str = "###") -> list[str]:
    stem = png.stem
    return [f"{level} Figure: {registry.title(stem, figure=True)}", "",
            f"![{registry.ALT[stem]}](../{rel(png)})", "",
            md_text(registry.text(stem, figure=True)),
            f"(file `{stem}`, [PDF](../{rel(png.with_suffix('.pdf'))}))", ""]
