"""Predict before you run: the time of one decode or verification step of an MoE on a GPU, per
kernel class, and from it target efficiency (TE) and the speedup of speculative decoding at every
batch size (docs/method.md, "Step model").

One forward pass of B sequences with t new tokens each, per GPU (weights split over TP):

- MoE experts: the unique experts u of the B t tokens, each read once; the kernels reach the HBM
  bandwidth only with enough CTAs in flight (Little's law: a faster memory needs more of them):
  efficiency = ctas / (ctas + bandwidth / beta), with ctas = u times the tiles of one expert's
  gate/up projection (its width over TP over TILE_N) and beta, the bandwidth one CTA keeps in
  flight, fitted;
- dense GEMMs: attention projections, shared experts, expert-free layers and the LM head, read at
  DENSE_EFFICIENCY of the bandwidth;
- attention: the KV cache of `context` tokens per sequence, read at KV_EFFICIENCY;
- fp8: every layer quantises its activations (fitted fixed time per layer);
- each class is at least its FLOPs over COMPUTE_EFFICIENCY of the peak (the compute-bound floor);
- the hardware's fixed cost per forward pass (`step_overhead_us`).

TE(B) = T_decode(B) / (T_verify(B) + B s + g T_decode(B)): a verification step also costs the
engine s per sequence (bookkeeping of the drafts, rejection sampling: work that grows with the
sequences, not with the model) and g target decode steps (a draft model's catch-up on accepted
tokens), g fitted per method family. The
parameters are fitted to what the study measured of a step at batch 1 (`calibration_rows`: TE,
the MoE share of decode time, the three-step correction's time ratios);
`leave_one_model_out` gives the honest error: each model predicted by parameters fitted without
any of its rows. Batch-1 numbers cannot tell s per sequence from s per step; the speedup curves the
study shows (published/speedup_shapes.csv) can: s is the batch-1 fit's value, raised where needed
to the least that gives every curve its published shape.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from importlib import resources

import numpy as np

from . import costmodel, ipf, published
from .costmodel import Hardware, ModelDims, dtype_bytes
from .errors import InputError
from .unique import uniform_unique

TILE_N = 64                # output columns of one CTA's tile in the fused MoE kernel
DENSE_EFFICIENCY = 0.8     # share of the HBM bandwidth a dense GEMV reaches at small batch
KV_EFFICIENCY = 0.3        # share of the bandwidth attention reaches over a short KV cache
COMPUTE_EFFICIENCY = 0.3   # share of the peak FLOP/s grouped and dense GEMMs reach (assumed)
CONTEXT = 600              # KV tokens per sequence: an MT-Bench prompt and half its output
FAMILIES = {"draft_model": "draft_model", "eagle": "eagle", "eagle3": "eagle", "EAGLE": "eagle",
            "EAGLE-3": "eagle", "mtp": "mtp", "MTP": "mtp"}


@dataclass(frozen=True)
class StepParams:
    """The step model's fitted parameters, each with a physical meaning."""
    moe_cta_gbs: float     # HBM bandwidth one CTA of the MoE kernels keeps in flight, GB/s
    fp8_layer_us: float    # activation quantisation per layer in fp8, us
    verify_draft_model: float  # extra cost of a verification step, in target decode steps,
    verify_eagle: float        # for each method family
    verify_mtp: float
    verify_seq_us: float = 0.0  # the engine's work per sequence of a verification step, us

    def verify_extra(self, method: str) -> float:
        family = FAMILIES.get(method)
        if family is None:
            raise InputError(f"unknown speculative method '{method}' (one of: "
                             f"{', '.join(sorted(set(FAMILIES)))})")
        return getattr(self, f"verify_{family}")

    def as_dict(self) -> dict:
        return asdict(self)


SEQ_US_MAX = 2000.0  # the search for the least verify_seq_us giving the published shapes: its end,
SEQ_US_SCAN = 25.0   # its steps
SEQ_US_STEP = 1.0    # and its precision
BOUNDS = ((0.5, 0.0, 0.0, 0.0, 0.0, 0.0), (500.0, 200.0, 20.0, 2.0, 2.0, SEQ_US_MAX))


