"""The analysis stages of one run: synthetic traces (rules synth_fit, synth_trace), overlap
statistics and the IPF fit (rules overlap, ipf), the cost model (rule costmodel), the acceptance
statistics (rule acceptance) and the speedup of a swept run (rule speedup). Each reads files,
calls the library and writes its outputs atomically; none imports an engine (torch, vLLM)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ..cost import costmodel
from ..errors import InputError
from ..provenance import derived, provenance, read_json, write_json
from ..routing.unique import (batch_unique, independent_unique, uniform_unique,
                              window_unique_table)
from ..runs import Run, dataset_parts

log = logging.getLogger("specmoe")

# Each stage imports the heavy parts of the library it uses (pandas, scipy.stats, numba, pyarrow)
# itself: every analysis job is a process of its own, and an import of everything cost each of the
# default run's 68 analysis jobs about a second of CPU (bench/analysis_jobs.py).

# the fewest windows the window statistics of a part of a trace are measured on (the windows
# without a repeated token, a prompt slice's full windows); fewer give no numbers
MIN_WINDOWS = 2

# the per-request pieces the overlap stage writes (its "per_request", in this order) and the IPF
# stage resamples for the interval of its error: one list, so the IPF stage refuses a file lacking
# any of them with one line instead of a KeyError
PER_REQUEST_PIECES = ("request", "sequence_sums", "sequence_pairs", "unique_sum", "full_windows",
                      "window_sums", "window_pairs", "loads", "tokens")


ROUTINGS = {  # routing assumption -> (verify column, decode column) of the unique-experts table
    "uniform i.i.d. (prior model)": ("verify_uniform", "decode_uniform"),
    "independent, skewed loads": ("verify_independent", "decode_independent"),
    "max-entropy IPF, skewed (this project's)": ("verify_ipf_skewed_window",
                                                 "decode_independent"),
    costmodel.MEASURED_ROUTING: ("verify_empirical", "decode_independent"),
}


def model_ref(model_cfg: dict) -> dict:
    """{name, source, revision} for provenance."""
    rev = model_cfg.get("revision")
    if rev is None and model_cfg.get("source") == "synthetic":
        from ..provenance import config_hash

        rev = "synthetic:" + config_hash(model_cfg.get("synthetic", {}))
    return {"name": model_cfg["name"], "source": model_cfg.get("source"), "revision": rev}


# --- per-run stages -------------------------------------------------------------------------------


def synth_fit_stage(inputs, outputs, params) -> None:
    """Rule synth_fit (its contract: specmoe.contracts.analysis.SynthFitParams): the fit of a
    synthetic model's process to the published curve of its fit_to, once for every K."""
    from ..routing import synth

    p = synth.SynthParams.from_dict(dict(params.fit))
    log.info("fitting the process of N=%d, k=%d to %s's published overlap curve", p.num_experts,
             p.top_k, p.fit_to)
    fit = p.process_fit()
    log.info("fitted: %s", ", ".join(f"{k} {fit[k]:.4g}" for k in synth.FITTED))
    write_json(outputs.json, fit, provenance(dict(params.fit), stage="synth_fit",
                                             engine="specmoe.routing.synth"))


def synth_trace_stage(inputs, outputs, params) -> None:
    """Rule synth_trace (its contract: specmoe.contracts.analysis.SynthTraceParams)."""
    from ..contracts import one

    fit = one(inputs.get("fit"))
    synth_trace(params.model, params.run, outputs.trace, read_json(fit) if fit else None)


def synth_trace(model_cfg: dict, run: dict, out: str | Path, fit: dict | None = None) -> None:
    """A synthetic model's trace of one run into `out`; fit: its process's fit (rule synth_fit's),
    else the process is fitted here where the model has fit_to."""
    from ..routing import synth, trace

    params = dict(model_cfg["synthetic"])
    params["k_draft"] = Run.of(run).k
    p = synth.SynthParams.from_dict(params)
    if fit is not None:
        p = p.with_fit(fit)
    log.info("generating %d windows x %d layers", p.requests * p.steps, p.num_layers)
    tr = synth.generate(p)
    n = len(tr)
    tr.columns.update(model=np.full(n, run["model"]), drafter=np.full(n, run["drafter"]),
                      dataset=np.full(n, run["dataset"]))
    tr.meta["run"] = run
    trace.write_trace(out, tr, provenance(model_cfg, model=model_ref(model_cfg), stage="trace",
                                          engine="specmoe.routing.synth"))


def use_threads(threads: int | None) -> None:
    """Run the numba-parallel passes on the job's threads (not every core of the machine)."""
    if threads:
        import numba

        numba.set_num_threads(max(1, min(int(threads), numba.config.NUMBA_NUM_THREADS)))


