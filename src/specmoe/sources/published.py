"""The study's published numbers (package data, copied verbatim) and the side-by-side comparison.

`load(name)` reads one published table (`data/published/<name>.csv`; SOURCE.md there names the
study and which table each file holds). `comparison(tables, study_models)` puts a run's numbers
beside the published ones, one row per quantity, wherever a run's model is matched to a study
model: by the config's `compare_with` (e.g. a tiny model shaped like a study model) or, for a
downloaded model, by its repository id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd

from ..cost.costmodel import PEAK_DTYPES  # the dtypes a peak is given for: hardware.csv's columns
from ..measured.sweep import bound_status

SOURCE = ("Why Speculative Decoding Works Better Than Predicted on Sparse MoE Models "
          "(Cohere, arXiv, October 2026)")


def load(name: str) -> pd.DataFrame:
    """One published table by file stem (e.g. "overlap_by_distance")."""
    path = resources.files("specmoe") / "data" / "published" / f"{name}.csv"
    if not path.is_file():
        raise FileNotFoundError(f"no published table {name!r}")
    with path.open() as fh:
        return pd.read_csv(fh)


def gpus() -> dict[str, dict]:
    """The GPUs the package ships (hardware.csv: the study's GPUs, datasheet numbers), each as a
    `hardware` entry of the configuration; an entry of the same name in a configuration takes
    these numbers unless it sets its own."""
    return {r.gpu: {"hbm_bandwidth_gbs": float(r.hbm_bandwidth_gbs),
                    "peak_tflops": {d: float(getattr(r, f"peak_{d}_tflops")) for d in PEAK_DTYPES},
                    "memory_gib": float(r.memory_gib), "nvlink_gbs": float(r.nvlink_gbs),
                    "cuda_memory_mib": float(r.cuda_memory_mib)}
            for r in load("hardware").itertuples()}


def sm_counts() -> dict[str, int]:
    """Each shipped GPU's streaming multiprocessors (hardware.csv), as CUDA reports them: a faked
    CUDA platform's (runtime.moebackend); no hardware entry carries them."""
    return {r.gpu: int(r.sm_count) for r in load("hardware").itertuples()}


def compute_capabilities() -> dict[str, tuple[int, int]]:
    """Each shipped GPU's CUDA compute capability (hardware.csv), as vLLM's platform reports it."""
    return {r.gpu: tuple(int(x) for x in str(r.compute_capability).split("."))
            for r in load("hardware").astype({"compute_capability": str}).itertuples()}


def with_gpus(hardware: dict) -> dict:
    """A configuration's `hardware` section over the shipped GPUs: each shipped GPU, its numbers
    overridden by an entry of the same name, and the configuration's other entries. An entry
    that sets its own memory_gib drops the shipped cuda_memory_mib: that was reported by the
    shipped GPU's memory, not this one's."""
    shipped = gpus()

    def own(name: str, entry: dict) -> dict:
        base = dict(shipped.get(name, {}))
        if "memory_gib" in entry:
            base.pop("cuda_memory_mib", None)
        return {**base, **entry}

    return {**shipped, **{n: own(n, e or {}) for n, e in hardware.items()}}


def study_models() -> set[str]:
    """Every model the published tables name."""
    names = set()
    for f in ("models", "overlap_by_distance", "unique_experts_ipf", "te_batch1_k3",
              "overlap_decomposition_step1", "profiling_batch1"):
        names |= set(load(f)["model"])
    return names


def study_model_of(model_cfg: dict) -> str | None:
    """The study model a configured model is compared with: `compare_with`, else the study model
    whose checkpoint is the model's repo_id (None: no published counterpart)."""
    if model_cfg.get("compare_with"):
        return model_cfg["compare_with"]
    repo = model_cfg.get("repo_id")
    if not repo:
        return None
    models = load("models")
    hit = models[models["hf_target"].str.lower() == repo.lower()]
    if hit.empty:  # the same model in another precision (e.g. Qwen3-30B-A3B vs -FP8)
        base = repo.lower().removesuffix("-fp8")
        hit = models[models["hf_target"].str.lower().str.removesuffix("-fp8") == base]
    return None if hit.empty else str(hit["model"].iloc[0])


def weight_model_overlaps(model_cfg: dict) -> tuple[list[float] | None, str]:
    """(overlaps by step distance 1.., where they come from) for a configured model's IPF column
    of the weight-model table: its own `overlaps` ("configured"), else its study model's row of
    the published overlap_by_distance ("published"); (None, "") where it has neither. Configured
    overlaps equal to the published row to its three decimals are a copy of it: "published". A
    number fed the published overlaps is the replay's (report/replay.py), never a reproduction
    (SPECS compares only configured ones)."""
    study = study_model_of(model_cfg)
    ob = load("overlap_by_distance").set_index("model")
    steps = [c for c in ob.columns if c.startswith("step")]
    pub = [float(ob.loc[study, c]) for c in steps] if study in ob.index else None
    own = model_cfg.get("overlaps")
    if own:
        copied = pub is not None and len(own) <= len(pub) and bool(
            np.allclose(own, pub[:len(own)], rtol=0, atol=5e-4))
        return [float(x) for x in own], "published" if copied else "configured"
    return (pub, "published") if pub else (None, "")


def study_entry(model_cfg: dict, hardware: str | None = None,
                methods: dict[str, str] | None = None) -> dict | None:
    """What the comparison needs of a configured model: its study model and variant, its main
    dataset (its first: the study's tables are of its main set; a first "a+b+c" pools main set a
    with its held-out slices, which the report says) and, given its drafters' speculative methods
    (drafter -> vLLM's method), each drafter's method as the study names it."""
    study = study_model_of(model_cfg)
    if study is None:
        return None
    precision = model_cfg.get("precision")
    if precision in (None, "auto"):  # the checkpoint's own format
        repo = (model_cfg.get("repo_id") or "").lower()
        precision = ("fp8" if "fp8" in repo else "bf16") if repo else \
            (model_cfg.get("dims") or {}).get("dtype")
    out = {"study": study, "precision": precision, "tp": model_cfg.get("tp"),
           "gpu": hardware or model_cfg.get("hardware")}
    if model_cfg.get("datasets"):
        out["dataset"] = model_cfg["datasets"][0]
    if methods:
        out["methods"] = {d: SD_METHODS.get(m, m) for d, m in methods.items()}
    return out


@dataclass(frozen=True)
class Spec:
    """How one of the pipeline's tables lines up with one published table."""
    table: str                      # the pipeline's table
    published: str                  # the published table
    quantities: dict[str, str]      # pipeline column -> published column
    key: tuple[str, str] | None = None      # (pipeline column, published column), e.g. position
    where: dict = field(default_factory=dict)   # rows of the pipeline's table to use
    variant: tuple[str, ...] = ()   # published columns that must match the model's variant
    # the published table is of the study's main set (MT-Bench) at K = 3: a run on another
    # dataset than its model's main one (its first), or at another K, has no counterpart in it
    main_set: bool = True
    # a quantity whose 95% interval is not in <column>_low/<column>_high: (low, high) columns
    intervals: dict = field(default_factory=dict)


STUDY_K = 3  # the K of every published overlap, acceptance and TE table


@lru_cache(maxsize=1)
def overlap_steps() -> int:
    """How many draft distances (d = 1..n) the study's overlap curves reach (overlap_by_distance's
    step columns): neither a study model's published curve nor the prior of its granularity
    (cost.stepmodel.study_overlaps) covers a draft length K past them."""
    return sum(str(c).startswith("step") for c in load("overlap_by_distance").columns)


SPECS = (
    Spec("overlap_by_distance", "overlap_by_distance",
         # the study's steps 1-4 are along the committed sequence (steps 1-4 at K = 3)
         {"seq1": "step1", "seq2": "step2", "seq3": "step3", "seq4": "step4",
          "independent": "independent"}),
    Spec("overlap_decomposition_step1", "overlap_decomposition_step1",
         {"uniform": "uniform", "independent": "independent", "sequence_step1": "empirical",
          "sequence_temporal": "temporal", "sequence_temporal_share": "temporal_share"}),
    # like for like: the study's uniform IPF is fed its overlap along the committed sequence
    # (Table 17 -> Table 20); this project's window-input and skewed IPF have no published twin
    # (the study's "Skewed IPF" uses other pair margins), so they are not set beside it
    Spec("unique_experts", "unique_experts_ipf",
         {"uniform": "unique_uniform", "independent": "unique_independent",
          "empirical": "unique_empirical", "ipf_uniform_sequence": "uniform_ipf"},
         where={"k": STUDY_K}),
    # the study's per-layer overlap (Table 19) is its Table 17's, along the committed sequence
    Spec("per_layer_overlap", "per_layer_overlap",
         {"sequence_step1": "step1_overlap", "independent": "independent"},
         key=("layer", "layer")),
    Spec("acceptance_consecutive", "acceptance_consecutive",
         {"accepted_overlap": "accepted_overlap", "first_rejected_overlap":
          "first_rejected_overlap", "delta": "delta", "cohens_d": "cohens_d"},
         key=("draft_position", "draft_position"),
         # the delta's interval is clustered by request (the table's test of it)
         intervals={"delta": ("delta_low_by_request", "delta_high_by_request")}),
    # the study's MoE share of GPU time is a sum of kernel times: beside it the MoE share of the
    # decode step's kernel time, not of its time, which holds the device's idle time between
    # kernels (launch gaps of the eager passes profiled: profiling.compare)
    Spec("kernel_time_shares", "profiling_batch1", {"decode_kernel_share": "moe_time_share"},
         where={"batch": 1, "class": "moe"}, variant=("gpu", "precision", "tp")),
    Spec("te_three_ways", "te_batch1_k3", {"te_sweep": "target_efficiency"},
         where={"batch": 1, "k": STUDY_K}, variant=("precision", "tp", "sd_method")),
    # like for like: the study's unique_sd and te_predicted use its measured unique experts, so
    # the weight model's IPF prediction is set beside the study's own uniform IPF prediction
    Spec("weight_model", "te_weight_model_batch1",
         {"c_expert_mib_per_gpu": "c_expert_mib_per_gpu",
          "c_dense_mib_per_gpu": "c_dense_mib_per_gpu", "moe_weight_share": "moe_weight_share"},
         where={"K": STUDY_K}, variant=("dtype", "tp"), main_set=False),
    # only an IPF fit of overlaps the configuration gives (measured, say): one of the published
    # overlaps is the study's own number fed back (the replay recomputes it), not a reproduction
    Spec("weight_model", "unique_experts_ipf", {"unique_ipf": "uniform_ipf"},
         where={"K": STUDY_K, "overlaps_source": "configured"}, main_set=False),
)

# The published three-step correction is for one model at batch 1, on one variant of it
# (three_step_variant).
THREE_STEP_MODEL = "Qwen3-30B"
# vLLM's speculative method -> the study's name of it (te_batch1_k3's sd_method)
SD_METHODS = {"draft_model": "draft_model", "eagle": "EAGLE", "eagle3": "EAGLE-3", "mtp": "MTP"}


def three_step() -> tuple[pd.DataFrame, float]:
    """The published three-step correction: its steps 0-3, and the sweep TE it closes the gap to."""
    pub = load("three_step_correction_qwen3_30b")
    steps = pub[pub["step"].isin(["0", "1", "2", "3"])].reset_index(drop=True)
    return steps, float(pub[pub["correction"] == "sweep wall-clock"]["te"].iloc[0])


def three_step_variant() -> pd.Series:
    """The GPU, precision and TP of the published three-step correction: the profiling_batch1
    row of its model whose MoE share of GPU time is the correction's (H100, fp8, TP 1)."""
    steps, _ = three_step()
    prof = load("profiling_batch1")
    hit = prof[(prof["model"] == THREE_STEP_MODEL) & np.isclose(
        prof["moe_time_share"], float(steps["moe_time_share"].iloc[1]))]
    if len(hit) != 1:
        raise ValueError(f"the published three-step correction matches {len(hit)} profiling rows")
    return hit.iloc[0][["gpu", "precision", "tp"]]


def _variant_ok(pub_row: pd.Series, entry: dict, cols: tuple[str, ...],
                drafter: str | None = None) -> bool:
    """Does a published row's variant (GPU, precision, TP; its drafting method, for the run's
    drafter) match the model's?"""
    names = {"gpu": "gpu", "precision": "precision", "dtype": "precision", "tp": "tp"}
    for c in cols:
        want = (entry.get("methods") or {}).get(drafter) if c == "sd_method" else \
            entry.get(names[c])
        if want is None or str(pub_row[c]).lower() != str(want).lower():
            return False
    return True


def main_run(r: pd.Series, entry: dict) -> bool:
    """Is a row of the pipeline's table from its model's main set at the study's K (the only
    runs the study's overlap, acceptance and TE tables have a counterpart for)?"""
    k = r.get("k", r.get("K"))
    if k is not None and not pd.isna(k) and int(k) != STUDY_K:
        return False
    ds = r.get("dataset")
    return not (isinstance(ds, str) and ds and entry.get("dataset") and ds != entry["dataset"])


def _reproduced_interval(r: pd.Series, col: str, names: tuple[str, str] | None = None) -> dict:
    """A reproduced value's 95% interval, from its table's `names` (low, high) columns, by default
    <col>_low/<col>_high (NaN where it has none): a point beside the published one says nothing
    of whether they differ."""
    low, high = names or (f"{col}_low", f"{col}_high")
    return {"reproduced_low": float(r.get(low, np.nan)),
            "reproduced_high": float(r.get(high, np.nan))}


# the one rule's status of a quantity without a raw value (bounds.bounded_te of a run with no
# sweep point): never measured
NOT_MEASURED = bound_status(float("nan"))


def measured(r: pd.Series, col: str) -> bool:
    """Did the run measure `col` in this row: a value, or none where its table says why (a
    <col>_status other than "ok" and NOT_MEASURED: e.g. a TE whose raw ratio left [0, 1], not
    identified)? A NaN without such a status was never measured (e.g. a distance beyond this
    run's K, a TE of a batch size the sweep has no point of)."""
    status = r.get(f"{col}_status")
    return pd.notna(r[col]) or (isinstance(status, str)
                                and status not in ("", "ok", NOT_MEASURED))


def _raw_and_status(r: pd.Series, col: str) -> dict:
    """A reproduced value's raw number, its 95% interval and its status where its table has them
    (<col>_raw, <col>_raw_low/_raw_high, <col>_status: the TEs), NaN and "" where not: a row
    this run did not identify keeps its empty value with why beside it."""
    def num(c: str) -> float:
        v = r.get(c, np.nan)
        return float(v) if pd.notna(v) else np.nan

    status = r.get(f"{col}_status")
    return {"reproduced_raw": num(f"{col}_raw"), "reproduced_raw_low": num(f"{col}_raw_low"),
            "reproduced_raw_high": num(f"{col}_raw_high"),
            "reproduced_status": status if isinstance(status, str) else ""}


def _rows(spec: Spec, df: pd.DataFrame, study: dict[str, dict]) -> list[dict]:
    pub = load(spec.published)
    out = []
    for c, v in spec.where.items():
        if c in df:
            df = df[df[c] == v]
    for _, r in df.iterrows():
        entry = study.get(r["model"])
        if entry is None or (spec.main_set and not main_run(r, entry)):
            continue
        p = pub[pub["model"] == entry["study"]]
        p = p[[_variant_ok(pr, entry, spec.variant, r.get("drafter"))
               for _, pr in p.iterrows()]] if len(p) else p
        if spec.key:
            p = p[p[spec.key[1]] == r[spec.key[0]]]
        if p.empty:
            continue
        pr = p.iloc[0]
        key = f"{spec.key[0]} {r[spec.key[0]]}" if spec.key else ""
        for ours, theirs in spec.quantities.items():
            if ours not in r or pd.isna(pr[theirs]) or not measured(r, ours):
                continue
            mine = float(r[ours])
            out.append({"table": spec.table, "model": r["model"],
                        "drafter": r.get("drafter", ""), "k": r.get("k", r.get("K")),
                        "dataset": r.get("dataset", ""), "study_model": entry["study"],
                        "key": key, "quantity": ours, "published": float(pr[theirs]),
                        "reproduced": mine,
                        **_reproduced_interval(r, ours, spec.intervals.get(ours)),
                        **_raw_and_status(r, ours),
                        "difference": mine - float(pr[theirs])})
    return out


def _three_step_rows(df: pd.DataFrame, study: dict[str, dict]) -> list[dict]:
    """The published three-step correction beside each run of its model's variant from the main
    set at the study's K (main_run, as every other comparison), step by step in the run's own
    order; a step whose TE is not a value but was measured (NaN beside a te_status that says
    why, e.g. not identified) keeps its row with an empty reproduced value, its raw value and
    status beside, as _rows keeps such a quantity; a step never measured is left out."""
    steps, _ = three_step()
    variant = three_step_variant()
    out = []
    by_run = [c for c in ("model", "drafter", "k", "dataset") if c in df]
    for _, g in df.groupby(by_run, sort=False, dropna=False):
        first = g.iloc[0]
        entry = study.get(first["model"])
        if entry is None or entry["study"] != THREE_STEP_MODEL or not _variant_ok(
                variant, entry, ("gpu", "precision", "tp")) or not main_run(first, entry):
            continue
        for i, (_, r) in enumerate(g.iloc[:len(steps)].iterrows()):
            if not measured(r, "te"):
                continue
            pr = steps.iloc[i]
            out.append({"table": "three_step_correction", "model": r["model"],
                        "drafter": r.get("drafter", ""), "k": r.get("k"),
                        "dataset": r.get("dataset", ""), "study_model": entry["study"],
                        "key": f"step {i}", "quantity": "te",
                        "published": float(pr["te"]), "reproduced": float(r["te"]),
                        **_reproduced_interval(r, "te"), **_raw_and_status(r, "te"),
                        "difference": float(r["te"]) - float(pr["te"])})
    return out


COLUMNS = ["table", "model", "drafter", "k", "dataset", "study_model", "key", "quantity",
           "published", "reproduced", "reproduced_low", "reproduced_high", "reproduced_raw",
           "reproduced_raw_low", "reproduced_raw_high", "reproduced_status", "difference"]


def comparison(tables: dict[str, pd.DataFrame], study: dict[str, dict]) -> pd.DataFrame:
    """Published vs reproduced, one row per quantity, for every model matched to a study model.

    tables: the pipeline's tables by name (any subset); study: model -> `study_entry(...)`.
    """
    rows = []
    for spec in SPECS:
        df = tables.get(spec.table)
        if df is not None and not df.empty:
            rows += _rows(spec, df, study)
    tsc = tables.get("three_step_correction")
    if tsc is not None and not tsc.empty:
        rows += _three_step_rows(tsc, study)
    return pd.DataFrame(rows, columns=COLUMNS)