def moe_efficiency(dims: ModelDims, hw: Hardware, unique: float, p: StepParams) -> float:
    ctas = unique * max(1.0, 2 * dims.expert_intermediate / dims.tp / TILE_N)
    return ctas / (ctas + hw.hbm_bandwidth / (p.moe_cta_gbs * 1e9))


def step_times(dims: ModelDims, hw: Hardware, batch: int, tokens_per_seq: int, unique: float,
               p: StepParams, context: float = CONTEXT) -> dict[str, float]:
    """Seconds of one forward pass per kernel class (moe, dense, attention, fp8, fixed)."""
    tokens = batch * tokens_per_seq
    peak = COMPUTE_EFFICIENCY * hw.flops(dims.dtype)
    layers = dims.num_moe_layers
    moe_bytes = unique * dims.c_expert
    moe = max(moe_bytes / (hw.hbm_bandwidth * moe_efficiency(dims, hw, unique, p)),
              2.0 * tokens * dims.top_k * dims.expert_params / dims.tp / peak)
    head = dims.vocab_size * dims.hidden
    dense_params = dims.dense_params + dims.dense_layer_params / layers
    dense = layers * max((dims.c_dense + dims.c_dense_layers)
                         / (hw.hbm_bandwidth * DENSE_EFFICIENCY),
                         2.0 * tokens * dense_params / dims.tp / peak)
    dense += max(head * dtype_bytes(dims.dense_dtype) / dims.tp
                 / (hw.hbm_bandwidth * DENSE_EFFICIENCY), 2.0 * tokens * head / dims.tp / peak)
    kv = batch * context * dims.kv_per_token * dtype_bytes(dims.dense_dtype) / dims.tp
    fp8 = dims.dtype.startswith("fp8") or dims.dense_dtype.startswith("fp8")
    return {"moe": layers * moe, "dense": dense,
            "attention": kv / (hw.hbm_bandwidth * KV_EFFICIENCY),
            "fp8": layers * p.fp8_layer_us * 1e-6 if fp8 else 0.0, "fixed": hw.step_overhead}


def step_time(*args, **kwargs) -> float:
    return sum(step_times(*args, **kwargs).values())


def te_from_times(decode: dict[str, float], verify: dict[str, float],
                  verify_extra: float = 0.0) -> float:
    """TE from the time of each kernel class in a decode and a verification step (seconds, or
    shares of the decode step: the three-step correction's form), with the method's extra cost
    of a verification step in decode steps."""
    t_dec = sum(decode.values())
    return t_dec / (sum(verify.values()) + verify_extra * t_dec)


def target_efficiency(dims: ModelDims, hw: Hardware, k_draft: int, batch: int, unique_verify: float,
                      unique_decode: float, method: str, p: StepParams) -> float:
    verify = step_times(dims, hw, batch, k_draft + 1, unique_verify, p)
    verify["sequences"] = batch * p.verify_seq_us * 1e-6
    return te_from_times(step_times(dims, hw, batch, 1, unique_decode, p), verify,
                         p.verify_extra(method))


# --- unique experts from overlaps ------------------------------------------------------------

FINE_GRAINED = 16  # N / k at or above which a model counts as fine-grained (the study's split)


def prior_overlaps(dims: ModelDims, k_draft: int) -> np.ndarray:
    """Overlap curves (steps 1..K) of the study's models of the same granularity (published,
    Table 17): rows are models; a model the study did not measure takes these as its prior."""
    ob = published.load("overlap_by_distance")
    ue = published.load("unique_experts_ipf").set_index("model")
    fine = dims.num_experts / dims.top_k >= FINE_GRAINED
    keep = [m for m in ob["model"] if m in ue.index
            and (ue.loc[m, "n"] / ue.loc[m, "k"] >= FINE_GRAINED) == fine]
    cols = [f"step{d}" for d in range(1, k_draft + 1)]
    if any(c not in ob for c in cols):
        raise InputError(f"the study publishes overlaps for steps 1..4 only (K = {k_draft})")
    return ob.set_index("model").loc[keep, cols].to_numpy(float)