def overlap_stage(inputs, outputs, params, threads: int | None = None) -> None:
    """Rule overlap (its contract: specmoe.contracts.analysis.OverlapParams): the overlap
    statistics of one trace (inputs.trace) into outputs.json; an untrained control's beside its
    trained target's (inputs.target: the target's trace, paired by request:
    specmoe.routing.controls)."""
    from ..contracts import one
    from ..routing import overlap, trace

    trace_path, target_trace, out = inputs.trace, one(inputs.get("target")), outputs.json
    batch_sizes, shuffle_null = params.batch_sizes, params.shuffle_null
    use_threads(threads)
    tr = trace.read_trace(trace_path)
    ws = overlap.window_stats(tr, shuffle_null=shuffle_null)
    seq, seq_pairs, seq_ci = overlap.trace_sequence_stats(tr)
    # the baseline bias-corrected over requests, as its interval is (sequence_intervals)
    summary = ws.summary(seq_ci["independence"])
    summary.update(overlap.sequence_summary(seq, seq_pairs, ws, seq_ci))
    # the requests' pieces of the IPF's input and of the unique experts it predicts, which the
    # ipf stage resamples for the interval of its error
    units = seq_ci["per_sequence"]
    u_sum, u_n, u_use = overlap.request_unique(tr, units["request"])
    w_sums, w_pairs = overlap.request_window_sums(tr, units["request"])
    load_ids, loads, tokens = overlap.request_loads(tr)
    if not np.array_equal(load_ids, units["request"]):
        raise ValueError("the requests of the loads and of the committed sequences differ")
    per_request = dict(zip(PER_REQUEST_PIECES, (
        units["request"], units["sums"][:, :ws.k_draft], units["pairs"][:, :ws.k_draft], u_sum,
        u_n, w_sums, w_pairs, loads, tokens), strict=True))
    summary.update(window_interval_summary(overlap.window_intervals(tr, shuffle_null)))
    uniq = window_unique_table(ws.used, ws.q, ws.num_experts, ws.top_k, ws.k_draft, batch_sizes,
                               by_request=(u_use, u_n))
    w = ws.k_draft + 1
    unique = {
        "empirical": float(np.nanmean(ws.unique)),
        "uniform": uniform_unique(ws.num_experts, ws.top_k, w),
        "independent": float(np.mean([independent_unique(q, w) for q in ws.q])),
    }
    unique["empirical_over_k"] = unique["empirical"] / ws.top_k
    # degenerate repetition routes alike: the same statistics without those windows, and the
    # overlap of each acceptance status
    rep = overlap.repetitive_windows(tr)
    no_rep = without_repetition(tr, rep, summary, shuffle_null)
    # sensitivity: the sequence statistics without the requests whose output loops
    loops = overlap.looping_requests(tr)
    n_req = int(np.unique(tr.columns["request"]).size)
    loop_free = {"dropped_requests": int(loops.size), "requests": n_req - int(loops.size)}
    lf = seq_ci if not loops.size else None
    if loops.size and n_req - loops.size >= 2:
        _, _, lf = overlap.trace_sequence_stats(overlap.select_requests(tr, loops))
    if lf is not None:
        loop_free.update({key: lf[key] for key in ("decay", "decay_low", "decay_high",
                                                   "excess", "excess_low", "excess_high",
                                                   "excess_clipped")})
    summary.update({f"sequence_loop_free_{key}": v for key, v in loop_free.items()})
    by_status = overlap.overlap_by_status(tr)
    by_slice, by_slice_dataset = slice_overlaps(tr)
    control = None
    if target_trace:
        from ..routing.controls import control_contrast

        control = control_contrast(trace.read_trace(target_trace), tr)
    prov = derived(tr.meta.get("provenance", {}),
                   {"batch_sizes": batch_sizes, "shuffle_null": shuffle_null}, stage="overlap",
                   trace=str(trace_path))
    write_json(out, {
        "run": tr.meta.get("run", {}),
        "prompting": tr.meta.get("prompting"),
        "summary": summary,
        "repetitive_windows": float(rep.mean()) if rep.size else 0.0,
        "summary_without_repetition": no_rep,
        "overlap_by_status": by_status,
        "by_slice": by_slice,
        "by_slice_dataset": by_slice_dataset,
        **({"control": control} if control is not None else {}),
        "unique": unique,
        "unique_by_batch": uniq,
        "per_request": per_request,
        "per_layer": {
            "overlap": ws.overlap, "shuffle": ws.shuffle, "independent": ws.independence,
            "unique": ws.unique, "q": ws.q, "used": ws.used, "sequence": seq,
        },
    }, prov)


def without_repetition(tr, rep, summary: dict, shuffle_null: bool) -> dict:
    """The overlap summary of the windows that repeat no token (rep: overlap.repetitive_windows
    of tr); `summary` itself where no window repeats one. Where fewer than MIN_WINDOWS are left,
    no numbers: a record of the windows left (n_windows) and why (omitted)."""
    from ..routing import overlap

    if not rep.any():
        return summary
    n_kept = int((~rep).sum())
    if n_kept < MIN_WINDOWS:
        log.warning("%d of %d windows repeat a token: no overlap statistics without them",
                    int(rep.sum()), rep.size)
        return {"n_windows": n_kept,
                "omitted": f"{n_kept} window(s) without a repeated token, fewer than the "
                           f"{MIN_WINDOWS} its statistics need"}
    kept = overlap.select_windows(tr, ~rep)
    # measured against the kept windows' corrected baseline, as their intervals are
    out = overlap.window_stats(kept, shuffle_null=shuffle_null).summary(
        overlap.trace_independence(kept))
    out.update(window_interval_summary(overlap.window_intervals(kept, shuffle_null)))
    return out


def window_interval_summary(ci: dict) -> dict:
    """The request-bootstrap intervals of the window statistics (overlap.window_intervals) as
    the overlap summary keeps them."""
    out = {"window_requests": ci["n_requests"], "window_low": ci["overlap_low"],
           "window_high": ci["overlap_high"], "window_decay": ci["decay"],
           "window_decay_low": ci["decay_low"], "window_decay_high": ci["decay_high"]}
    # the temporal overlap and its share (their points: WindowStats.summary's) with their ends
    out.update({key: ci[key] for key in ("temporal_low", "temporal_high", "temporal_clipped",
                                         "temporal_share_low", "temporal_share_high",
                                         "temporal_share_clipped")})
    out.update({f"window_{key}": ci[key] for key in ("decay_within_status",
                                                     "decay_within_status_low",
                                                     "decay_within_status_high") if key in ci})
    if "shuffle" in ci:
        out.update({key: ci[key] for key in (
            "shuffle_low", "shuffle_high", "above_shuffle", "above_shuffle_low",
            "above_shuffle_high", "above_shuffle_share", "above_shuffle_share_low",
            "above_shuffle_share_high")})
    return out


