"""One entry point for the step model's prediction: `specmoe predict` (cli.cmd_predict) and the
pipeline's rule predict (stages.analysis.predict_stage) both call `prediction`, so what they check,
draw and report is the same (docs/method.md, "Step model").

It resolves the hardware (the GPUs the package ships, published/hardware.csv, or an entry of a
--hardware-file, with a caveat), checks every input against the model (one line each, exit 2 in
the CLI), measures how far the configuration lies from the calibration (each way outside it widens
the interval and is named as a caveat), and draws the curve with stepmodel.predict.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..sources import published
from . import stepmodel, steptables
from .costmodel import (DEFAULT_HARDWARE, FLOAT_DTYPES, GIB, MAX_BATCH, MAX_DRAFT_COST, Hardware,
                        ModelDims)
from ..errors import InputError



def shipped_gpus() -> list[str]:
    return list(published.gpus())


def hardware(name: str | None, hardware_file: str | None = None) -> tuple[Hardware, list[str]]:
    """A GPU by name: from `hardware_file` (a YAML or JSON file whose `hardware` section, or whole
    mapping, holds entries like config.yaml's) where given, else one the package ships. The file's
    entries overlay the shipped GPUs as the workflow's configuration does (published.with_gpus):
    an entry of a shipped GPU's name changes the keys it gives; every entry of the file is
    checked (Hardware.from_config), the one asked for or not. No name: the file's one entry (a
    file of several is refused: which one is meant), else costmodel.DEFAULT_HARDWARE. A GPU the
    study did not measure on gets a caveat."""
    caveats = []
    if hardware_file:
        given = _hardware_entries(hardware_file)
        entries = published.with_gpus(given)
        if name is None:
            if len(given) > 1:
                raise InputError(f"--hardware-file {hardware_file} names {', '.join(given)}; "
                                 "give --hardware")
            name = next(iter(given))
        if name not in entries:
            raise InputError(f"--hardware {name}: not in {hardware_file} (has "
                             f"{', '.join(given)}) nor shipped ({', '.join(shipped_gpus())})")
        hw = Hardware.from_config(name, entries[name])  # the one asked for says its error first
        for entry in given:  # a broken entry is an error even when another one is used
            Hardware.from_config(entry, entries[entry])
        if name in given:
            caveats.append(f"hardware {name} from {hardware_file}: its numbers are the file's"
                           + (" over the shipped entry" if name in shipped_gpus() else ""))
    elif (name := name or DEFAULT_HARDWARE) in shipped_gpus():
        hw = stepmodel.study_hardware(name)
    else:
        raise InputError(f"--hardware {name}: not a shipped GPU ({', '.join(shipped_gpus())}); "
                         "give its numbers with --hardware-file")
    return hw, caveats


def _hardware_entries(path: str) -> dict:
    from ..yamlfile import loads

    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such file (--hardware-file: YAML or JSON with a `hardware` "
                         "section of GPU entries, as in the project's config.yaml)")
    try:
        text = p.read_text()
    except UnicodeDecodeError:
        raise InputError(f"{p}: not a text file (--hardware-file is YAML or JSON)") from None
    doc = loads(text, str(p)) or {}  # a key given twice is refused, as in config files
    hw = doc.get("hardware", doc) if isinstance(doc, dict) else None
    if not isinstance(hw, dict) or not hw:
        raise InputError(f"{p}: no `hardware` section")
    bad = next((n for n, e in hw.items() if not isinstance(e, dict)), None)
    if bad is not None:
        raise InputError(f"{p}: hardware entry {bad} is not a mapping of its numbers")
    return hw


@lru_cache(maxsize=1)
def calibration_set() -> dict[str, set]:
    """What the calibration's TE rows span (the quantity a prediction is of; the MoE-share rows
    measured on other GPUs say nothing of TE there): granularities (N/k), experts per token,
    weight formats, TP degrees, GPUs, method families, attention kinds, engines, draft lengths,
    hidden sizes, expert widths per GPU, decode steps at batch 1 in ms (decode_step_ms), the MoE
    experts' shares of them (moe_share) and, per method family, the fitted term that priced its
    drafter's pass over the verified tokens (verify_terms; read once: package data; callers only
    read it)."""
    rows = [r for r in stepmodel.calibration_rows() if r["quantity"] == stepmodel.TE]
    return {"verify_terms": {(stepmodel.FAMILIES[r["method"]],
                              stepmodel.verify_term(r["method"], None)) for r in rows},
            "step_ms": {decode_step_ms(r["dims"], r["hw"]) for r in rows},
            "moe_share": {moe_share(r["dims"], r["hw"]) for r in rows},
            "k_draft": {stepmodel.CALIBRATION_K},
            "hidden": {r["dims"].hidden for r in rows},
            "expert_width": {expert_width_per_gpu(r["dims"]) for r in rows},
            "nk": {r["dims"].num_experts / r["dims"].top_k for r in rows},
            "k": {r["dims"].top_k for r in rows},
            "format": {_format(r["dims"].dtype) for r in rows},
            "tp": {r["tp"] for r in rows}, "gpu": {r["gpu"] for r in rows},
            "family": {stepmodel.FAMILIES[r["method"]] for r in rows if r["method"]},
            "attention": set().union(*(_attention_kinds(r["dims"], _study_config(r))
                                       for r in rows)),
            "engine": {stepmodel.CALIBRATION_ENGINE}}


def expert_width_per_gpu(dims: ModelDims) -> float:
    """The columns of one expert's gate/up projection each GPU holds (expert width / TP): the
    shape of the GEMMs whose efficiency the calibration fitted, not the checkpoint's width."""
    return dims.expert_intermediate / dims.tp


