"""Rule capture_control (its contract: specmoe.contracts.engines.CaptureControlParams)."""

from specmoe.contracts import run_rule
from specmoe.contracts.engines import CaptureControlParams
from specmoe.stages.traces import control_capture_stage

if __name__ == "__main__":  # vLLM spawns processes that re-import the main module
    run_rule(snakemake, control_capture_stage, CaptureControlParams)