def slice_overlaps(tr) -> tuple[dict[str, dict], dict[str, dict]]:
    """Overlap by distance and the independence baseline of each prompt slice (category) of a
    trace: whether the decay with distance holds slice by slice. Each slice is measured as the
    whole trace is: against its own bias-corrected baseline (trace_independence), its overlap by
    distance and its decay from d = 1 to K with their intervals over its requests
    (window_intervals: NaN below bootstrap.MIN_REQUESTS). Slices with fewer than two full
    windows (MIN_WINDOWS) are left out. Also, per dataset of the slices, their mean with its
    intervals from a bootstrap over each slice's requests (overlap.slices_mean): the "mean of"
    rows of the held-out sets."""
    from ..routing import overlap

    if "category" not in tr.columns:
        return {}, {}
    starts, lengths = tr.windows()
    cat = tr.columns["category"][starts]
    datasets = tr.meta.get("slice_datasets") or {}
    out, units = {}, {}
    for name in sorted({str(c) for c in cat}):
        keep = cat == name
        if (keep & (lengths == tr.k_draft + 1)).sum() < MIN_WINDOWS:
            continue
        sub = overlap.select_windows(tr, keep)
        s = overlap.window_stats(sub, shuffle_null=False).summary(overlap.trace_independence(sub))
        # its temporal overlap is not kept: no resampled baseline (its own, above, is kept)
        ci = overlap.window_intervals(sub, shuffle_null=False, temporal=False)
        out[name] = {"dataset": datasets.get(name, ""), "n_windows": s["n_windows"],
                     "n_requests": ci["n_requests"],
                     "overlap_by_distance": s["overlap_by_distance"],
                     "overlap_low": ci["overlap_low"], "overlap_high": ci["overlap_high"],
                     "decay": s["decay_1_to_K"], "decay_low": ci["decay_low"],
                     "decay_high": ci["decay_high"], "independent": s["independent"]}
        units[name] = ci["per_request"]
    by_dataset = {}
    for ds in sorted({sl["dataset"] for sl in out.values()} - {""}):
        names = [n for n, sl in out.items() if sl["dataset"] == ds]
        by_dataset[ds] = {"slices": names, **overlap.slices_mean([units[n] for n in names])}
    return out, by_dataset


# The IPF's three predictions of unique experts per window, and the overlap each is fed:
# the study's (its Table 17 -> Table 20: the uniform fit of the overlap along the committed
# sequence at d = 1..K) and this project's own two (the overlap inside windows, the union's
# direct input: uniform, and skewed with each layer's loads).
IPF_INPUTS = {"uniform_sequence": "overlap along the committed sequence (the study's input)",
              "uniform_window": "overlap inside windows (this project's estimator)",
              "skewed_window": "overlap inside windows and each layer's loads (this project's)"}


def ipf_stage(inputs, outputs, params) -> None:
    """Rule ipf (its contract: specmoe.contracts.analysis.IpfParams): the IPF prediction of
    unique experts from the run's overlaps (inputs.overlap) into outputs.json."""
    from ..routing import ipf

    overlap_json, out, batch_sizes = inputs.overlap, outputs.json, params.batch_sizes
    ov = read_json(overlap_json)
    s = ov["summary"]
    n, k, kd = s["num_experts"], s["top_k"], s["k_draft"]
    per_layer_ov = np.asarray(ov["per_layer"]["overlap"], dtype=float)
    q = np.asarray(ov["per_layer"]["q"], dtype=float)
    fits = {"uniform_window": ipf.predict_uniform(n, k, per_layer_ov.mean(axis=0))}
    seq = np.asarray(s.get("sequence_by_distance") or [], dtype=float)[:kd]
    if seq.size == kd and np.isfinite(seq).all():
        fits["uniform_sequence"] = ipf.predict_uniform(n, k, seq)
    else:
        log.warning("no overlap along the committed sequence at d = 1..%d: no IPF with the "
                    "study's input", kd)
    skew = ipf.fit_layers(q, per_layer_ov)
    p0 = skew.p_zero
    emp = ov["unique"]["empirical"]
    pred = {key: fits[key]["unique"] if key in fits else float("nan")
            for key in ("uniform_sequence", "uniform_window")}
    pred["skewed_window"] = float(batch_unique(p0, 1).mean())
    rows = []
    for b in batch_sizes:
        row = {"batch": int(b)}
        for key in ("uniform_sequence", "uniform_window"):  # N experts alike
            row[f"verify_ipf_{key}"] = float(n * batch_unique(np.array([1 - pred[key] / n]), b))
        row["verify_ipf_skewed_window"] = float(batch_unique(p0, b).mean())
        rows.append(row)
    status = {key: (f["converged"], f["iterations"], f["max_error"], f["n_clipped"],
                    0 if f["converged"] else n, n if f["infeasible"] else 0)
              for key, f in fits.items()}
    status["skewed_window"] = (skew.converged, skew.iterations, skew.max_error, skew.n_clipped,
                               skew.n_unconverged, skew.n_infeasible)
    prov = derived(ov.get("provenance", {}), {"batch_sizes": batch_sizes}, stage="ipf")
    rel = {key: (v - emp) / emp for key, v in pred.items()}
    err_ci, emp_ci = ipf_error_intervals(ov, fits, pred, rel, seq, per_layer_ov, q)
    write_json(out, {
        "run": ov["run"],
        "empirical": emp,
        "inputs": IPF_INPUTS,
        "sequence_overlap": seq.tolist(),
        "prediction": pred,
        "relative_error": rel,
        # each error's 95% interval over requests, and the measured value's over the same
        # resamples (ipf_error_intervals)
        "relative_error_interval": err_ci,
        "empirical_interval": emp_ci,
        **{name: {key: st[i] for key, st in status.items()} for i, name in enumerate(
            ("converged", "iterations", "max_error", "n_clipped", "n_unconverged_experts",
             "n_infeasible_experts"))},
        "by_batch": rows,
    }, prov)
    for key, st in status.items():  # each fit its own count and cause
        if st[5]:
            log.warning("IPF (%s): the pair margins of %d expert(s) cannot hold together (no "
                        "distribution over a window's positions has them; max margin error "
                        "%.2e)", key, st[5], st[2])
        elif not st[0]:
            log.warning("IPF (%s) stopped %.2e short of the margins of %d expert(s): feasible "
                        "near the boundary, where it converges slowly", key, st[2], st[4])
    clipped = sum(st[3] for st in status.values())
    if clipped:
        log.warning("IPF clipped %d infeasible pair tables", clipped)