def decode_step(dims: ModelDims, hw: Hardware) -> dict[str, float]:
    """The step model's decode step at batch 1, seconds per class (the parameters fitted on
    every calibration row)."""
    return stepmodel.step_times(dims, hw, 1, 1, stepmodel.unique_decode(dims, 1),
                                stepmodel.fitted())


def decode_step_ms(dims: ModelDims, hw: Hardware) -> float:
    """The decode step at batch 1 in ms. The engine's SD loop costs microseconds whatever the
    model, so its share of TE follows this step: a step shorter or longer than every calibrated
    one weighs the loop (and the kernels' launch latency) in a proportion the calibration never
    measured."""
    return 1e3 * sum(decode_step(dims, hw).values())


def moe_share(dims: ModelDims, hw: Hardware) -> float:
    """The MoE experts' share of the kernels' time of the decode step at batch 1 (what the study's
    profiles measure). Verifying K + 1 tokens reads more experts but the same other weights, so
    TE follows this share (the three-step correction): a model whose experts take a share no
    calibrated model's did (few MoE layers among many dense ones) was never measured."""
    t = decode_step(dims, hw)
    return t["moe"] / stepmodel.gpu_time(t)


def _study_config(row: dict) -> str:
    return stepmodel.config_path(stepmodel.study_checkpoint(row["model"], row["precision"]))


def _format(dtype: str) -> str:
    return dtype.split("-")[0]


def _attention_kinds(d: ModelDims, config=None) -> set[str]:
    """Attention kinds besides grouped-query softmax attention: from the config.json where there
    is one (MLA, DSA, linear, sliding window), else what the dimensions show."""
    if config is not None:
        from .hfconfig import attention_kinds

        return attention_kinds(config)
    kinds = set()
    if d.state_per_seq:
        kinds.add("linear attention")
    if d.kv_sliding_per_token:
        kinds.add("sliding window")
    return kinds


