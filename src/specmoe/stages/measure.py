"""The measured side: serving series (rules sweep_ar, sweep_sd) and kernel profiles (rule
profile; their contracts: specmoe.contracts.engines) on a real engine (torch / vLLM, the `cpu`
or `gpu` extra)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError, SpecmoeError
from ..measured.arms import PAIR_ORDER
from ..measured.profiling import prompts_needed
from ..sources import prompts as prompt_table
from ..provenance import atomic_dir, hardware, provenance, write_json
from .engines import (engine_label, engine_opts, engine_prompts, model_identity, model_provenance,
                      prompt_tables, served, setting, with_job_runtime)

logger = logging.getLogger("specmoe")
# how a series' engine ran, as each point records it (engine_runs)
RUN_FIELDS = ("model_runner", "engine_mode")


@dataclass(frozen=True)
class SweepSettings:
    """What a serving series measures, typed once from its job's settings (the sweep section as
    the schema filled it, specmoe.config.Config.job_settings): the schedule's (batch size, prompts)
    points, the tokens each request generates, the warm-up requests before a batch size is first
    measured, the measurements of each point, the engine's start-up timeout in seconds and the
    points of each dataset that has its own (a max_batch: `dataset_schedules`, resolved by
    Config.sweep_schedule). The engine's own settings (dtype, context, engine arguments) stay in
    the section (engine_opts)."""
    schedule: tuple[tuple[int, int], ...]
    output_len: int
    warmups: int
    repeats: int
    startup_timeout_s: float
    dataset_schedules: dict = field(default_factory=dict)

    def points(self, dataset: str) -> tuple[tuple[int, int], ...]:
        """The (batch size, prompts) points the series measures on `dataset`."""
        return self.dataset_schedules.get(dataset, self.schedule)

    @classmethod
    def of(cls, section: dict) -> "SweepSettings":
        """The settings of a sweep section; one missing or not a number is refused in one line."""
        def points(schedule):
            return tuple((int(p["batch"]), int(p["prompts"])) for p in schedule)

        try:
            return cls(schedule=points(section["schedule"]),
                       output_len=int(section["output_len"]), warmups=int(section["warmups"]),
                       repeats=int(section["repeats"]),
                       startup_timeout_s=float(section["startup_timeout_s"]),
                       dataset_schedules={ds: points(pts) for ds, pts in
                                          (section.get("dataset_schedules") or {}).items()})
        except KeyError as exc:
            raise InputError(f"sweep settings: no {exc.args[0]} (they have "
                             f"{', '.join(sorted(section))})") from None
        except (TypeError, ValueError) as exc:
            raise InputError(f"sweep settings: not a number: {exc}") from None


def sweep_stage(inputs, outputs, params, log: str | None = None, runtime=None) -> None:
    """Rules sweep_sd and sweep_ar (their contracts: specmoe.contracts.engines.SweepSdParams,
    SweepArParams): one serving series, one engine (inputs.target, with SD where inputs.drafter
    is given) over the batch sizes of the schedule (params.settings; a dataset with a max_batch
    up to it), for each dataset of params.job["datasets"] in turn (datasets do not change the
    engine, so they share one start-up), each over its downloaded prompt table among
    inputs.prompts, else the tiny models' (engines.tiny_prompts).

    Points go to `<outputs.json without .json>.points/<dataset>/b<B>.json` as they are measured
    (resume: see serving.run_series); outputs.json lists them once the series is complete. log:
    the job's log, which the engine's processes append to; runtime: the job's runtime in minutes
    (the engine's timeouts follow it).
    """
    import time

    from ..runtime.capture import vllm_version
    from ..runtime.engine import check_inputs, device, engine_kwargs, resolved_dtypes
    from ..runtime.serving import arm_order, run_series

    series = params.job
    k = series["k"]
    target_dir, drafter_dir = served(inputs, params)
    sweep_cfg = with_job_runtime(params.settings, runtime)
    prompts_source = prompt_tables(inputs, params, series["datasets"])
    out, prompting = outputs.json, params.prompting
    check_inputs(target_dir, drafter_dir, k)
    settings = SweepSettings.of(sweep_cfg)
    sched = {ds: list(settings.points(ds)) for ds in series["datasets"]}
    largest = max(b for points in sched.values() for b, _ in points)
    # on a GPU both arms of an SD series capture CUDA graphs for verify steps at every batch
    # (cudagraphs.cuda_graph_config): the two engines differ in SD alone; whether the series is a
    # separate draft model's (its method, none for a tiny drafter; a drafter served alone, rule
    # sweep_ar's only engines (Config.served), is one) chooses their model runner there
    # (engine_kwargs draft_model_series)
    draft_model_series = params.method in (None, "draft_model")
    engine = engine_kwargs(target_dir, drafter_dir, k, max_num_seqs=largest, graph_k=k,
                           draft_model_series=draft_model_series,
                           draft_alone=drafter_dir is None,
                           **engine_opts(sweep_cfg))
    # the tokens kept free for drafts: the same in the model's series with and without SD, so
    # that they measure the same prompts (Config.draft_slack, which the series' contract sets)
    if "draft_slack" not in (prompting or {}):
        raise InputError(f"sweep of {series['model']}: its prompting names no draft_slack (the "
                         "tokens kept free for drafts, which a series' contract sets)")
    reserved = settings.output_len + int(prompting["draft_slack"])
    # one prompt set for every point: the smallest point's prompts; larger points cycle through it
    texts, fit = {}, {}
    for ds in series["datasets"]:
        rows, info = engine_prompts(prompt_table.load(prompts_source[ds], [ds]), engine,
                                    prompting, reserved, f"sweep of {series['model']}")
        fit.update(info)
        rows = prompt_table.schedule(rows, max(n for _, n in sched[ds]),
                                     set_size=min(n for _, n in sched[ds]))
        texts[ds] = [r.text for r in rows]
    # a point's key: what it was measured on, and the GPUs' model where there are any (another
    # GPU measures every point again)
    gpus = sorted(set(hardware().get("gpus", [])))
    key_base = {"engine": {n: v for n, v in engine.items() if n != "model"},
                "target": model_identity(target_dir),
                "drafter": model_identity(drafter_dir) if drafter_dir else None,
                "vllm": vllm_version(), "device": device(), **({"gpus": gpus} if gpus else {})}
    # the settings, not the timeouts the job's runtime sets (a SLURM retry doubles it)
    prov = provenance({"series": series, "sweep": params.settings, "prompts": prompts_source,
                       "prompting": prompting},
                      model=model_provenance(series["model"], target_dir),
                      stage="sweep", engine=engine_label(), timed=True)
    # an SD series measures its target without SD as well, in the same job: on a CPU on a second
    # engine beside it, point by point in alternating order, so that the speedup's two arms
    # share the machine's drift; on a GPU, where two engines do not fit, one engine after the
    # other (serving.arm_order, run_series)
    paired, order = None, arm_order(key_base["device"])
    if drafter_dir:
        plain = engine_kwargs(target_dir, None, None, max_num_seqs=largest,
                              graph_k=k, draft_model_series=draft_model_series,
                              **engine_opts(sweep_cfg))
        paired = (plain, {**key_base, "engine": {n: v for n, v in plain.items() if n != "model"},
                          "drafter": None},
                  Path(str(out).removesuffix(".json") + ".nosd.points"))
    t0 = time.perf_counter()
    res = run_series(engine, str(target_dir), texts, sched,
                     settings.output_len, settings.warmups,
                     Path(str(out).removesuffix(".json") + ".points"), key_base, prov,
                     log_path=log,
                     startup_timeout=settings.startup_timeout_s,
                     repeats=settings.repeats, paired=paired, order=order)
    points, plain_points = res if paired else (res, None)
    measured = [p for pts in points.values() for p in pts if not p["reused"]]
    # the first point each engine measured: its start (none where an arm reused every point)
    starts = [next((p for pts in arm.values() for p in pts if not p["reused"]), None)
              for arm in (points, plain_points or {})]
    starts = [p for p in starts if p is not None]
    # the dtype each model ran in, as vLLM resolved the configured one (auto: from the
    # checkpoint's config, on this platform); the draft inside SD runs in the target's
    # (resolved_dtypes). Rule speedup compares a drafter served alone with its SD series' draft
    # by them (analysis.drafter_like_sd): the configured "auto" of both says nothing of either
    ran_in = resolved_dtypes(engine)
    datasets = {ds: {"points": pts, "measured": sum(not p["reused"] for p in pts)}
                for ds, pts in points.items()}
    for ds, pts in (plain_points or {}).items():
        datasets[ds]["paired_no_sd"] = {"points": pts,
                                        "measured": sum(not p["reused"] for p in pts)}
    write_json(out, {"series": series, "engine": key_base["engine"],
                     "resolved_dtype": ran_in["target"], "draft_resolved_dtype": ran_in["draft"],
                     # its model runner and engine mode, as its points record them
                     **engine_runs(points),
                     "datasets": datasets,
                     # how the no-SD points beside the SD ones were taken (None: not at all)
                     "paired_no_sd": {"engine": paired[1]["engine"], "arm_order": order,
                                      "resolved_dtype": resolved_dtypes(plain)["target"],
                                      "order": PAIR_ORDER[order],
                                      **engine_runs(plain_points)} if paired else None,
                     "prompting": fit,
                     "engine_starts": len(starts),
                     # the job's time in start-ups: side by side they overlap, in blocks they add
                     "engine_startup_s": (sum(p["engine_startup_s"] for p in starts)
                                          if order == "blocks" else
                                          max((p["engine_startup_s"] for p in starts),
                                              default=0.0)),
                     # its phases (runtime.startup), None when no engine started
                     "engine_start": measured[0].get("engine_start") if measured else None,
                     "wall_s": time.perf_counter() - t0}, prov)


def engine_runs(arm: dict) -> dict:
    """How the engine of a series' arm ({dataset: points}) ran: {"model_runner", "engine_mode"}
    as its points record their server's (serving._measure; a profile's names and values,
    runtime.kernelprof.engine_runs), None where no point does (points from before they did).
    Points that differ are an error: the arm's key (its engine's arguments and environment,
    vLLM's version) is every point's."""
    seen = {json.dumps({n: p.get(n) for n in RUN_FIELDS}, sort_keys=True)
            for pts in arm.values() for p in pts if p.get("model_runner") is not None}
    if len(seen) > 1:
        raise SpecmoeError(f"the points of one engine ran in different ways: {sorted(seen)}")
    return json.loads(seen.pop()) if seen else dict.fromkeys(RUN_FIELDS)


# the provenance file of a profile's traces folder (beside its engine starts' folders)
TRACES_PROVENANCE = "provenance.json"


def profile_stage(inputs, outputs, params, log: str | None = None, runtime=None) -> None:
    """Rule profile (its contract: specmoe.contracts.engines.ProfileParams): kernel and op
    profiles (kernelprof) of the target's (inputs.target) decode and verify forward passes with
    its drafter (inputs.drafter), over its dataset's prompts (its downloaded table among
    inputs.prompts, else the tiny models'), into outputs.json (the kernel table) and
    outputs.traces (the profiler's traces). log and runtime: as sweep_stage's."""
    import time

    from ..runtime.kernelprof import profile_model

    run = params.job
    k = run["k"]
    target_dir, drafter_dir = served(inputs, params)
    prof_cfg = with_job_runtime(params.settings, runtime)
    prompts_source = prompt_tables(inputs, params, [run["dataset"]])[run["dataset"]]
    out, trace_dir, prompting = outputs.json, outputs.traces, params.prompting
    opts = engine_opts(prof_cfg)
    rows, fit = engine_prompts(prompt_table.load(prompts_source, [run["dataset"]]),
                               {"model": str(target_dir), **opts["extra"],
                                "max_model_len": opts["extra"].get("max_model_len",
                                                                   opts["max_model_len"])},
                               prompting, int(prof_cfg["max_tokens"]) + k + 1,
                               f"profile of {run['model']}")
    batches = [int(b) for b in prof_cfg["batch_sizes"]]
    # a prompt set of its own for each decode/verify pair of engine starts (the starts are the
    # intervals' independent unit: kernelprof.profile_calls, which refuses a set too small)
    rows = prompt_table.schedule(rows, prompts_needed(prof_cfg["engines"], batches))
    opts["extra"].setdefault("enforce_eager", True)  # kernels launched one by one, inside the ranges
    t0 = time.perf_counter()
    # the traces folder is built under a temporary name and takes its own name only whole, its
    # provenance inside it: an engine start that fails leaves no partly filled folder
    with atomic_dir(trace_dir) as tmp:
        res = profile_model(target_dir, drafter_dir, k, batches, [r.text for r in rows],
                            int(prof_cfg["max_tokens"]), opts, tmp,
                            engines=int(prof_cfg["engines"]), log_path=log,
                            timeout=float(setting(prof_cfg, "timeout_s")))
        prov = provenance({"run": run, "profiling": params.settings, "prompts": prompts_source,
                           "prompting": prompting},
                          model=model_provenance(run["model"], target_dir), stage="profile",
                          engine=engine_label(), timed=True)
        write_json(tmp / TRACES_PROVENANCE, {"run": run, "kernel_table": str(out)}, prov)
    write_json(out, {"run": run, **res, "prompting": fit, "wall_s": time.perf_counter() - t0},
               prov)