def ipf_error_intervals(ov: dict, fits: dict, pred: dict, rel: dict, seq: np.ndarray,
                        per_layer_ov: np.ndarray, q: np.ndarray) -> tuple[dict, list[float]]:
    """The 95% interval over requests of each IPF's relative error, from the overlap stage's
    per-request pieces (its "per_request"), and of the measured unique experts per window (the
    errors' denominator) over the same resamples (ipf.measured_resamples): the study's input
    along the committed sequence and the window overlaps (ipf.uniform_error_interval), the
    skewed fit from each layer's window overlaps and loads (ipf.skewed_error_interval), each
    widened for the number of requests (bootstrap.widen). An overlap
    file without them (the overlap stage always writes them) is refused: rerun that stage."""
    from ..routing import bootstrap, ipf

    s = ov["summary"]
    n, k = s["num_experts"], s["top_k"]
    pr = ov.get("per_request")
    if not pr:
        raise InputError("the overlap results have no per-request pieces (written by an older "
                         "overlap stage, or by hand): rerun the overlap stage")
    lacking = [key for key in PER_REQUEST_PIECES if key not in pr]
    if lacking:
        raise InputError(f"the overlap results' per-request pieces lack {', '.join(lacking)} "
                         "(written by an older overlap stage, or by hand): rerun the overlap "
                         "stage")
    w, measured = ipf.measured_resamples(pr)
    err_ci = {}
    if "uniform_sequence" in fits:
        err_ci["uniform_sequence"] = ipf.uniform_error_interval(
            n, k, seq, pred["uniform_sequence"], pr["sequence_sums"], pr["sequence_pairs"], k, w,
            measured)
    w_sums = np.asarray(pr["window_sums"], dtype=float)  # [request, layer, d]
    err_ci["uniform_window"] = ipf.uniform_error_interval(
        n, k, per_layer_ov.mean(axis=0), pred["uniform_window"], w_sums.sum(axis=1),
        pr["window_pairs"], w_sums.shape[1] * k, w, measured)
    err_ci["skewed_window"] = ipf.skewed_error_interval(
        k, q, per_layer_ov, pred["skewed_window"], w_sums, pr["window_pairs"], pr["loads"],
        pr["tokens"], w, measured)
    # widened for the requests' number, as every request-resampled interval is (bootstrap.widen),
    # about the error the ipf stage prints (rel: its relative_error) and the measured value
    n_req = len(pr["unique_sum"])
    for key, ends in err_ci.items():
        if not np.isfinite(ends).all():
            log.warning("IPF (%s): no interval of its error over requests (fewer than the "
                        "bootstrap's requests, or a fit a step from its inputs does not hold its "
                        "margins)", key)
        err_ci[key] = [float(e) for e in bootstrap.widen(rel[key], *ends, n_req)]
    emp_ci = [float(e) for e in bootstrap.widen(ov["unique"]["empirical"],
                                                *ipf.empirical_interval(measured), n_req)]
    return err_ci, emp_ci


def model_dims(model_cfg: dict, num_experts: int, top_k: int,
               check: bool = True) -> costmodel.ModelDims:
    """ModelDims from the model's config: an HF config.json path or explicit dims (checked
    against the trace's N and k unless check is False)."""
    d = dict(model_cfg.get("dims") or {})
    if model_cfg.get("source") == "hf":  # the config.json of the model's download
        from ..cost.hfconfig import study_dims

        dims = study_dims(model_cfg["hf_config"], model_cfg["precision"],
                          model_cfg["tp"])
        if check and (dims.num_experts, dims.top_k) != (num_experts, top_k):
            raise InputError(f"model {model_cfg['name']}: config.json says {dims.top_k}-of-"
                             f"{dims.num_experts} experts but the trace has {top_k}-of-{num_experts}")
        return dims
    if model_cfg.get("hf_config"):
        from ..cost.hfconfig import dims_from_config

        # a tiny model's config.json: its own dtype (its CPU engines run float32); a synthetic
        # model's: a GPU checkpoint, without dims.dtype as vLLM's dtype auto serves it on a GPU
        own = "auto" if model_cfg.get("source") == "synthetic" else None
        return dims_from_config(model_cfg["hf_config"], dtype=d.get("dtype") or own,
                                tp=int(d.get("tp", 1)))
    if not d:
        raise InputError(f"model {model_cfg['name']}: needs 'dims' or 'hf_config' for the cost model")
    d.setdefault("num_experts", num_experts)
    d.setdefault("top_k", top_k)
    if (d["num_experts"], d["top_k"]) != (num_experts, top_k):
        raise InputError(f"model {model_cfg['name']}: dims say {d['top_k']}-of-{d['num_experts']} "
                         f"experts but the trace has {top_k}-of-{num_experts}")
    return costmodel.ModelDims.from_dims(**d)