def calibration_distance(dims: ModelDims, hw: Hardware, method: str, config=None,
                         engine: str = stepmodel.CALIBRATION_ENGINE,
                         k_draft: int = stepmodel.CALIBRATION_K,
                         draft: ModelDims | None = None,
                         context: float = stepmodel.CONTEXT) -> tuple[int, list[str]]:
    """How many ways the configuration lies outside what the calibration's TE rows measured,
    each named: granularity, experts per token, weight format, TP, GPU (its name, and numbers
    other than the shipped entry's), method family, the term that prices the drafter's pass over
    the verified tokens (a draft model given with its config.json, `draft`, is priced by
    catchup_passes, fitted on EAGLE/MTP rows only, where the study's draft-model rows calibrate
    verify_draft_model), draft length, each attention kind (MLA, DSA, linear, sliding window;
    read from `config` where given), the hidden size and the experts' width per GPU
    (expert_width_per_gpu: the GEMM shapes whose efficiency was fitted), the decode step at
    batch 1 (decode_step_ms) and the experts' share of it (moe_share), the context (KV tokens per
    sequence: the calibration priced its MT-Bench rows at stepmodel.CONTEXT, and one beyond
    CONTEXT_FACTOR of it weighs attention in a proportion no calibrated row had), and last the
    engine."""
    cal = calibration_set()
    out = []
    nk = dims.num_experts / dims.top_k
    if not min(cal["nk"]) <= nk <= max(cal["nk"]):
        out.append(f"granularity N/k = {nk:g} outside the calibration's "
                   f"{min(cal['nk']):g}-{max(cal['nk']):g}")
    if not min(cal["k"]) <= dims.top_k <= max(cal["k"]):
        out.append(f"{dims.top_k} expert(s) per token outside the calibration's "
                   f"{min(cal['k'])}-{max(cal['k'])}")
    if _format(dims.dtype) not in cal["format"]:
        out.append(f"weights in {dims.dtype}, a format the calibration has no TE for")
    if dims.tp not in cal["tp"]:
        out.append(f"TP {dims.tp} outside the calibration's {sorted(cal['tp'])}")
    if hw.name not in cal["gpu"]:
        out.append(f"GPU {hw.name}: the study measured TE on {', '.join(sorted(cal['gpu']))} only")
    elif replace(hw, memory_bytes=0.0) != replace(stepmodel.study_hardware(hw.name),
                                                  memory_bytes=0.0):
        out.append(f"GPU {hw.name} with numbers other than the shipped entry's, which the "
                   "calibration was fitted on")
    if stepmodel.FAMILIES[method] not in cal["family"]:
        out.append(f"method {method}: none of its family in the calibration")
    else:
        family, term = stepmodel.FAMILIES[method], stepmodel.verify_term(method, draft)
        if (family, term) not in cal["verify_terms"]:
            used = sorted(t for f, t in cal["verify_terms"] if f == family)
            out.append(f"{method} priced from its drafter's config.json by {term}, a term the "
                       f"calibration fitted on other methods' rows only (its {method} rows "
                       f"calibrate {', '.join(used)})")
    if k_draft not in cal["k_draft"]:
        out.append(f"draft length K = {k_draft}: the study publishes TE at K = "
                   f"{', '.join(map(str, sorted(cal['k_draft'])))} only")
    for kind in sorted(_attention_kinds(dims, config) - cal["attention"]):
        out.append(f"{kind} attention: none in the calibration")
    for what, value, key in (("hidden size", dims.hidden, "hidden"),
                             ("expert width per GPU (width / TP)", expert_width_per_gpu(dims),
                              "expert_width")):
        if not min(cal[key]) <= value <= max(cal[key]):
            out.append(f"{what} {value:,g} outside the calibration's {min(cal[key]):,g}-"
                       f"{max(cal[key]):,g}: GEMMs of shapes whose efficiency was never fitted")
    step, lo, hi = decode_step_ms(dims, hw), min(cal["step_ms"]), max(cal["step_ms"])
    if not lo <= step <= hi:
        out.append(f"decode step at batch 1 {step:.3g} ms outside the calibration's "
                   f"{lo:.3g}-{hi:.3g} ms: the SD loop's microseconds weigh on TE in a "
                   "proportion no calibrated configuration had")
    share, lo, hi = moe_share(dims, hw), min(cal["moe_share"]), max(cal["moe_share"])
    if not lo <= share <= hi:
        out.append(f"MoE share of the decode step at batch 1 {share:.2f} outside the "
                   f"calibration's {lo:.2f}-{hi:.2f}: TE follows the share of the step that "
                   "verifying more tokens makes dearer, and no calibrated model had this one")
    lo, hi = (stepmodel.CONTEXT / stepmodel.CONTEXT_FACTOR,
              stepmodel.CONTEXT * stepmodel.CONTEXT_FACTOR)
    if not lo <= context <= hi:
        out.append(f"context {context:,g} tokens per sequence outside the calibration's "
                   f"{lo:,g}-{hi:,g} (its MT-Bench rows, priced at {stepmodel.CONTEXT:,} "
                   "tokens): attention's share of the step is one no calibrated row had")
    if engine not in cal["engine"]:
        out.append(f"engine {engine}: the calibration was served by "
                   f"{', '.join(sorted(cal['engine']))} only")
    return len(out), out


def check_method(config: Path | None, method: str) -> None:
    """MTP needs the model's own multi-token-prediction layers (num_nextn_predict_layers or
    mtp_num_hidden_layers; Qwen3-Next's ship in every checkpoint)."""
    if stepmodel.FAMILIES.get(method) != "mtp" or config is None:
        return
    from .hfconfig import load_config

    cfg, name = load_config(config)
    if not (cfg.get("num_nextn_predict_layers") or cfg.get("mtp_num_hidden_layers")
            or cfg.get("model_type") == "qwen3_next"):
        raise InputError(f"--method mtp: {name} has no MTP layers (num_nextn_predict_layers or "
                         "mtp_num_hidden_layers); use eagle3 or draft_model")


