"""Every job of a workflow's DAG as JSON lines (rule, wildcards, inputs, outputs, log, benchmark,
params, threads, priority, resources), sorted: what a refactor of the rules must keep. Run it in a
workflow's directory before and after and diff the two files; it runs no job and writes nothing
but the lines (the DAG is built as for a dry run).

    PYTHONPATH=src python bench/dag_jobs.py [--configfile FILE] [TARGET ...] > jobs.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from snakemake.api import SnakemakeApi
from snakemake.settings.types import (ConfigSettings, DAGSettings, OutputSettings,
                                      ResourceSettings, StorageSettings)


def plain(v):
    """A value as JSON can hold it (Snakemake's lists and files as plain lists and strings)."""
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, (int, float, bool)) or v is None:
        return v
    return str(v)


def job_record(job) -> dict:
    resources = {k: v for k, v in job.resources.items() if not k.startswith("_")}
    return {"rule": job.rule.name, "wildcards": plain(dict(job.wildcards.items())),
            "output": sorted(map(str, job.output)), "input": sorted(map(str, job.input)),
            "log": sorted(map(str, job.log)), "benchmark": str(job.benchmark or ""),
            "params": plain(dict(job.params.items())), "threads": job.threads,
            "priority": job.rule.expand_priority(job.wildcards_dict, job.input, job.attempt),
            "resources": plain(resources)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("targets", nargs="*")
    ap.add_argument("--configfile", type=Path, action="append", default=[])
    ap.add_argument("--cores", type=int, default=2)
    args = ap.parse_args(argv)
    with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
        wapi = api.workflow(resource_settings=ResourceSettings(cores=args.cores),
                            config_settings=ConfigSettings(configfiles=args.configfile),
                            storage_settings=StorageSettings(), snakefile=Path("Snakefile"),
                            workdir=Path.cwd())
        dapi = wapi.dag(dag_settings=DAGSettings(targets=set(args.targets), forceall=True))
        wf = dapi.workflow_api._workflow
        wf._prepare_dag(forceall=True, ignore_incomplete=True, lock_warn_only=True, nolock=True)
        wf._build_dag()
        lines = sorted(json.dumps(job_record(j), sort_keys=True) for j in wf.dag.jobs)
    sys.stdout.write("".join(line + "\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