IPF_FIT_OK = "ok"


def ipf_fit_status(ip: dict, key: str) -> str:
    """Whether an IPF fit of the ipf stage's result held its margins: "ok", "not converged"
    (margins still off by ipf.MATCHED or more) or "infeasible" (margins no distribution over a
    window's positions has). Only an "ok" fit's unique experts are priced as a TE."""
    if ip["n_infeasible_experts"][key]:
        return "infeasible"
    return IPF_FIT_OK if ip["converged"][key] else "not converged"


def costmodel_stage(inputs, outputs, params) -> None:
    """Rule costmodel (its contract: specmoe.contracts.analysis.CostmodelParams): TE at batch 1
    and vs batch size, and the synthetic drafters' cost ratio (params.draft: context_tokens,
    moe_drafter_experts, batch_sizes: the ratio's batch axis, past the dense drafter's ridge; the
    target's unique experts there are those of B independent tokens from the trace's loads),
    from the run's overlaps and IPF fit (inputs overlap, ipf) into outputs.json."""
    import pandas as pd

    from ..cost import stepmodel

    model_cfg, hardware_cfg, draft_cfg = params.model, params.hardware, params.draft
    overlap_json, ipf_json, out = inputs.overlap, inputs.ipf, outputs.json
    ov, ip = read_json(overlap_json), read_json(ipf_json)
    s = ov["summary"]
    dims = model_dims(model_cfg, s["num_experts"], s["top_k"])
    hw_name = model_cfg["hardware"]
    if hw_name not in hardware_cfg:
        raise InputError(f"model {model_cfg['name']}: unknown hardware '{hw_name}' "
                         f"(config has {', '.join(hardware_cfg)})")
    hw = costmodel.Hardware.from_config(hw_name, hardware_cfg[hw_name])
    table = pd.DataFrame(ov["unique_by_batch"]).merge(pd.DataFrame(ip["by_batch"]), on="batch")
    table = table.set_index("batch")
    # whether the trace's windows support the measured-windows TE at each batch size: a file
    # without it (an older overlap job's) would pass every batch size as sampled well enough
    if "verify_empirical_reliable" not in table:
        raise InputError(f"{overlap_json}: its unique_by_batch has no verify_empirical_reliable "
                         "(written by an older overlap job): rerun rule overlap")
    # a skewed IPF fit that did not hold its margins predicts no unique experts to price
    fit = ipf_fit_status(ip, "skewed_window")
    if fit != IPF_FIT_OK:
        log.warning("model %s: the skewed IPF fit is %s: no TE under it", model_cfg["name"], fit)
    curves = []
    for routing, (vcol, dcol) in ROUTINGS.items():
        ipf_rows = vcol == "verify_ipf_skewed_window"
        priced = not ipf_rows or fit == IPF_FIT_OK
        rows = costmodel.te_curve(dims, hw, s["k_draft"], table.index.tolist(),
                                  lambda b, c=vcol, p=priced: table.loc[b, c] if p else np.nan,
                                  lambda b, c=dcol: table.loc[b, c])
        for r in rows:  # measured windows: is the trace large enough for this batch size?
            ok = (bool(table.loc[r["batch"], "verify_empirical_reliable"])
                  if vcol == "verify_empirical" else True)
            curves.append({"routing": routing, **r, "sample_ok": ok,
                           "ipf_fit": fit if ipf_rows else None})
    u = ov["unique"]
    te_b1 = {"uniform": dims.te_weight(u["uniform"]),
             "independent": dims.te_weight(u["independent"]),
             "ipf_skewed": (dims.te_weight(ip["prediction"]["skewed_window"])
                            if fit == IPF_FIT_OK else float("nan")),
             "empirical": dims.te_weight(u["empirical"])}
    prov = derived(ov.get("provenance", {}), {"model": model_cfg,
                                              "hardware": hardware_cfg[hw_name],
                                              "draft_cost": draft_cfg}, stage="costmodel")
    fitted = None
    if dims.vocab_size:
        fitted = stepmodel.fitted()  # the draft cost's pricing, written beside its rows
        q = np.asarray(ov["per_layer"]["q"], dtype=float)
        ratio = stepmodel.draft_ratio_curve(
            dims, hw, s["k_draft"], draft_cfg["batch_sizes"],
            lambda b: float(np.mean([independent_unique(x, b) for x in q])),
            moe_experts=int(draft_cfg["moe_drafter_experts"]), p=fitted,
            context=float(draft_cfg["context_tokens"]))
        heavy = sorted({r["synthetic_drafter"] for r in ratio if r["status"] != "ok"})
        if heavy:
            log.warning("model %s: %s outweighs the target (%s): its ratio is left out",
                        model_cfg["name"], ", ".join(heavy), stepmodel.OUTWEIGHS)
    else:  # the LM head cannot be sized: no draft-ratio rows rather than wrong ones
        log.warning("model %s: no vocab_size in its dims, so no draft-cost ratio (set "
                    "dims.vocab_size)", model_cfg["name"])
        ratio = []
    write_json(out, {"run": ov["run"], "hardware": hw_name, "dims": dims.to_dict(),
                     **dims.summary(), "unique_ratio": u["empirical"] / s["top_k"],
                     "te_weight_batch1": te_b1, "ipf_skewed_fit": fit, "te_vs_batch": curves,
                     "draft_ratio_vs_batch": ratio,
                     "step_params": fitted.as_dict() if fitted else None}, prov)