def study_routing(study_model: str) -> tuple[int, int] | None:
    """The k and N a study model routes with (None: the study does not publish them); an error
    if it is not a study model."""
    models = published.load("models").set_index("model")
    ob = published.load("overlap_by_distance").set_index("model")
    ue = published.load("unique_experts_ipf").set_index("model")
    known = sorted(set(models.index) | set(ob.index))
    if study_model not in known:
        raise InputError(f"--study-model {study_model}: not a study model ({', '.join(known)})")
    nk = (ue.loc[study_model, ["k", "n"]] if study_model in ue.index else
          models.loc[study_model, ["experts_per_token", "num_experts"]] if study_model in
          models.index else None)
    return None if nk is None else (int(nk.iloc[0]), int(nk.iloc[1]))


def draft_dims(dims: ModelDims, draft_config, method: str, config=None,
               name: str | None = None) -> ModelDims:
    """A separate draft model's or EAGLE head's dimensions from its config.json (or its folder),
    at the target's TP: vLLM runs a drafter at the target's tensor-parallel degree unless told
    otherwise (SpeculativeConfig._verify_and_get_draft_tp). Checked against the target's
    config.json where given, as a GPU job's preflight checks it (drafter_problems; `name`: the
    drafter in the message, else its path)."""
    from ..checks.preflight import drafter_problems
    from .hfconfig import dense_dims_from_config, load_config

    # its own reading first: its errors name its file (drafter_problems reads it as a dict)
    draft = check_vocab(dense_dims_from_config(draft_config, tp=dims.tp), draft_config)
    if config is not None:
        problems = drafter_problems(load_config(config)[0], load_config(draft_config)[0], method,
                                    name or str(draft_config))
        if problems:
            raise InputError(problems[0])
    return draft


def check_vocab(dims: ModelDims, config) -> ModelDims:
    """A model whose LM head has rows: without vocab_size its head and the sampler's logits
    would cost nothing (the weight model alone reads a config without it)."""
    if dims.vocab_size < 1:
        raise InputError(f"{config or 'the model'}: lacks vocab_size, the rows of its LM head "
                         "(and of the logits the sampler reads)")
    return dims


def check_curves(dims: ModelDims, overlaps: np.ndarray, source: str) -> None:
    """Overlap curves that k-of-N routing allows, whatever their source: each at least the 2k - N
    floor (check_overlaps), and its overlaps together the pair margins of some distribution of an
    expert's use over a window of K + 1 tokens (ipf.predict_uniform: an IPF fit that does not
    converge on margins no distribution has is infeasible; e.g. ov(2) >= 2 ov(1) - 1). A prior of
    the study's curves that this model's routing cannot have asks for its own."""
    from ..routing import ipf
    from ..routing.unique import check_overlaps

    n, k = dims.num_experts, dims.top_k
    for curve in overlaps:
        try:
            check_overlaps(n, k, curve)
            if ipf.predict_uniform(n, k, curve)["infeasible"]:
                raise InputError(f"overlaps {', '.join(f'{x:g}' for x in curve)} are impossible "
                                 f"together with k = {k} of N = {n}: no distribution of an "
                                 "expert's use over a window of K + 1 tokens has them as its pair "
                                 "overlaps (e.g. ov(2) >= 2 ov(1) - 1, and a window uses at most N "
                                 "experts)")
        except InputError as exc:
            if source.startswith("prior"):
                raise InputError(f"the overlap {source} cannot be this model's: {exc}; give its "
                                 "own (--overlaps)") from None
            raise


def check_node(tp: int, hw: Hardware) -> list[str]:
    """The step model prices a TP group's all-reduces over NVLink (stepmodel._allreduce), which
    joins the GPUs of one node (node_memory.csv): a TP above them is refused, the link between
    nodes being unpriced. A GPU the table does not hold gets a caveat (its caveats)."""
    if tp == 1:
        return []
    nodes = steptables.gpus_per_node()
    if hw.name not in nodes:
        return [f"TP {tp} priced as one NVLink domain: the GPUs per node of {hw.name} are not "
                "known here (node_memory.csv), and an all-reduce between nodes, which is not "
                "priced, would be slower"]
    per_node = nodes[hw.name]
    if tp > per_node:
        raise InputError(f"TP {tp} spans more than one {hw.name} node ({per_node} GPUs per node, "
                         "node_memory.csv): the all-reduce between nodes is not priced (only "
                         f"NVLink within a node is); use TP {per_node} or less")
    return []


