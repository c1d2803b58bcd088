"""Rules capture, sweep_ar, sweep_sd and profile (one rule body, workflow/rules/traces.smk): one
real vLLM engine (a tiny model's directory, or a study model's download manifest); the rule's kind
(specmoe.kinds, an unknown one an error) picks the stage: a routing trace of every verification
window, a serving series over the sweep's batch sizes for every dataset of its model, or
torch.profiler over decode and verify passes."""

from pathlib import Path

from specmoe.contracts import run_rule
from specmoe.contracts.engines import EngineParams
from specmoe.kinds import kind
from specmoe.logs import logged, one
from specmoe.stages.engines import engine_inputs, with_job_runtime
from specmoe.stages.measure import profile_stage, sweep_series_stage
from specmoe.stages.traces import capture_job_stage

# vLLM spawns processes that re-import the main module: the stages run in __main__ only
if __name__ == "__main__" and kind(snakemake.rule).stage == "capture":
    # its contract: specmoe.contracts.engines.EngineParams; the engine's processes append to the
    # job's log, and its timeouts follow the job's runtime
    run_rule(snakemake, capture_job_stage, EngineParams)
elif __name__ == "__main__":
    rule, i, p, log = snakemake.rule, snakemake.input, snakemake.params, snakemake.log[0]
    job, stage = p.job, kind(rule).stage  # job: a run or a series (model, drafter, k, datasets)
    with logged(log, rule):
        target, drafter = engine_inputs(
            i.target, one(i.get("drafter")), p.method, p.gpu, f"{rule} of {job['model']}"
        )
        settings = with_job_runtime(p.settings, snakemake.resources.get("runtime"))
        # a downloaded dataset's prompt table is results/prompts/<dataset>.csv
        tables = {Path(f).stem: f for f in i.get("prompts", [])}
        common = dict(engine_log=log, prompting=p.prompting)
        if stage == "series":
            prompts = {ds: tables.get(ds, p.prompts) for ds in job["datasets"]}
            sweep_series_stage(target, drafter, job["k"], job, settings, prompts,
                               snakemake.output[0], **common)
        elif stage == "profile":
            profile_stage(target, drafter, job["k"], job, settings,
                          tables.get(job["dataset"], p.prompts), snakemake.output.json,
                          snakemake.output.traces, **common)
        else:
            raise ValueError(f"rule {rule}: no stage {stage!r} in this script")