def study_overlaps(dims: ModelDims, k_draft: int,
                   study_model: str | None = None) -> tuple[np.ndarray, str]:
    """The overlap curves of a model without a trace of its own, and where they come from: the
    study's published curve for its own models, else its models' curves of the same granularity
    as a prior."""
    pub = published_overlaps(study_model, k_draft) if study_model else None
    if pub is not None:
        return pub[None, :], f"published ({study_model})"
    prior = prior_overlaps(dims, k_draft)
    fine = dims.num_experts / dims.top_k >= FINE_GRAINED
    return prior, (f"prior: the study's {'fine' if fine else 'coarse'}-grained models' curves "
                   f"({len(prior)})")


def unique_verify(dims: ModelDims, overlaps, batch: int) -> float:
    """Unique experts of B windows of K + 1 tokens, from the uniform max-entropy IPF fit of an
    overlap curve (ipf.predict_uniform)."""
    return float(ipf.predict_uniform(dims.num_experts, dims.top_k, np.asarray(overlaps, float),
                                     batch=batch)["unique"])


def unique_decode(dims: ModelDims, batch: int) -> float:
    return uniform_unique(dims.num_experts, dims.top_k, batch)


# --- calibration on the study's measurements --------------------------------------------------

# The checkpoint (config.json, package data under data/hf_configs/) of each study model, and the
# format a precision serves it in: None, the checkpoint's own; else vLLM's online format.
CHECKPOINTS = {
    "Mixtral-8x7B": "Mixtral-8x7B-Instruct-v0.1.json", "Qwen2-57B": "Qwen2-57B-A14B-Instruct.json",
    "GLM-4.7-Flash": "GLM-4.7-Flash.json", "Qwen3-30B": "Qwen3-30B-A3B-FP8.json",
    "Qwen3-235B": "Qwen3-235B-A22B-Instruct-2507.json",
    "Qwen3-235B/fp8": "Qwen3-235B-A22B-Instruct-2507-FP8.json",
    "Qwen3-Next-80B": "Qwen3-Next-80B-A3B-Instruct.json", "Qwen3.5-35B": "Qwen3.5-35B-A3B.json",
    "GPT-OSS-120B": "gpt-oss-120b.json",
}


def config_path(name: str) -> str:
    """A packaged config.json of the study's checkpoints (data/hf_configs/<name>)."""
    p = resources.files("specmoe") / "data" / "hf_configs" / name
    if not p.is_file():
        raise InputError(f"no packaged config.json {name!r}")
    return str(p)


def study_model_dims(model: str, precision: str, tp: int) -> ModelDims:
    """A study model's dimensions as the study served it (precision, TP)."""
    from .hfconfig import dims_from_config

    name = CHECKPOINTS.get(f"{model}/{precision}") or CHECKPOINTS.get(model)
    if name is None:
        raise InputError(f"no packaged checkpoint for study model {model!r}")
    native = dims_from_config(config_path(name), tp=tp)
    if native.dtype.startswith(precision):  # fp8 checkpoint served as fp8
        return native
    return dims_from_config(config_path(name), dtype=precision, tp=tp)


def published_overlaps(model: str, k_draft: int) -> np.ndarray | None:
    ob = published.load("overlap_by_distance").set_index("model")
    if model not in ob.index:
        return None
    return ob.loc[model, [f"step{d}" for d in range(1, k_draft + 1)]].to_numpy(float)


def study_hardware(gpu: str) -> Hardware:
    """A GPU the study measured on (published/hardware.csv)."""
    hw = published.load("hardware").set_index("gpu")
    if gpu not in hw.index:
        raise InputError(f"the study measured on {', '.join(hw.index)}, not {gpu!r}")
    r = hw.loc[gpu]
    peaks = {d: float(r[f"peak_{d}_tflops"]) for d in ("bf16", "fp16", "fp8", "fp32")}
    return Hardware.from_config(gpu, {"hbm_bandwidth_gbs": float(r["hbm_bandwidth_gbs"]),
                                      "peak_tflops": peaks, "l2_mib": float(r["l2_mib"]),
                                      "sm_count": int(r["sm_count"])})


TE = "TE at batch 1"
MOE_SHARE = "MoE share of decode time"
MOE_RATIO = "MoE verify/decode time ratio"
REST_RATIO = "non-MoE verify/decode time ratio"