def check_study_model(study_model: str | None, dims: ModelDims) -> None:
    """A study model named for its published overlaps must be one, with the model's k and N."""
    if not study_model:
        return
    nk = study_routing(study_model)
    if nk is not None and nk != (dims.top_k, dims.num_experts):
        raise InputError(f"--study-model {study_model} routes {nk[0]} of {nk[1]} experts; this "
                         f"model {dims.top_k} of {dims.num_experts}")


def check_positions(config: Path, context: int, k: int) -> None:
    """`context` + K + 1 tokens (a sequence as the step model prices it, and the max_model_len
    vLLM is asked for) must fit the positions the target's config.json gives (hfconfig.
    max_positions); a config that gives none cannot be checked, which is an error too."""
    from .hfconfig import POSITION_KEYS, load_config, max_positions

    cfg, name = load_config(config)
    found = max_positions(cfg, name)
    if found is None:
        raise InputError(f"{name} gives none of {', '.join(POSITION_KEYS)}: whether --context "
                         f"{context:,} + K+1 fits the model's positions cannot be checked (add "
                         "max_position_embeddings)")
    tokens = int(context) + k + 1
    if tokens > found[0]:
        raise InputError(f"--context {context:,} + K+1 = {tokens:,} tokens exceed the model's "
                         f"{found[0]:,} positions ({name}: {found[1]}): vLLM would refuse that "
                         f"max_model_len; lower --context to at most {found[0] - k - 1:,}")


SERVED_AS = {v: k for k, v in published.SD_METHODS.items()}  # the study's method names: vLLM's


def kv_cache_sequences(dims: ModelDims, hw: Hardware, k: int, method: str, config,
                       draft_config=None, context: int = stepmodel.CONTEXT) -> int:
    """How many sequences of `context` + K + 1 tokens (the step model's) vLLM's KV cache holds per
    GPU, sized as the GPU preflight sizes a job (checks.preflight.memory: the weights with an
    MTP layer or the drafter, the reserve for the CUDA context, graphs and the profiling pass,
    and the KV cache, out of the GPU's memory as CUDA reports it times vLLM's default
    gpu_memory_utilization), at the shortest max_model_len those sequences allow; an error where
    vLLM cannot start even so. The precision is the one `dims` were read at (never the config
    read again without it: a checkpoint that names no dtype is served in the one asked for)."""
    from ..checks import preflight
    from .hfconfig import TORCH_DTYPE_OF, dims_from_config, load_config

    cfg = load_config(config)[0]
    if dims.dtype in FLOAT_DTYPES:  # served in a float dtype: the checkpoint's or the one asked
        precision = dims.dtype
    else:  # quantised: the checkpoint's own format, or vLLM's online fp8 of it
        precision = "auto" if dims.dtype == dims_from_config(cfg, tp=dims.tp).dtype \
            else dims.dtype
    tokens = int(context) + k + 1
    e = preflight.Engine(
        job="predict", model=str(config), entry={}, hardware={}, hardware_name=hw.name,
        tp=dims.tp, precision=precision, dtype=TORCH_DTYPE_OF[dims.base_dtype],
        method=SERVED_AS.get(method, method), drafter=None, k=k, max_model_len=tokens, batch=1,
        output_tokens=0, prompt_tokens={"predict": int(context)},
        utilization=preflight.GPU_MEMORY_UTILIZATION, offline_server=False)
    m = preflight.memory(e, cfg, None if draft_config is None else load_config(draft_config)[0],
                         total=hw.memory_bytes)
    need, words = preflight.startup_need(m, tokens)
    if need > m.budget:
        raise InputError(f"in {dims.dtype}: {words} > TP {dims.tp} x the {hw.name}'s "
                         f"{hw.memory_bytes / GIB:.2f} GiB x gpu_memory_utilization "
                         f"{e.utilization:g} = {m.budget / GIB:.1f} GiB per GPU: vLLM cannot start "
                         "this; raise --tp or use a larger GPU")
    return m.sequences


