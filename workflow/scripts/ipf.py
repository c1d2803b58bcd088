"""Rule ipf (its contract: specmoe.contracts.analysis.IpfParams)."""

from specmoe.contracts import run_rule
from specmoe.contracts.analysis import IpfParams
from specmoe.stages.analysis import ipf_stage

run_rule(snakemake, ipf_stage, IpfParams)