def _row(quantity: str, model: str, precision: str, tp: int, gpu: str, published_value: float,
         method: str | None = None, goal: bool = False) -> dict:
    dims = study_model_dims(model, precision, tp)
    ov = published_overlaps(model, 3)
    prior = ov is None
    ov = prior_overlaps(dims, 3).mean(axis=0) if prior else ov
    return {"quantity": quantity, "model": model, "precision": precision, "tp": tp, "gpu": gpu,
            "method": method, "published": float(published_value), "goal": goal, "dims": dims,
            "hw": study_hardware(gpu), "unique": unique_verify(dims, ov, 1),
            "overlap_prior": prior}


def calibration_rows() -> list[dict]:
    """What the study measured of a step, each published number once: TE at batch 1, K = 3
    (Table 10, all twelve configurations as `goal`, and Table 1's other Qwen3-30B variants), the
    MoE share of decode time at batch 1 (Tables 5 and 12), and the three-step correction's measured
    MoE and non-MoE verify/decode time ratios (Table 11); each with its dimensions, the GPU it ran
    on and its unique experts (the published overlaps' IPF fit, or its granularity's prior)."""
    # the models the study lists without a GPU ran on its main one, the H100
    gpus = published.load("models").set_index("model")["gpu"].to_dict()
    gpu = lambda m: gpus.get(m, costmodel.DEFAULT_HARDWARE)  # noqa: E731
    t10 = published.load("te_batch1_k3")
    t1 = published.load("te_weight_model_batch1")
    seen = {(r.model, r.precision, int(r.tp)) for r in t10.itertuples()}
    rows = [_row(TE, r.model, r.precision, int(r.tp), gpu(r.model), r.target_efficiency,
                 r.sd_method, goal=True) for r in t10.itertuples()]
    rows += [_row(TE, r.model, r.dtype, int(r.tp), gpu(r.model), r.te_observed, "EAGLE-3")
             for r in t1.itertuples() if (r.model, r.dtype, int(r.tp)) not in seen]
    rows += [_row(MOE_SHARE, r.model, r.precision, int(r.tp), r.gpu, r.moe_time_share)
             for r in published.load("profiling_batch1").itertuples()]
    # the three-step correction's time ratios: its model profiled on the study's GPU for it
    step3 = published.load("three_step_correction_qwen3_30b").set_index("step").loc["3"]
    prof = published.load("profiling_batch1")
    m3 = published.THREE_STEP_MODEL
    q = prof[(prof["model"] == m3) & (prof["gpu"] == gpu(m3))].iloc[0]
    for quantity, col in ((MOE_RATIO, "moe_time_ratio"), (REST_RATIO, "dense_time_ratio")):
        rows.append(_row(quantity, m3, q["precision"], int(q["tp"]), q["gpu"], step3[col]))
    return rows


def predict_row(r: dict, p: StepParams) -> float:
    """The step model's value of a calibration row's quantity."""
    dims, hw = r["dims"], r["hw"]
    if r["quantity"] == TE:
        return target_efficiency(dims, hw, 3, 1, r["unique"], dims.top_k, r["method"], p)
    dec = step_times(dims, hw, 1, 1, dims.top_k, p)
    if r["quantity"] == MOE_SHARE:
        return dec["moe"] / sum(dec.values())
    ver = step_times(dims, hw, 1, 4, r["unique"], p)
    if r["quantity"] == MOE_RATIO:
        return ver["moe"] / dec["moe"]
    rest = [sum(v for k, v in t.items() if k != "moe") for t in (ver, dec)]
    return rest[0] / rest[1]


def _fit(rows: list[dict], seq_us: float | None = None,
         start: StepParams | None = None) -> StepParams:
    """Least squares over `rows` (verify_seq_us held at seq_us unless None), each row's error
    relative to its published value's scale (a time ratio's error over the ratio, a TE's or
    share's as it is)."""
    from scipy.optimize import least_squares

    free = slice(None) if seq_us is None else slice(0, 5)
    lo, hi = (np.array(b[free]) for b in BOUNDS)
    x0 = np.array(list((start or StepParams(15.0, 5.0, 2.5, 0.05, 0.3, 50.0)).as_dict().values()))
    x0 = np.clip(x0[free], lo, hi)

    def params(x):
        return StepParams(*map(float, x)) if seq_us is None else StepParams(*map(float, x),
                                                                           verify_seq_us=seq_us)

    def resid(x):
        p = params(x)
        return [(predict_row(r, p) - r["published"]) / max(1.0, r["published"]) for r in rows]

    return params(least_squares(resid, x0, bounds=(lo, hi)).x)