def prediction(dims: ModelDims, hw: Hardware, k: int, method: str, batch_sizes, *,
               config: Path | None = None, study_model: str | None = None, overlaps=None,
               overlap_source: str = "given", tau: tuple[float, float] | None = None,
               draft_config: Path | None = None, draft_name: str | None = None,
               draft_cost: float | None = None,
               engine: str = "vllm", caveats: list[str] | None = None,
               margin: float = stepmodel.SHAPE_MARGIN, draws: int = stepmodel.DRAWS,
               extra_log_sd: float = 0.0, context: int = stepmodel.CONTEXT) -> dict:
    """TE and speedup at each batch size with 95% intervals, the shape the intervals decide, where
    SD pays, and the caveats: every input checked first. `config`: the target's config.json;
    `draft_config`: a separate draft model's or EAGLE head's (draft_dims; `draft_name` names it in
    messages). `draws` and `extra_log_sd` (an error on the speedup sized outside the step model)
    serve bench/public_coverage.py; predict uses the defaults (stepmodel.predict). `context`: KV
    tokens per sequence (stepmodel.CONTEXT, the calibration's, unless given)."""
    batches = [int(b) for b in batch_sizes]
    if k < 1:
        raise InputError(f"--draft-length must be >= 1 (got {k})")
    if not batches or min(batches) < 1 or max(batches) > MAX_BATCH:
        raise InputError(f"batch sizes must lie within 1..{MAX_BATCH} (got {batches})")
    if not 1 <= context <= stepmodel.MAX_CONTEXT:
        raise InputError(f"--context must lie within 1..{stepmodel.MAX_CONTEXT} tokens (got "
                         f"{context})")
    if draft_cost is not None and not 0 <= draft_cost < MAX_DRAFT_COST:
        raise InputError(f"--draft-cost is a draft time over a decode step, within "
                         f"[0, {MAX_DRAFT_COST:g}) (got {draft_cost})")
    caveats = [*(caveats or []), *check_node(dims.tp, hw)]
    check_method(config, method)
    check_vocab(dims, config)
    check_study_model(study_model, dims)
    draft = (None if draft_config is None else
             draft_dims(dims, draft_config, method, config, draft_name))
    if overlaps is None:
        overlaps, overlap_source = stepmodel.study_overlaps(dims, k, study_model)
    overlaps = np.atleast_2d(np.asarray(overlaps, float))
    tau = tau or stepmodel.tau_prior(k)
    stepmodel.check_inputs(k, overlaps, tau)
    check_curves(dims, overlaps, overlap_source)
    if config is not None:
        check_positions(config, context, k)
    held = None
    if not hw.memory_bytes:
        caveats.append(f"memory not checked: hardware {hw.name} gives neither cuda_memory_mib nor "
                       "memory_gib")
    elif config is not None:
        held = kv_cache_sequences(dims, hw, k, method, config, draft_config, context)
    else:
        if stepmodel.weight_bytes(dims) > hw.memory_bytes:
            raise InputError(f"weights of {stepmodel.weight_bytes(dims) / GIB:.1f} GiB per GPU "
                             f"at TP {dims.tp} in {dims.dtype} exceed the {hw.name}'s "
                             f"{hw.memory_bytes / GIB:.2f} GiB: no engine can serve this; raise "
                             "--tp or use a larger GPU")
        caveats.append("memory checked for the weights alone: without a config.json neither the "
                       "reserve nor the KV cache is sized")
    over = sorted({b for b in batches if held is not None and b > held})
    shown = stepmodel._batches(over)
    if over:
        words = (f"vLLM's KV cache holds {held} sequences of {context + k + 1} tokens per GPU")
        if len(over) == len(set(batches)):
            raise InputError(f"{words}, fewer than batch {shown}: vLLM would run {held} at a "
                             "time; raise --tp, use a larger GPU or ask for smaller batches")
        caveats.append(f"not predicted at batch {shown}: {words}, so vLLM would run {held} at a "
                       "time and queue the rest")
        batches = [b for b in batches if b not in over]
    caveats += loop_caveat(engine)
    distance, far = calibration_distance(dims, hw, method, config, engine, k, draft, context)
    # TE's error grows with the distance of the model and GPU; another engine is priced by its
    # own factor on the speedup (stepmodel.ENGINE_LOG_SD), not counted twice
    te_distance = distance - (engine != stepmodel.CALIBRATION_ENGINE)
    cal = stepmodel.calibration()
    res = stepmodel.predict(dims, hw, k, method, batches, cal.params, cal.te_rmse, overlaps, tau,
                            draft=draft, known_cost=draft_cost, margin=margin,
                            fits=cal.lomo_fits, distance=te_distance, engine=engine, draws=draws,
                            extra_log_sd=extra_log_sd, context=context)
    inside = distance == 0
    if over:
        res["verdict"] += f"; not predicted at batch {shown} (the KV cache holds {held} sequences)"
    return {**res, "hardware": hw.name, "tp": dims.tp, "precision": dims.dtype, "k": k,
            "context": context,
            "method": method, "engine": engine, "overlaps": overlap_source,
            "acceptance_length": list(tau), "calibration_distance": distance,
            "outside_calibration": far, "kv_cache_sequences": held, "over_kv_cache": over,
            "te_validated": [inside and b == 1 for b in res["batch_sizes"]],
            "caveats": [*caveats, *far, *missing_terms(cal.params, method, draft),
                        *unpriced(dims, method, config), *unvalidated(inside, res["batch_sizes"],
                                                                  draft_cost is None)]}