def acceptance_stage(inputs, outputs, params, threads: int | None = None) -> None:
    """Rule acceptance (its contract: specmoe.contracts.analysis.AcceptanceParams): the
    acceptance statistics of one trace (inputs.trace) into outputs.json; params.heldout: datasets
    whose slices are held out wherever they are run (besides the b, c of a run "a+b+c")."""
    from ..routing import acceptance, overlap, trace

    trace_path, out, heldout = inputs.trace, outputs.json, params.heldout
    use_threads(threads)
    tr = trace.read_trace(trace_path)
    consec, anchor = overlap.row_overlaps(tr)
    res = acceptance.acceptance_stats(tr, consec, anchor, heldout=set(heldout))
    # its settings (which datasets are held out changes its content) and its trace, as the
    # overlap stage records them
    prov = derived(tr.meta.get("provenance", {}), {"heldout": sorted(heldout)},
                   stage="acceptance", trace=str(trace_path))
    write_json(out, {"run": tr.meta.get("run", {}), **res}, prov)


# --- aggregation ----------------------------------------------------------------------------------


def speedup_stage(inputs, outputs, params) -> None:
    """Rule speedup (its contract: specmoe.contracts.analysis.SpeedupParams): speedup,
    acceptance, draft cost, TE from the sweep and the curve's shape for one run, from its series
    with SD (inputs.sd), whose no-SD points were measured beside its SD points, and the drafter's
    own series (inputs.drafter: none or one file); outputs.json, whose no_sd_series says how the
    no-SD points were taken (measured.arms.PAIR_ORDER of the series' recorded arm order).
    params.engine_log_sd (its estimate's degrees of freedom params.engine_log_sd_df, None: known)
    applies to a series swept on params.engine_log_sd_device alone (engine_spread_on: each
    series' device from its provenance); outputs.json records the spread each took and where
    the configured one was measured."""
    from dataclasses import asdict

    from ..contracts import one
    from ..measured.arms import PAIR_ORDER
    from ..measured.sweep import engine_spread_on, speedup_curve
    from ..provenance import measured_device

    run, drafter_json = params.run, one(inputs.drafter)
    sd = read_json(inputs.sd)
    dr = read_json(drafter_json) if drafter_json else None
    if dr is not None:
        drafter_like_sd(inputs.sd, sd, drafter_json, dr)
    ds = run["dataset"]
    sd_points = series_points(sd, ds)
    paired = sd["datasets"][ds].get("paired_no_sd")
    if not paired:  # the no-SD points measured beside the SD ones (measure.sweep_stage)
        raise InputError(f"{inputs.sd} has no no-SD points beside its SD points for dataset "
                         f"{ds!r} (a series measured before they were paired): delete it to "
                         "measure it again")
    # the configured engine spread is the machine's it was measured on: the SD series (whose
    # no-SD points ran in the same job) and the drafter's own series take it only where they
    # were swept on that device
    spread = {name: engine_spread_on(measured_device(s.get("provenance") or {}),
                                     params.engine_log_sd, params.engine_log_sd_df,
                                     params.engine_log_sd_device, path)
              for name, s, path in (("sd", sd, inputs.sd), ("dr", dr, drafter_json))
              if s is not None}
    res = speedup_curve(paired["points"], sd_points, series_points(dr, ds) if dr else None,
                        run["k"], params.margin, params.timing, *spread["sd"],
                        drafter_engine=spread.get("dr"))
    res["engine_log_sd_device"] = params.engine_log_sd_device
    # how its no-SD points were taken, as the series recorded it (measure.sweep_stage)
    arm_order = (sd.get("paired_no_sd") or {}).get("arm_order")
    if arm_order is None:
        raise InputError(f"{inputs.sd}: its paired_no_sd records no arm_order (a series from "
                         "before the order was recorded): rerun the sweep (delete it to measure "
                         "it again)")
    if arm_order not in PAIR_ORDER:
        raise InputError(f"{inputs.sd}: unknown arm order {arm_order!r} of its no-SD points "
                         f"({' or '.join(PAIR_ORDER)})")
    res["no_sd_series"] = PAIR_ORDER[arm_order]
    # how the SD engine and the no-SD one beside it ran, as the series recorded them
    # (measure.engine_runs; None where it did not): the report sets a draft cost profiled in
    # eager mode beside the sweep only where that is how the sweep ran too
    # (report.measured.profiled_c_apart)
    res["engine_mode"] = {"sd": sd.get("engine_mode"),
                          "no_sd": (sd.get("paired_no_sd") or {}).get("engine_mode")}
    prov = derived(sd.get("provenance", {}), asdict(params), stage="speedup",
                   also=(dr.get("provenance", {}),) if dr else ())
    fit = sd.get("prompting") or {}
    write_json(outputs.json, {"run": run, **res,
                              "prompting": {p: fit[p] for p in dataset_parts(ds) if p in fit}}, prov)
    log.info("%s: speedup %s; shape %s", run["model"],
             ", ".join(f"B={r['batch']}: {r['speedup']:.2f}" for r in res["rows"]), res["shape"])