def shapes_held(shapes: list[dict], p: StepParams) -> int:
    return sum(predict_shape(r, p) == r["published"] for r in shapes)


def fit(rows: list[dict], shapes: list[dict] = ()) -> StepParams:
    """The parameters from `rows` and `shapes` (nothing else is read): least squares over the
    rows; where a curve of `shapes` then lacks its published shape, verify_seq_us is raised to
    the least value (within SEQ_US_STEP) at which every curve has it (too much per-sequence work
    turns a concave curve into a peak at low batch, so the values that give every shape form a
    window: it is searched upwards in SEQ_US_SCAN steps), the other parameters fitted again at
    each value tried. Where no value up to SEQ_US_MAX gives every shape, the batch-1 fit stands."""
    p = _fit(rows)
    if shapes_held(shapes, p) == len(shapes):
        return p
    lo = p.verify_seq_us
    for x in np.arange(lo + SEQ_US_SCAN, SEQ_US_MAX, SEQ_US_SCAN):
        hi = _fit(rows, float(x), p)
        if shapes_held(shapes, hi) == len(shapes):
            break
        lo = float(x)
    else:
        return p
    while hi.verify_seq_us - lo > SEQ_US_STEP:
        mid = _fit(rows, (lo + hi.verify_seq_us) / 2, hi)
        if shapes_held(shapes, mid) == len(shapes):
            hi = mid
        else:
            lo = mid.verify_seq_us
    return hi


def leave_one_model_out(rows: list[dict], shapes: list[dict] = ()) -> list[dict]:
    """Each row and shape predicted by parameters fitted on the other models' rows and shapes
    only (rows, then shapes, in their order); a shape's `predicted` is a shape class."""
    models = dict.fromkeys(r["model"] for r in [*rows, *shapes])
    fits = {m: fit([r for r in rows if r["model"] != m], [r for r in shapes if r["model"] != m])
            for m in models}
    out = []
    for r in [*rows, *shapes]:
        p = fits[r["model"]]
        shape = r["quantity"] == SHAPE
        pred = predict_shape(r, p) if shape else predict_row(r, p)
        out.append({k: r[k] for k in ("quantity", "model", "precision", "tp", "gpu", "method",
                                      "published", "overlap_prior")}
                   | {"goal": r.get("goal", False), "predicted": pred,
                      "error": None if shape else pred - r["published"],
                      **{f"fit_{k}": v for k, v in p.as_dict().items()}})
    return out


def weight_model_te(r: dict) -> float:
    """The study's weight model on the same dimensions and unique experts (for comparison)."""
    return r["dims"].te_weight(r["unique"])


def fitted() -> StepParams:
    """The parameters fitted on every calibration row and shape."""
    return fit(calibration_rows(), shape_rows())


def calibrated() -> tuple[StepParams, float]:
    """The parameters fitted on every calibration row and shape, and the model's own TE error
    (lomo_rmse) that every prediction's interval carries."""
    rows, shapes = calibration_rows(), shape_rows()
    return fit(rows, shapes), lomo_rmse(leave_one_model_out(rows, shapes))


def lomo_rmse(lomo: list[dict]) -> float:
    """The model's own TE error on a configuration it has not seen: the root mean square of the
    leave-one-model-out errors of TE (the error term of every prediction's interval)."""
    errs = [r["error"] for r in lomo if r["quantity"] == TE]
    return float(np.sqrt(np.mean(np.square(errs))))


# --- the speedup curves the study shows ---------------------------------------------------------

SHAPE = "speedup shape"
SHAPE_MARGIN = 0.05  # a curve's rise over its batch-1 value that counts (as `predict`'s default)