def loop_caveat(engine: str) -> list[str]:
    """The engine's SD loop overhead where no source measures it against plain decoding
    (steptables.engine_overheads: a spread between versions only, or no source at all): what it
    is drawn from, with its note."""
    loop = steptables.engine_overheads().get(engine)
    if loop is None or loop.measured:
        return []
    return [f"{engine}'s SD loop overhead per iteration is not measured against plain decoding "
            f"({loop.note}): drawn within {loop.low:g}-{loop.high:g} us around {loop.value:g} us "
            "(data/engine_overhead.csv)"]


def missing_terms(p: stepmodel.StepParams, method: str, draft: ModelDims | None) -> list[str]:
    """Each fitted mechanism this prediction uses that sits on a bound of its range, worded as the
    missing effect it stands for (stepmodel.missing_effects): every step's mechanisms, and the
    one that prices the drafter's pass over the verified tokens (stepmodel.verify_term), and for
    every draft model the one its family was calibrated by (verify_draft_model: a draft model
    priced from its config stands in for the study's draft-model rows, whose fit wanted it past
    its bound). The leave-one-model-out coverage that `te_validated` rests on was scored with them
    so; what they stand for is unpriced."""
    bound = stepmodel.missing_effects(p)
    terms = {stepmodel.verify_term(method, draft), stepmodel.verify_term(method, None)}
    return [bound[k] for k in stepmodel.FITTED
            if k in bound and (k not in stepmodel.VERIFY_TERMS or k in terms)]


def unpriced(dims: ModelDims, method: str, config=None) -> list[str]:
    """The SD loop's measured costs the step model does not price (steptables.unpriced_overheads)
    where they apply: each row was measured on a Gated DeltaNet hybrid (linear attention) with
    the method its condition names."""
    if "linear attention" not in _attention_kinds(dims, config):
        return []
    family = stepmodel.FAMILIES[method].upper()
    return [f"not priced: {float(r['value_us']) / 1e3:g} ms more per SD iteration measured on "
            f"{r['model']}, {r['model_kind']} ({r['condition']}; {r['source_url']})"
            for r in steptables.unpriced_overheads()
            if "Gated DeltaNet" in r["model_kind"] and family in r["condition"]]


def unvalidated(inside: bool, batches: list[int], cost_drawn: bool = True) -> list[str]:
    """Where the 95% intervals have not been shown to hold (docs/method.md, "Coverage on the
    study" and "Public measurements"): TE's were scored leave-one-model-out on the study's own
    configurations, served by vLLM, at batch 1 only (`te_validated`); the speedup's and the
    drawn draft cost's never against a measurement of them (the study publishes speedup shapes
    only), whatever the configuration."""
    what = "the speedup's and the draft cost's intervals" if cost_drawn else \
        "the speedup's interval"
    out = [f"not validated anywhere: {what}, never scored against the study's measurements (it "
           "publishes speedup shapes only; te_validated scores TE's interval at batch 1), and "
           "too few public measurements to show them to hold (docs/method.md, Public "
           "measurements)"]
    if not inside:
        out.append("not validated outside the study's calibration on vLLM: the public "
                   "measurements of such configurations are too few to show these intervals "
                   "hold, and at most of them TE's interval spans its whole range (docs/method.md, "
                   "Public measurements); read them as one step's physics, not a forecast")
    if max(batches) > 1:
        out.append("not validated past batch 1: the study publishes TE at batch 1 only, and the "
                   "fine-grained models' published peak at batch 1 is not reproduced")
    return out


LEGEND = ("TE: target efficiency, the target's decode step time over its verification step time "
          "(1: verifying K + 1 tokens costs one decode step)",
          "draft cost: c = K · T_drafter / T_decode, the drafter's time per SD step over one "
          "decode step of the target")


def calibration_line(res: dict) -> str:
    """The distance with what it says: inside the study's calibration, or outside it and how."""
    d, far = res["calibration_distance"], res.get("outside_calibration") or []
    if not d:
        return "0: inside the study's calibration"
    return f"{d}: outside the study's calibration ({'; '.join(far)})"