def drafter_like_sd(sd_path, sd: dict, dr_path, dr: dict) -> None:
    """The drafter's own series must have run as the drafter runs inside the SD series: vLLM gives
    a separate draft model the target's resolved dtype and tensor-parallel degree
    (SpeculativeConfig: dtype=target_model_config.dtype, _verify_and_get_draft_tp), so a draft
    cost c from a series in another dtype or on another number of GPUs divides times of two
    engines that differ in more than SD. The dtypes compared are those the models ran in
    (ran_in), not the configured names: a bf16 target with a float32-config drafter, both
    configured "auto", drafts in bfloat16 while the drafter alone resolves "auto" from its own
    checkpoint. Each series' `engine` records its arguments (a TP left out: 1); InputError in
    one line else."""
    def tp(series: dict, path) -> int:
        engine = series.get("engine")
        if not isinstance(engine, dict) or "dtype" not in engine:
            raise InputError(f"{path}: records no engine dtype (a series from before it was "
                             "recorded): delete it to measure it again")
        return int(engine.get("tensor_parallel_size") or 1)

    sd_tp, dr_tp = tp(sd, sd_path), tp(dr, dr_path)
    sd_dtype, dr_dtype = ran_in(sd, sd_path, draft=True), ran_in(dr, dr_path)
    if (sd_dtype, sd_tp) != (dr_dtype, dr_tp):
        auto = "auto" in (sd["engine"]["dtype"], dr["engine"]["dtype"]) and sd_tp == dr_tp
        fix = (f"dtype auto resolves from each checkpoint's own config: set sweep.dtype, or the "
               f"target's precision, to {sd_dtype} so that the drafter is served alone in it too"
               if auto else "delete it to measure it again")
        raise InputError(f"{dr_path}: the drafter ran alone in {dr_dtype} at TP {dr_tp}, but "
                         f"drafts in {sd_dtype} at TP {sd_tp} in {sd_path}: its draft cost would "
                         f"compare two setups ({fix})")


def ran_in(series: dict, path, draft: bool = False) -> str:
    """The dtype a serving series' target (draft: the draft inside its SD engine) ran in, as the
    series recorded it (measure.sweep_stage: resolved_dtype, draft_resolved_dtype). A series from
    before it was recorded: its configured dtype where that is not "auto" (vLLM serves an
    explicit dtype as named, and gives the draft the target's: exact), else refused in one line
    (rerunning its rule reuses its points and records it)."""
    key = "draft_resolved_dtype" if draft else "resolved_dtype"
    if series.get(key):
        return str(series[key])
    configured = str(series["engine"]["dtype"])
    if configured != "auto":
        return configured
    rule = "sweep_sd" if draft else "sweep_ar"
    raise InputError(f"{path}: ran in dtype auto and records not what it resolved to (a series "
                     f"from before it was recorded): delete it and rerun rule {rule} (its "
                     "points are reused)")


def series_points(series: dict, dataset: str) -> list[dict]:
    """One dataset's points of a serving series (an engine serves every dataset of its model)."""
    try:
        return series["datasets"][dataset]["points"]
    except KeyError:
        raise InputError(f"the series of {series.get('series', {}).get('model')} has no points "
                         f"for dataset {dataset!r}") from None


def _measured_tau(acceptance_json, name: str) -> tuple[tuple[float, float] | None, str | None]:
    """The acceptance length's interval over the trace's requests (routing.acceptance), the
    range a prediction draws tau from; where the trace has too few requests to give one, None
    (the prior for K) and the caveat that says why: its point alone would pass for a tau known
    exactly."""
    acc = read_json(acceptance_json)["acceptance_length"]
    if "tau_low" not in acc:
        raise InputError(f"{acceptance_json}: no interval of the acceptance length (written by "
                         "an older acceptance job): rerun rule acceptance")
    lo, hi = acc["tau_low"], acc["tau_high"]
    if not (np.isfinite(lo) and np.isfinite(hi)):
        why = (f"acceptance length: the trace's {acc.get('requests')} requests give it no "
               "interval: the prior for K stands in")
        log.info("%s: %s", name, why)
        return None, why
    return (float(lo), float(hi)), None


def _measured_overlaps(overlap_json, summary: dict, k: int,
                       name: str) -> tuple[np.ndarray | None, str | None]:
    """A trace's overlap curve for the step model: the two ends of its 95% interval over requests
    (window_low, window_high: the request bootstrap), which predict mixes per draw, as it draws
    the acceptance length within its interval. Where the trace had too few requests to give one,
    None (the prior of its granularity, as _measured_tau gives the prior for K) and the caveat
    that says why: its point alone would pass for a curve known exactly. An overlap file without
    the interval is refused."""
    if "window_low" not in summary:
        raise InputError(f"{overlap_json}: no interval of the overlaps (written by an older "
                         "overlap job): rerun rule overlap")
    low, high = (np.asarray(summary[key][:k], float) for key in ("window_low", "window_high"))
    if low.size != k or high.size != k:
        raise InputError(f"{overlap_json}: the overlaps' interval has {low.size} distance(s) for "
                         f"K = {k}")
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        why = (f"overlaps: the trace's {summary.get('window_requests')} requests give them no "
               "interval: the prior of its granularity stands in")
        log.info("%s: %s", name, why)
        return None, why
    return np.stack([low, high]), None