def draft_cost(dims: ModelDims, draft: ModelDims, hw: Hardware, batch: int, k_draft: int,
               p: StepParams, unique_target: float | None = None,
               context: float = CONTEXT) -> float:
    """c(B): K drafter steps over one target decode step, both priced by `step_time` (every
    layer, the LM head, the KV cache of `context` tokens per sequence, the fixed cost per pass).
    The drafter's B tokens route independently; the target's unique experts are
    `unique_target`, else those of B independent tokens."""
    if min(dims.vocab_size, draft.vocab_size) < 1:
        raise InputError("the draft cost needs the vocabulary size (vocab_size) for the LM head")
    u = unique_decode(dims, batch) if unique_target is None else float(unique_target)
    return (k_draft * step_time(draft, hw, batch, 1, unique_decode(draft, batch), p, context)
            / step_time(dims, hw, batch, 1, u, p, context))


DENSE_DRAFTER = "dense drafter (one layer, the target's active FFN width)"
MOE_DRAFTER = "MoE drafter (one of the target's MoE layers, N = {n})"


def synthetic_drafters(target: ModelDims, moe_experts: int) -> dict[str, ModelDims]:
    """The one-layer drafters of the study's draft-cost figures (their drafters are not
    specified, so these are chosen), all on the target's LM head and one layer's KV cache: a
    dense one of the target's active width (Figure 11: an EAGLE head, the target's attention and
    its k experts' width as one FFN), and one of the target's MoE layers, k experts per token, with
    the target's own N (an MTP layer) and with `moe_experts` experts (Figure 12: N = 896, one
    Qwen3-30B layer extrapolated)."""
    moe = drafter_dims(target, "mtp", None)
    out = {DENSE_DRAFTER: drafter_dims(target, "eagle", None)}
    for n in dict.fromkeys((target.num_experts, int(moe_experts))):
        out[MOE_DRAFTER.format(n=n)] = ModelDims(**{**moe.to_dict(), "num_experts": n})
    return out


def draft_ratio_curve(dims: ModelDims, hw: Hardware, k_draft: int, batch_sizes, unique_target,
                      moe_experts: int, p: StepParams, context: float = CONTEXT) -> list[dict]:
    """c(B) of the synthetic drafters against the target's decode step at each batch size;
    unique_target(B): the target's unique experts per MoE layer at batch B. A drafter whose
    weights outweigh the target's (e.g. 896 Mixtral-width experts, 315 GB in one layer) is not a
    drafter: its ratio is NaN, the value kept as draft_cost_raw with the reason in `status`."""
    drafters = synthetic_drafters(dims, moe_experts)
    target_bytes = weight_bytes(dims)
    ridge = ridge_tokens(dims, hw)
    rows = []
    for b in batch_sizes:
        u = float(unique_target(b))
        t_target = step_time(dims, hw, b, 1, u, p, context)
        for name, d in drafters.items():
            raw = draft_cost(dims, d, hw, b, k_draft, p, u, context)
            heavy = weight_bytes(d) > target_bytes
            kind = ("dense" if name == DENSE_DRAFTER else "MoE, the target's N"
                    if d.num_experts == dims.num_experts else f"MoE, N = {d.num_experts}")
            rows.append({"batch": int(b), "target_experts": dims.num_experts,
                         "synthetic_drafter": name, "drafter_kind": kind,
                         "drafter_experts": d.num_experts if d.num_experts > 1 else 0,
                         "drafter_gib": weight_bytes(d) / 2**30,
                         "target_gib": target_bytes / 2**30,
                         "unique_drafter": unique_decode(d, b), "t_target_us": t_target * 1e6,
                         # tokens each weight of the drafter's FFN and of the target's experts
                         # sees in one pass, against the roofline's ridge
                         "drafter_tokens_per_weight": b * d.top_k / d.num_experts,
                         "target_tokens_per_expert": b * dims.top_k / dims.num_experts,
                         "ridge_tokens": ridge,
                         "draft_cost": float("nan") if heavy else raw, "draft_cost_raw": raw,
                         "status": OUTWEIGHS if heavy else "ok"})
    return rows