def clipped_interval(point: float, low: float, high: float, clipped: tuple[bool, bool]) -> str:
    """A median with its 95% interval, an end held at TE's clip bound (and the speedup's end drawn
    from it: stepmodel.summarise's te_low_clipped, te_high_clipped) said as "no information
    below" or "above" rather than the clip's number; the report's findings say it so too."""
    ends = [f"no information {side}" if c else f"{v:.2f}"
            for c, side, v in zip(clipped, ("below", "above"), (low, high))]
    return f"{point:.2f} [{ends[0]}, {ends[1]}]"


def _interval(res: dict, key: str, i: int, clipped: tuple[bool, bool]) -> str:
    return clipped_interval(res[key][i], res[f"{key}_low"][i], res[f"{key}_high"][i], clipped)


def shape_words(res: dict) -> str:
    """The shape as the pair intervals decide it (stepmodel.draw_shape), with the drawn curves'
    shares of each shape as information (stepmodel.CLIPPED: those with a TE at a clip bound,
    which count toward none): the stated shape's where one is decided, every share where none
    is."""
    shape = res["shape"]
    if shape not in stepmodel.SHAPES:  # no shape: one batch size, or one with information
        return shape
    if shape != "undecided":
        return (f"{shape} (the 95% intervals of the speedup's ratios between batch sizes decide "
                f"it; share of the drawn curves {res['shape_probability']:.2f})")
    shares = ", ".join(f"{k} {v:.2f}" for k, v in sorted(res["shape_shares"].items(),
                                                         key=lambda kv: -kv[1]))
    return f"undecided (the 95% intervals decide no shape; shares of the drawn curves: {shares})"


def human(res: dict) -> dict:
    """The prediction as people read it: the setup (the engine included), a table of batch size,
    TE and speedup with their 95% intervals, where TE's is validated (an end of TE's interval
    held at its clip bound says "no information below" or "above" in place of that bound, for TE
    and for the speedup's end drawn from it; a batch size whose TE interval spans its whole
    physical range says "no information"), the shape in words with the drawn curves' shares
    (shape_words), where SD pays, the caveats one per line and a legend of TE and draft cost."""
    rows = []
    for i, b in enumerate(res["batch_sizes"]):
        clipped = (res["te_low_clipped"][i], res["te_high_clipped"][i])
        row = {"batch": b, "TE": _interval(res, "te", i, clipped),
               "speedup": _interval(res, "speedup", i, clipped),
               "draft cost": f"{res['draft_cost'][i]:.3f}" + (
                   "" if res["draft_cost_low"] is None else
                   f" [{res['draft_cost_low'][i]:.3f}, {res['draft_cost_high'][i]:.3f}]"),
               "TE validated": "yes" if res["te_validated"][i] else "no"}
        if res["no_information"][i]:
            row["TE"] = row["speedup"] = "no information at this batch size"
        rows.append(row)
    for b in res.get("over_kv_cache", []):  # not predicted: the KV cache does not hold them
        rows.append({"batch": b, "TE": "not predicted: the KV cache holds "
                                       f"{res['kv_cache_sequences']} sequences",
                     "speedup": "-", "draft cost": "-", "TE validated": "no"})
    rows.sort(key=lambda r: r["batch"])
    out_shape = shape_words(res)
    kept = res.get("shape_batch_sizes", res["batch_sizes"])
    if len(kept) >= 2 and kept != res["batch_sizes"]:
        out_shape += f", over batch {', '.join(map(str, kept))} (the batch sizes with information)"
    out = {"model": res.get("model", ""), "hardware": res["hardware"], "tp": res["tp"],
           "precision": res["precision"], "method": f"{res['method']}, K = {res['k']}",
           "engine": res["engine"] + (" (the calibration's)"
                                      if res["engine"] == stepmodel.CALIBRATION_ENGINE else ""),
           "overlaps": res["overlaps"],
           "context": f"{res['context']:,} tokens per sequence (the KV cache attention reads)",
           "acceptance length": "{:g}".format(res["acceptance_length"][0])
           if res["acceptance_length"][0] == res["acceptance_length"][1]
           else "{:g} to {:g}".format(*res["acceptance_length"]),
           "calibration distance": calibration_line(res),
           "curve (median [95% interval])": rows, "shape": out_shape, "verdict": res["verdict"]}
    if res["caveats"]:
        out["caveats"] = list(res["caveats"])
    out["legend"] = list(LEGEND)
    return out
