"""Rules capture, sweep_ar, sweep_sd and profile (one rule body, workflow/rules/traces.smk): one
real vLLM engine (a tiny model's directory, or a study model's download manifest). The rule's
record (specmoe.contracts.engines.engine_record, by its name; an unknown kind an error) names its
stage: a routing trace of every verification window, a serving series over the sweep's batch sizes
for every dataset of its model, or torch.profiler over decode and verify passes."""

from specmoe.contracts import run_rule
from specmoe.contracts.engines import engine_record
from specmoe.stages.measure import profile_stage, sweep_stage
from specmoe.stages.traces import capture_stage

STAGES = {f"{s.__module__}.{s.__name__}": s for s in (capture_stage, sweep_stage, profile_stage)}

# vLLM spawns processes that re-import the main module: the stage runs in __main__ only
if __name__ == "__main__":
    record = engine_record(snakemake.rule)
    # the engine's processes append to the job's log; its timeouts follow the job's runtime
    run_rule(snakemake, STAGES[record.STAGE], record)