def shape_rows() -> list[dict]:
    """The speedup curves the study shows with their published shapes (K = 3, each model on its
    configuration: published/speedup_shapes.csv), each with what no parameter changes: its
    dimensions, its drafter's, and its unique experts at each batch size of the study's schedule
    (from its published overlaps, or its granularity's prior)."""
    batches = sorted(int(b) for b in published.load("schedule")["batch_size"])
    out = []
    for r in published.load("speedup_shapes").itertuples():
        dims = study_model_dims(r.model, r.precision, int(r.tp))
        overlaps, source = study_overlaps(dims, 3, r.model)
        ov = overlaps.mean(axis=0)
        out.append({"quantity": SHAPE, "model": r.model, "precision": r.precision,
                    "tp": int(r.tp), "gpu": r.gpu, "method": r.sd_method,
                    "published": r.shape, "dims": dims, "hw": study_hardware(r.gpu),
                    "draft": drafter_dims(dims, r.sd_method, None), "batches": batches,
                    "overlap_prior": source.startswith("prior"),
                    "unique": [(unique_verify(dims, ov, b), unique_decode(dims, b))
                               for b in batches]})
    return out


def shape_curve(r: dict, p: StepParams) -> list[float]:
    """A shape row's speedup over its acceptance length (which scales a curve, not its shape)."""
    return [1.0 / (draft_cost(r["dims"], r["draft"], r["hw"], b, 3, p)
                   + 1.0 / target_efficiency(r["dims"], r["hw"], 3, b, uv, ud, r["method"], p))
            for b, (uv, ud) in zip(r["batches"], r["unique"])]


def predict_shape(r: dict, p: StepParams) -> str:
    return curve_shape(r["batches"], shape_curve(r, p), SHAPE_MARGIN)


# --- predicting a curve -------------------------------------------------------------------------

TAU_PRIOR = (2.0, 3.2)  # acceptance length of K = 3 windows when nothing is known (1 to 2.2 drafts)


def tau_prior(k_draft: int) -> tuple[float, float]:
    return TAU_PRIOR[0], min(TAU_PRIOR[1], k_draft + 1.0)


SHAPES = ("peak at low batch", "concave", "rising", "flat within the margin")
LOW_BATCH = 2      # a maximum at batch 1 or 2 is "at low batch" (the study's fine-grained models)
SHAPE_SHARE = 0.8  # a shape is stated when at least this share of the draws has it
DRAWS = 400


def curve_shape(batches: list[int], speedups: list[float], margin: float) -> str:
    """The shape of one speedup curve (batch sizes ascending)."""
    s = np.asarray(speedups, float)
    if s.max() <= s.min() * (1 + margin):
        return "flat within the margin"
    top = int(np.argmax(s))
    if batches[top] <= LOW_BATCH:
        return "peak at low batch"
    if top == len(s) - 1:
        return "rising"
    return "concave" if s[top] > s[0] * (1 + margin) else "peak at low batch"


def drafter_dims(target: ModelDims, method: str, draft: ModelDims | None) -> ModelDims:
    """The drafter's dimensions: a separate draft model's own (`draft`), else one layer on the
    target's LM head: an EAGLE/EAGLE-3 head (the target's attention and its k experts' width as
    one dense FFN) or an MTP layer (one of the target's MoE layers)."""
    family = FAMILIES.get(method)
    if family == "draft_model":
        if draft is None:
            raise InputError("a draft model's cost needs its config.json (--draft-config) or "
                             "--draft-cost")
        return draft
    one = {"num_layers": 1, "num_moe_layers": 1, "dense_layer_params": 0.0,
           "kv_per_token": target.kv_per_token / target.num_layers}
    if family == "mtp":
        return ModelDims(**{**target.to_dict(), **one})
    return ModelDims(**{**target.to_dict(), **one, "num_experts": 1, "top_k": 1,
                        "expert_intermediate": target.top_k * target.expert_intermediate})


def check_inputs(k_draft: int, overlaps, tau: tuple[float, float]) -> np.ndarray:
    """Overlap curves of K steps, each within [0, 1], and an acceptance length within [1, K+1]."""
    overlaps = np.atleast_2d(np.asarray(overlaps, float))
    if overlaps.shape[1] != k_draft:
        raise InputError(f"{overlaps.shape[1]} overlaps for K = {k_draft}: give ov(d) for "
                         f"d = 1..{k_draft}")
    if np.any(overlaps < 0) or np.any(overlaps > 1):
        raise InputError("overlaps lie within [0, 1]")
    if not 1 <= tau[0] <= tau[1] <= k_draft + 1:
        raise InputError(f"acceptance length {tau} outside [1, K+1 = {k_draft + 1}]")
    return overlaps