def predict_stage(inputs, outputs, params) -> dict:
    """Rule predict (its contract: specmoe.contracts.analysis.PredictParams): the step model's
    prediction for every run of one model (params.predictions, one entry per run), each through
    the entry point `specmoe predict` uses (specmoe.cost.predictor): TE and speedup at every
    batch size with their intervals, at the run's own K and method, into outputs.json as
    `predictions`, one per run in their order. A model with a trace of its own (tiny,
    synthetic) uses each run's measured overlaps and acceptance length (the run's files among
    inputs overlap, acceptance); a study model its config.json and the study's published
    overlaps (or the prior of its granularity; at a K past them, the run's captured overlaps,
    said in a caveat) and the acceptance prior; a separate draft
    model's config (the run's file among inputs.draft) sizes the draft. Attention reads each
    run's KV context (its `context`: its dataset's mean prompt and half its output, recorded
    with their sources as context_source); a run that serves no prompts is priced at the step
    model's CONTEXT, said in a caveat."""
    from ..cost import stepmodel

    model_cfg, hardware_cfg = params.model, params.hardware
    if not params.predictions:
        raise InputError(f"rule predict: {model_cfg['name']} has no run to predict")
    hw_name = model_cfg["hardware"]
    hw = costmodel.Hardware.from_config(hw_name, hardware_cfg[hw_name])
    config = None
    if model_cfg.get("hf_config"):  # the config.json the dimensions were read from
        from ..cost.hfconfig import config_file

        config = config_file(model_cfg["hf_config"])
    # each run's files, every one checked among the job's inputs before any is read
    files = [{name: _run_file(inputs, entry, name) for name in RUN_FILES}
             for entry in params.predictions]
    predictions = [_predict_run(params, entry, read, hw, config)
                   for entry, read in zip(params.predictions, files)]
    out_obj = {"model": model_cfg["name"], "params": stepmodel.fitted().as_dict(),
               "predictions": predictions}
    write_json(outputs.json, out_obj, provenance(
        {"model": model_cfg, "hardware": hardware_cfg[hw_name],
         "predictions": [{key: e.get(key) for key in ("run", "k", "method", "context")}
                         for e in params.predictions]},
        model=model_ref(model_cfg), stage="predict"))
    return out_obj


RUN_FILES = ("overlap", "acceptance", "draft")  # the inputs a prediction reads of its run alone


def _run_file(inputs, entry: dict, name: str) -> str | None:
    """The file `name` (overlap, acceptance, draft) a prediction's entry reads (its `files`),
    which must be among the job's inputs of that name; None where it reads none."""
    path = (entry.get("files") or {}).get(name)
    if path is None:
        return None
    given = inputs.get(name)
    given = [] if given is None else [str(given)] if isinstance(given, (str, Path)) else \
        [str(g) for g in given]
    if str(path) not in given:
        raise ValueError(f"rule predict: the prediction of {entry.get('run')} reads {name} "
                         f"{path}, which is not among the job's inputs "
                         f"({', '.join(given) or 'none'})")
    return str(path)


def _predict_run(params, entry: dict, files: dict, hw, config) -> dict:
    """One run's prediction (an entry of params.predictions, reading `files`: its RUN_FILES, each
    a path or None) for predict_stage."""
    from ..cost import predictor, stepmodel
    from ..sources.published import overlap_steps

    model_cfg, batch_sizes, study_model = params.model, params.batch_sizes, params.study
    k, method, run = int(entry["k"]), entry["method"], entry.get("run")
    overlap_json, acceptance_json, draft_config = (files[name] for name in RUN_FILES)
    overlaps, source, caveats = None, "given", []
    if overlap_json:
        ov = read_json(overlap_json)
        s = ov["summary"]
        dims = model_dims(model_cfg, s["num_experts"], s["top_k"])
        overlaps, why = _measured_overlaps(overlap_json, s, k, model_cfg["name"])
        # the study's curves and the prior stop at d = overlap_steps(): past it, only the trace's
        steps = overlap_steps()
        past = (f"the study's curves (its models' and the prior of a granularity) reach "
                f"d = 1..{steps} only, short of K = {k}")
        if overlaps is None and k > steps:
            raise InputError(f"{overlap_json}: its {s.get('window_requests')} requests give the "
                             f"overlaps no interval, and {past}: capture more prompts")
        if overlaps is None:  # no interval: the prior of its granularity, not a study's curve
            overlaps, source = stepmodel.study_overlaps(dims, k)
            caveats.append(why)
        else:
            source = "measured"
        if model_cfg.get("source") == "hf" and k > steps:  # Files.predict_run_inputs' case
            caveats.append(f"overlaps: this run's capture's, since {past}")
    else:
        dims = model_dims(model_cfg, 0, 0, check=False)
    tau = None
    if acceptance_json:
        tau, why = _measured_tau(acceptance_json, model_cfg["name"])
        caveats += [why] if why else []
    if draft_config:  # a checkpoint folder, or a download manifest of one
        from ..sources.hub import snapshot_of

        draft_config = snapshot_of(draft_config)
    if study_model and overlaps is None and predictor.study_routing(study_model) not in (
            None, (dims.top_k, dims.num_experts)):  # a stand-in compared with other k, N
        log.info("%s: %s routes another k of N; its overlaps are not this model's: the prior of "
                 "its granularity", model_cfg["name"], study_model)
        study_model = None
    ctx = entry.get("context")
    if ctx is None:
        context = stepmodel.CONTEXT
        caveats.append(f"context: the step model's {context:,} KV tokens per sequence (an "
                       "MT-Bench prompt and half its output), since "
                       + ("no run is predicted" if run is None else
                          f"{model_cfg['name']}'s run serves no prompts"))
        context_source = {"tokens": context, "source": "the step model's CONTEXT"}
    else:
        context = max(1, int(round(ctx["tokens"])))
        context_source = {**ctx, "source": f"{ctx['prompt_source']} mean prompt of "
                                           f"{(run or {}).get('dataset')} + half of "
                                           f"{ctx['output_source']}"}
    res = predictor.prediction(dims, hw, k, method, batch_sizes, config=config,
                               study_model=study_model, overlaps=overlaps,
                               overlap_source=source, tau=tau,
                               draft_config=draft_config, caveats=caveats, context=context)
    log.info("%s (%s): predicted speedup %s; shape %s; %s", model_cfg["name"],
             Run.of(run) if run else "no run",
             ", ".join(f"B={b}: {x:.2f}" for b, x in zip(res["batch_sizes"], res["speedup"])),
             res["shape"], res["verdict"])
    return {"model": model_cfg["name"], "run": run, **res, "context_source": context_source}
