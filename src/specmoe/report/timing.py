"""Where a run's time went: its jobs' own Snakemake benchmark files (benchmarks/<output>.tsv, one
per job) summed by stage, with each engine job's start-up split off from the outputs that record it
(a sweep's `engine_startup_s`, an SD check's `sd_startup_s` + `plain_startup_s`, a capture trace's
`capture.startup_s`, a profile's `engine_startup_s`). A job whose output does not record its
engine's start stays whole in its stage, and the breakdown says so; nothing is estimated. A
declared job without a benchmark file, or a file that is not Snakemake's, is counted nowhere, and
the breakdown says how many and which.

Job times are each job's wall clock: jobs that ran side by side on several cores add up to more
than the run's own wall clock.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..errors import InputError
from ..paths import TOKENIZER, benchmark_of, model
from .words import and_join

# the stages in the order a run meets them
STAGES = ("train", "engine start", "serve", "capture", "profile", "analysis", "report", "inputs",
          "other")
# benchmarks/<folder>/... -> the stage of its jobs (traces: capture or synthetic, see _trace_stage)
FOLDERS = {"models": "train", "sd_check": "serve", "sweeps": "serve", "traces": "capture",
           "profiles": "profile", "overlap": "analysis", "ipf": "analysis",
           "acceptance": "analysis", "costmodel": "analysis", "predict": "analysis",
           "speedup": "analysis", "synth": "analysis", "report": "report",
           "downloads": "inputs", "prompts": "inputs"}
# the output a benchmark mirrors (specmoe.paths.benchmark_of drops its extension)
OUTPUT_EXT = {"sd_check": ".json", "sweeps": ".json", "traces": ".parquet", "profiles": ".json"}
ENGINE_JOBS = ("serve", "capture", "profile")  # the stages whose jobs start engines
# How far a recorded start may exceed its job's time and still be the job's own: a start is timed
# inside its job (time.perf_counter) and the job by Snakemake around it (time.time, rounded to
# 0.1 ms), two clocks NTP may slew apart by up to 0.05%; a start that far over is the whole job.
START_SLACK_S, START_SLACK = 0.01, 1e-3


@dataclass
class Breakdown:
    """Seconds and job counts by stage (engine start split out of serve and capture)."""
    seconds: dict[str, float] = field(default_factory=dict)
    jobs: dict[str, int] = field(default_factory=dict)
    engine_starts: int = 0          # engines whose start is recorded
    unsplit: list[str] = field(default_factory=list)  # engine jobs whose start is not recorded
    # engine jobs whose recorded start began after vLLM was imported (their start is too short)
    import_excluded: list[str] = field(default_factory=list)
    # the stage each job of unsplit and import_excluded is counted in, whole or with its import
    counted_in: dict[str, str] = field(default_factory=dict)
    # jobs not counted at all: declared ones without a benchmark file, and benchmark files that
    # are not Snakemake's (or are being written)
    missing: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    # the jobs counted in train (the tokenizer, trained models, untrained controls), as _job
    train_jobs: list[str] = field(default_factory=list)
    # the configuration's untrained controls (Config.controls), which tell the train jobs apart
    # (train_words); None: not given
    controls: tuple[str, ...] | None = None

    @property
    def total_s(self) -> float:
        return sum(self.seconds.values())

    @property
    def engine_jobs_s(self) -> float:
        """The wall time of the jobs that start engines (sweeps, SD checks, captures, profiles)."""
        return sum(self.seconds.get(s, 0.0) for s in ("engine start", *ENGINE_JOBS))

    def share(self, stage: str) -> float:
        return self.seconds.get(stage, 0.0) / self.total_s if self.total_s else math.nan

    @property
    def engine_start_share(self) -> float:
        """Engine start-up's share of the engine jobs' wall time."""
        e = self.engine_jobs_s
        return self.seconds.get("engine start", 0.0) / e if e else math.nan


def job_seconds(tsv: Path) -> float:
    """A job's wall time from its benchmark file (the sum over Snakemake's benchmark repeats)."""
    with open(tsv, newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    if not rows or "s" not in rows[0]:
        raise ValueError(f"{tsv}: not a Snakemake benchmark file (no 's' column)")
    s = sum(float(r["s"]) for r in rows)
    if not (math.isfinite(s) and s >= 0):
        raise ValueError(f"{tsv}: not a Snakemake benchmark file (its time {s} s)")
    return s


def recorded(folder: str, output: Path, declared: bool = False) -> dict | None:
    """What a job's output records about its engines, read once: a serving series', SD check's
    or profile's JSON as it is; a trace's {"capture": its capture metadata or None (a synthetic
    trace), "engine_start": its provenance's engine start}. None: no output, where it is not
    `declared` (a job's input, which Snakemake made: its absence is an error). An output that is
    there but unreadable, or not a record, is an InputError naming it: not "nothing recorded"."""
    if not output.is_file():
        if declared:
            raise InputError(f"{output}: no such file, though it is declared as an engine job's "
                             "record")
        return None
    try:
        if folder == "traces":
            from ..routing.trace import read_meta

            meta = read_meta(output)
            capture, prov = meta.get("capture"), meta.get("provenance") or {}
            if not (capture is None or isinstance(capture, dict)) or not isinstance(prov, dict):
                raise InputError(f"{output}: its capture or provenance metadata is not a record")
            return {"capture": capture, "engine_start": prov.get("engine_start")}
        from ..provenance import read_json

        rec = read_json(output)
    except InputError:
        raise
    except (OSError, ValueError) as exc:  # unreadable bytes, a file that cannot be opened
        raise InputError(f"{output}: unreadable ({str(exc).splitlines()[0]})") from None
    if not isinstance(rec, dict):
        raise InputError(f"{output}: not a JSON object but a {type(rec).__name__}")
    return rec


def engine_start_s(folder: str, rec: dict | None) -> float | None:
    """The engine start-up a job's record gives (seconds, every engine of the job), or None."""
    if rec is None:
        return None
    if folder == "traces":
        v = (rec.get("capture") or {}).get("startup_s")
        return None if v is None else float(v)
    if folder == "sweeps":
        v = rec.get("engine_startup_s")
        return None if v is None else float(v) * (1 if rec.get("engine_starts", 1) else 0)
    if folder == "sd_check":
        parts = [rec.get("sd_startup_s"), rec.get("plain_startup_s")]
        return None if None in parts else float(sum(parts))
    if folder == "profiles":  # two engines: decode and verify
        v = rec.get("engine_startup_s")
        return None if v is None else float(v)
    return None


def start_summaries(folder: str, rec: dict | None) -> list[dict]:
    """The engine-start summaries (runtime.startup.StartClock.summary) a job's record holds: a
    trace's provenance, a profile's decode and verify engines, a sweep's first engine."""
    if rec is None:
        return []
    found = (list((rec.get("engine_start") or {}).values()) if folder == "profiles"
             else [rec.get("engine_start")])
    return [e for e in found if isinstance(e, dict)]


def engines_started(folder: str, rec: dict | None, start: float) -> int:
    """The engines a job started: two for an SD check, a decode and a verify engine per engine
    start of a profile (its `engines`), a serving series' own count (an SD series starts its
    no-SD engine too), else one where it spent time starting."""
    if folder == "sd_check":
        return 2
    if folder == "profiles":
        try:
            return 2 * int(rec.get("engines", 1)) if rec is not None else 2
        except (TypeError, ValueError):  # not a count: one start of each kind
            return 2
    if folder == "sweeps" and rec is not None:
        try:
            return int(rec.get("engine_starts", int(start > 0)))
        except (TypeError, ValueError):  # not a count: counted as its start-up says
            pass
    return int(start > 0)


def _trace_stage(rec: dict | None) -> str:
    """A trace made by capture on an engine, or a synthetic one (analysis); a trace whose
    record is not read (not declared) is counted as a capture."""
    return "analysis" if rec is not None and rec.get("capture") is None else "capture"


def record_of(benchmark: str) -> str | None:
    """The output whose record of its engines (recorded) the breakdown reads for the job of a
    benchmark file (benchmarks/<folder>/<path>.tsv, specmoe.paths.benchmark_of): results/<folder>/
    <path> with its folder's extension (OUTPUT_EXT); None: a job whose output records none."""
    rel = PurePosixPath(benchmark).relative_to("benchmarks")
    folder = rel.parts[0] if len(rel.parts) > 1 else ""
    if folder not in OUTPUT_EXT:
        return None
    return str(PurePosixPath("results") / rel.with_suffix(OUTPUT_EXT[folder]))


def collect(root: str | Path = ".", since: float | None = None,
            benchmarks: Iterable[str] | None = None,
            records: Iterable[str] | None = None,
            controls: Iterable[str] | None = None) -> Breakdown:
    """The breakdown of the jobs whose benchmark files lie under root/benchmarks (those written
    at or after `since`, a time.time(), where given: one invocation's jobs; with `benchmarks`,
    paths under root, only these: the jobs a configuration declares, ReportIndexParams.
    benchmarks, for Snakemake leaves a job's previous benchmark file in place until the job
    ends and never removes those of the jobs a configuration dropped). Each engine job's start
    is read from its output (record_of); with `records`, paths under root, only from these (a
    job's inputs: rule report_index's, which declares them), the others' left unsplit. Declared
    benchmark files that are absent (Breakdown.missing) and files that are not Snakemake's
    benchmarks (Breakdown.unreadable) count nowhere, and the notes say so (uncounted). With
    `controls`, the configuration's untrained controls (Config.controls), the notes tell its
    trained models from its controls (train_words); without, a breakdown with a model's training
    in it has no notes (an error)."""
    root = Path(root)
    b = Breakdown(controls=None if controls is None else tuple(sorted(controls)))
    if benchmarks is None:
        found = sorted((root / "benchmarks").rglob("*.tsv"))
    else:
        found = [root / p for p in sorted(set(benchmarks))]
        b.missing = [_job(root, p) for p in found if not p.is_file()]
        found = [p for p in found if p.is_file()]
    readable = None if records is None else {str(PurePosixPath(r)) for r in records}
    for tsv in found:
        if since is not None and tsv.stat().st_mtime < since:
            continue
        rel = tsv.relative_to(root / "benchmarks")
        folder = rel.parts[0] if len(rel.parts) > 1 else ""
        stage = FOLDERS.get(folder, "other")
        try:
            s = job_seconds(tsv)
        except (ValueError, KeyError, OSError):
            # a benchmark being written or not Snakemake's: not a job's time (the notes say so)
            b.unreadable.append(str(rel.with_suffix("")))
            continue
        output = record_of(tsv.relative_to(root).as_posix())
        try:
            rec = (recorded(folder, root / output, declared=readable is not None)
                   if output is not None and (readable is None or output in readable) else None)
        except InputError as exc:
            raise InputError(f"{exc} (the engine record of {tsv.relative_to(root).as_posix()}, "
                             "which the time breakdown reads)") from None
        if folder == "traces":
            stage = _trace_stage(rec)
        if stage in ENGINE_JOBS:
            start = _start(folder, rec, output, tsv.relative_to(root).as_posix(), s)
            job = str(rel.with_suffix(""))
            if start is None:
                b.unsplit.append(job)
                b.counted_in[job] = stage
            else:
                # one import per process: a job's later engines find vLLM imported by its first
                flags = [e.get("import_included") for e in start_summaries(folder, rec)]
                if False in flags and True not in flags:
                    b.import_excluded.append(job)
                    b.counted_in[job] = stage
                b.seconds["engine start"] = b.seconds.get("engine start", 0.0) + start
                b.engine_starts += engines_started(folder, rec, start)
                s -= start
        b.seconds[stage] = b.seconds.get(stage, 0.0) + s
        b.jobs[stage] = b.jobs.get(stage, 0) + 1
        if stage == "train":
            b.train_jobs.append(str(rel.with_suffix("")))
    return b


def _start(folder: str, rec: dict | None, output: str | None, bench: str,
           s: float) -> float | None:
    """The engine start an engine job's record gives (engine_start_s), checked against its job's
    time `s` from its benchmark file `bench`: a start is timed inside its job, so one that is not
    a number, negative, or longer than the job (beyond START_SLACK) is a wrong record or a
    benchmark file of another run, an InputError naming both; within the slack it is the whole
    job."""
    try:
        start = engine_start_s(folder, rec)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{output}: its engine start is not a number ({exc}); its job's "
                         f"benchmark file is {bench}") from None
    if start is None:
        return None
    what = ("not a finite number of seconds" if not math.isfinite(start) else
            "negative" if start < 0 else
            f"longer than its job's {s:g} s" if start > s * (1 + START_SLACK) + START_SLACK_S
            else None)
    if what:
        raise InputError(f"{output}: its engine start ({start:g} s) is {what} (its job's "
                         f"benchmark file {bench}): the record or the benchmark file is wrong, "
                         "or they are of different runs")
    return min(start, s)


def _job(root: Path, tsv: Path) -> str:
    """A job as the notes name it: its benchmark file's path under benchmarks/, no extension."""
    try:
        return str(tsv.relative_to(root / "benchmarks").with_suffix(""))
    except ValueError:  # a declared path outside benchmarks/
        return str(tsv.relative_to(root))


def _named(jobs: list[str]) -> str:
    """The first three of `jobs` and how many more."""
    return ", ".join(jobs[:3]) + (f" and {len(jobs) - 3} more" if len(jobs) > 3 else "")


def _clock(s: float) -> str:
    m, sec = divmod(round(s), 60)
    return f"{m} min {sec:02d} s" if m else f"{s:.1f} s"


def rows(b: Breakdown) -> list[tuple[str, str, str, str]]:
    """(stage, jobs, time, share of all jobs' time) per stage that has time, in run order."""
    out = []
    for stage in STAGES:
        if stage not in b.seconds:
            continue
        jobs = ("(in the jobs below)" if stage == "engine start"
                else str(b.jobs.get(stage, 0)))
        out.append((stage, jobs, _clock(b.seconds[stage]), f"{100 * b.share(stage):.0f}%"))
    return out


# what the engine jobs of each stage are, in words
ENGINE_JOB_WORDS = {"serve": "sweeps, SD checks", "capture": "captures", "profile": "profiles"}


def _stages_of(b: Breakdown, jobs: list[str]) -> str:
    """The stages these jobs are counted in (Breakdown.counted_in), in run order."""
    return and_join([s for s in STAGES if s in {b.counted_in[j] for j in jobs}])


def notes(b: Breakdown) -> list[str]:
    """What the numbers are and what they cannot split, in sentences, of the stages there are."""
    out = []
    if "engine start" in b.seconds:
        jobs = ", ".join(w for s, w in ENGINE_JOB_WORDS.items() if s in b.seconds)
        imported = ("vLLM's import included" if not b.import_excluded else
                    f"vLLM's import included but in the {len(b.import_excluded)} job(s) "
                    "named too short below")
        out.append(f"Engine start-up ({b.engine_starts} engines, each from its start, "
                   f"{imported}, until it was ready): {_clock(b.seconds['engine start'])}, "
                   f"{100 * b.engine_start_share:.0f}% of the engine jobs' time ({jobs}).")
    if b.unsplit:
        out.append(f"Not split: {len(b.unsplit)} engine job(s) whose output records no engine "
                   f"start ({_named(b.unsplit)}); their start-up is counted in "
                   f"{_stages_of(b, b.unsplit)}.")
    if b.import_excluded:
        out.append(f"Too short: {len(b.import_excluded)} engine job(s) whose recorded start "
                   f"began after vLLM was imported ({_named(b.import_excluded)}); their import "
                   f"is counted in {_stages_of(b, b.import_excluded)}.")
    out += uncounted(b)
    said = []
    if "train" in b.seconds:
        said.append(("train", train_words(b.train_jobs, b.controls)))
    if "serve" in b.seconds:
        said.append(("serve", "the sweeps and SD checks"
                     + (" once their engines are up" if "engine start" in b.seconds else "")
                     + (" (whole where their start is not split)"
                        if any(b.counted_in.get(j) == "serve" for j in b.unsplit) else "")))
    jobs = ("each job's time runs from its script's start (imports included) to its end, and "
            "jobs run side by side add up to more than the wall clock.")
    out.append(f"{said[0][0].capitalize()} includes {said[0][1]}"
               + "".join(f", {stage} {what}" for stage, what in said[1:]) + "; " + jobs
               if said else jobs[0].upper() + jobs[1:])
    return out


def model_job(path: str) -> str:
    """The job writing a checkpoint (specmoe.paths.model, TOKENIZER) as the notes name it
    (_job): its benchmark file's path under benchmarks/, no extension."""
    return str(PurePosixPath(benchmark_of(path)).relative_to("benchmarks").with_suffix(""))


def train_words(jobs: list[str], controls: Iterable[str] | None) -> str:
    """What the train stage's jobs (Breakdown.train_jobs) are, in words: the tokenizer, trained
    models and untrained controls, each only where its jobs ran (a rerun that retrained one model
    counted that model alone). controls: the configuration's untrained controls (Config.
    controls), by name: a trained model or drafter may be named "...-random" too, so a job is a
    control where the configuration makes it one, not by its name's end. None: not known, a
    ValueError where a model's job is among `jobs`."""
    tokenizer = model_job(TOKENIZER)
    models = [j for j in jobs if j != tokenizer]
    if models and controls is None:
        raise ValueError(f"the train jobs {', '.join(models)} cannot be told apart as trained "
                         "models or untrained controls without the configuration's controls")
    untrained = {model_job(model(c)) for c in controls or ()}
    n_controls = sum(j in untrained for j in models)
    trained = len(models) - n_controls
    return and_join((["the tokenizer"] if tokenizer in jobs else [])
                    + ([f"{trained} trained model{'s' * (trained != 1)}"] if trained else [])
                    + ([f"{n_controls} untrained control{'s' * (n_controls != 1)}"]
                       if n_controls else []))


def uncounted(b: Breakdown) -> list[str]:
    """The jobs the breakdown could not count, in sentences: declared jobs without a benchmark
    file, benchmark files it could not read."""
    out = []
    if b.missing:
        out.append(f"Not counted: {len(b.missing)} declared job(s) left no benchmark file "
                   f"({_named(b.missing)}): their time is not in the breakdown.")
    if b.unreadable:
        out.append(f"Not counted: {len(b.unreadable)} benchmark file(s) unreadable as "
                   f"Snakemake's (being written, or not a benchmark: {_named(b.unreadable)}); "
                   "their time is not in the breakdown.")
    return out


def text(b: Breakdown, wall_s: float | None = None) -> str:
    """The breakdown as the end of a run prints it."""
    if not b.seconds:
        return "\n  ".join(["specmoe: no job of this run wrote a benchmark file (nothing ran)."
                            if not (b.missing or b.unreadable) else
                            "specmoe: no job of this run left a readable benchmark file.",
                            *uncounted(b)])
    head = (f"specmoe: where the time went ({sum(b.jobs.values())} jobs, "
            f"{_clock(b.total_s)} of job time"
            + (f", {_clock(wall_s)} of wall clock" if wall_s is not None else "") + "):")
    width = max(len(s) for s in b.seconds)
    lines = [head] + [f"  {stage:<{width}}  {jobs:>3} job{'s' if jobs != '1' else ' '}  {t:>14}  {share:>4}"
                      if jobs.isdigit() else f"  {stage:<{width}}  {'':>8}  {t:>14}  {share:>4}"
                      for stage, jobs, t, share in rows(b)]
    return "\n".join(lines + [f"  {n}" for n in notes(b)])


def markdown(b: Breakdown) -> list[str]:
    """The breakdown as a table and notes for the report's provenance section."""
    if not b.seconds:
        return ["No job of this run left a readable benchmark file (benchmarks/), so its time "
                "cannot be broken down.", "", *uncounted(b), *([""] if uncounted(b) else [])]
    lines = ["| stage | jobs | time | share of job time |", "|---|---:|---:|---:|"]
    lines += [f"| {s} | {j if j.isdigit() else '–'} | {t} | {sh} |" for s, j, t, sh in rows(b)]
    return lines + ["", *notes(b), ""]
