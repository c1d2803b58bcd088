"""Rules capture, sweep_ar, sweep_sd and profile (one rule body, workflow/rules/traces.smk): one
real vLLM engine (a tiny model's directory, or a study model's download manifest). Each rule's
record (specmoe.contracts.engines.engine_record, by its name; an unknown kind an error) names its
stage: a routing trace of every verification window, a serving series over the sweep's batch sizes
for every dataset of its model, or torch.profiler over decode and verify passes."""

from specmoe.contracts import run_rule
from specmoe.contracts.engines import engine_record, engine_stage

# vLLM spawns processes that re-import the main module: the stage runs in __main__ only
if __name__ == "__main__":
    record = engine_record(snakemake.rule)
    # the engine's processes append to the job's log; its timeouts follow the job's runtime
    run_rule(snakemake, engine_stage(record), record)