def predict(dims: ModelDims, hw: Hardware, k_draft: int, method: str, batch_sizes: list[int],
            params: StepParams, te_error: float, overlaps: np.ndarray, tau: tuple[float, float],
            draft: ModelDims | None = None, known_cost: float | None = None,
            margin: float = SHAPE_MARGIN, seed: int = 0) -> dict:
    """TE and speedup at each batch size with 95% intervals over the uncertain inputs.

    overlaps: rows of candidate overlap curves (steps 1..K); one row is a known curve, several a
    prior (each draw mixes two of them). tau: the acceptance length's range (equal bounds: known).
    te_error: the model's own TE error (lomo_rmse), drawn as normal noise. known_cost: a known c
    (else c(B) from the drafter's step time). Each draw gives a whole curve, whose shape counts.
    """
    overlaps = check_inputs(k_draft, overlaps, tau)
    batches = sorted({int(b) for b in batch_sizes})
    d_dims = None if known_cost is not None else drafter_dims(dims, method, draft)
    rng = np.random.default_rng(seed)
    te = np.empty((DRAWS, len(batches)))
    spd = np.empty_like(te)
    cost = np.empty_like(te)
    memo: dict[tuple, float] = {}
    for i in range(DRAWS):
        a, b = rng.integers(len(overlaps), size=2)
        w = rng.uniform()
        ov = np.round(w * overlaps[a] + (1 - w) * overlaps[b], 3)
        t = rng.uniform(*tau)
        noise = rng.normal(0.0, te_error)
        for j, bs in enumerate(batches):
            key = (tuple(ov), bs)
            if key not in memo:
                memo[key] = target_efficiency(dims, hw, k_draft, bs, unique_verify(dims, ov, bs),
                                              unique_decode(dims, bs), method, params)
            te[i, j] = min(max(memo[key] + noise, 1e-3), 1.0)
            cost[i, j] = (known_cost if known_cost is not None else
                          draft_cost(dims, d_dims, hw, bs, k_draft, params))
            spd[i, j] = t / (cost[i, j] + 1.0 / te[i, j])
    shapes = [curve_shape(batches, row, margin) for row in spd]
    counts = {s: shapes.count(s) / DRAWS for s in SHAPES if s in shapes}
    top = max(counts, key=counts.get)
    shape = top if counts[top] >= SHAPE_SHARE else "undecided"
    lo, hi = np.percentile(spd, [2.5, 97.5], axis=0)
    beyond = [b for b, h in zip(batches, hi) if h < 1.0]
    point = np.median(spd, axis=0)
    return {"batch_sizes": batches,
            "te": np.median(te, axis=0).tolist(),
            "te_low": np.percentile(te, 2.5, axis=0).tolist(),
            "te_high": np.percentile(te, 97.5, axis=0).tolist(),
            "speedup": point.tolist(), "speedup_low": lo.tolist(), "speedup_high": hi.tolist(),
            "draft_cost": np.median(cost, axis=0).tolist(),
            "shape": shape, "shape_shares": counts,
            "stops_paying_at": beyond[0] if beyond else None}


# --- the draft ratio's physics (the study's Figures 11 and 12) -------------------------------

OUTWEIGHS = "drafter outweighs the target: not a drafter"


def weight_bytes(dims: ModelDims) -> float:
    """Bytes of a model's weights per GPU as the step model reads them: every MoE layer's
    attention, shared experts and all N experts, the expert-free layers and the LM head."""
    layers = dims.num_moe_layers * (dims.c_dense + dims.c_dense_layers
                                    + dims.num_experts * dims.c_expert)
    head = dims.vocab_size * dims.hidden * dtype_bytes(dims.dense_dtype) / dims.tp
    return float(layers + head)


def ridge_tokens(dims: ModelDims, hw: Hardware) -> float:
    """The roofline's ridge in tokens per weight: a weight read once serves `tokens` tokens at 2
    FLOPs each, so a GEMM turns compute-bound at peak FLOP/s / bandwidth x bytes per weight / 2
    tokens (about 295 on an H100 in bf16). A dense layer sees every token of the batch; an
    expert of N, B k / N of them."""
    return hw.flops(dims.dtype) / hw.hbm_bandwidth * dtype_bytes(dims.dtype) / 2
