"""Each rule's contract as one record: what a job of the rule reads, writes and depends on.

A rule that runs a stage has here, in the module of its rules file (workflow/rules/<name>.smk:
specmoe.contracts.<name>), one frozen dataclass, its parameters record:

- its fields are the job's parameters (besides its files), typed; `from_config(cfg, wildcards)`
  builds them from the resolved configuration (specmoe.config.Config) and the job's wildcards, so
  the keys a rule reads of the configuration are named in one place; a field marked `wildcard()`
  is one of the job's wildcards, which its output path already names (not a Snakemake param); one
  marked `untracked()` is a Snakemake param that reruns nothing (untracked);
- `INPUTS` and `OUTPUTS` name the rule's inputs and outputs, which the stage reads by those names
  (the adapter refuses a rule that names others);
- `STAGE` names the stage function (specmoe.stages), which takes (inputs, outputs, params) by name.

The rule states `params: **params_of(XParams)` (workflow/rules/common.smk: one Snakemake param per
field, so that a job reruns when one of them changes) and its script is the same small adapter
everywhere, `run_rule(snakemake, stage, XParams)`. This package imports neither Snakemake nor the
stages (it is read when the workflow is parsed, where the stages' libraries would cost seconds).
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Mapping
from dataclasses import field, fields

from ..logs import one  # noqa: F401 (the stages take it from here: an input that may be absent)


def canonical(obj):
    """A config value with every mapping's keys sorted: a job's params compare equal whatever
    order the configuration file wrote them in."""
    if isinstance(obj, dict):
        return {k: canonical(obj[k]) for k in sorted(obj)}
    if isinstance(obj, list):
        return [canonical(v) for v in obj]
    return obj


def run_of(w) -> dict:
    """A run's identity from a job's wildcards (specmoe.runs.Run) as its fields, as a job's params
    and its results hold them."""
    from ..runs import Run

    return Run.of(w).as_dict()


class Named(Mapping):
    """A rule's named inputs or outputs as a plain mapping with attribute access (inputs.sd); a
    name the rule does not give is an AttributeError naming the ones it gives."""

    def __init__(self, items):
        self._items = {str(k): v for k, v in dict(items).items()}

    def __getitem__(self, name):
        return self._items[name]

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._items[name]
        except KeyError:
            raise AttributeError(f"no file named {name!r} (named: "
                                 f"{', '.join(self._items) or 'none'})") from None

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)

    def __repr__(self):
        return f"Named({self._items!r})"


def wildcard(convert=str):
    """A record field that is the job's wildcard of the same name, converted by `convert`. The
    job's output path names it, so it is no Snakemake param (another value is another job, not a
    rerun of this one); the adapter takes it from the job's wildcards."""
    return field(metadata={"wildcard": convert})


def untracked(**default):
    """A record field that is a Snakemake param of the job but no key of its reruns: a value the
    stage reads that another field already stands for in the job's params (a download's
    configured revision, which its tracked revision names where it holds what the configured
    one names). Its param function takes the job's output, so Snakemake counts it as derived
    from the job's files and leaves it out of the params it records and compares. default: a
    `default` or `default_factory` of the field, where it has one."""
    return field(metadata={"untracked": True}, **default)


def param_fields(record) -> list:
    """The fields of a record that are Snakemake params (all but its wildcards)."""
    return [f for f in fields(record) if "wildcard" not in f.metadata]


def snakemake_params(record, cfg, **extra) -> dict:
    """A record's fields as Snakemake params (its wildcards aside), each a function of the job's
    wildcards (the record built once per job); extra: further arguments of its `from_config`.
    Each value is canonical: Snakemake compares params by their repr, which holds a mapping's
    keys in the order the configuration file wrote them."""
    built: dict = {}

    def get(name):
        def value(wildcards):
            key = tuple(sorted(dict(wildcards.items()).items()))
            if key not in built:
                built[key] = record.from_config(cfg, wildcards, **extra)
            return canonical(getattr(built[key], name))

        return value

    def derived(name):  # an untracked field's: the `output` argument makes it no rerun key
        def value(wildcards, output):
            return get(name)(wildcards)

        return value

    return {f.name: (derived if "untracked" in f.metadata else get)(f.name)
            for f in param_fields(record)}


def plain_files(value):
    """A named input or output as a plain path (a string) or a list of paths."""
    return str(value) if isinstance(value, str) else [str(f) for f in value]


def named(files, declared, what: str, rule: str) -> Named:
    """A job's inputs or outputs by name (plain paths), checked against the names its record
    declares: a name it does not declare is an error (one it declares may be absent: a stage
    reads an optional one with `get`)."""
    got = Named({k: plain_files(v) for k, v in files.items()})
    if set(got) - set(declared):
        raise ValueError(f"rule {rule}: its {what} are named {', '.join(got) or 'nothing'}; its "
                         f"record declares {', '.join(declared) or 'none'}")
    return got


def stage_args(smk, record) -> dict:
    """A Snakemake job's (inputs, outputs, params) for the stage of `record`, by name."""
    rule = smk.rule
    params = record(**{f.name: getattr(smk.params, f.name) for f in param_fields(record)},
                    **{f.name: f.metadata["wildcard"](getattr(smk.wildcards, f.name))
                       for f in fields(record) if "wildcard" in f.metadata})
    return {"inputs": named(smk.input, record.INPUTS, "inputs", rule),
            "outputs": named(smk.output, record.OUTPUTS, "outputs", rule),
            "params": params}


def job_facts(smk, stage) -> dict:
    """What a stage may take of its job besides its contract, where its signature names it:
    threads (how many cores its numerical passes may use), log (the job's log, which an engine's
    processes append to) and runtime (the job's runtime in minutes; an engine's timeouts follow
    it). None of them is a parameter of its results."""
    import inspect

    facts = {"threads": lambda: smk.threads, "log": lambda: smk.log[0],
             "runtime": lambda: smk.resources.get("runtime")}
    wanted = inspect.signature(stage).parameters
    return {name: get() for name, get in facts.items() if name in wanted}


class Terminated(SystemExit):
    """A job stopped by a signal (stopped_by_signals): its exit code is the shell's for the
    signal, 128 + its number."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.signal = signal.Signals(signum)


# the signals that stop a job and that a job cleans up after: a scheduler cancelling it (Snakemake,
# SLURM's scancel, `kill`: SIGTERM) and a closed terminal (SIGHUP)
STOPPING = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def stopped_by_signals():
    """While the block runs, SIGTERM and SIGHUP raise Terminated (a SystemExit) in this, the
    main, thread, as Ctrl-C raises KeyboardInterrupt, so that the job's cleanup runs: its
    `finally` blocks and context managers, an engine server's among them (serving.Server runs
    in a session of its own, which a signal to the job's process group does not reach, and
    which the signal's default action, ending the job at once, left running with its memory,
    its port and its GPU's memory). A second such signal while the job cleans up is ignored.
    The previous handlers are back after the block."""
    def stop(signum, frame):
        for s in STOPPING:
            signal.signal(s, signal.SIG_IGN)
        raise Terminated(signum)

    previous = {s: signal.signal(s, stop) for s in STOPPING}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def run_rule(smk, stage, record) -> None:
    """A rule's script: its stage with the job's inputs, outputs and parameters record, by name,
    everything logged to the job's log, and the job's facts it takes (job_facts). A job stopped
    by SIGTERM or SIGHUP cleans up before it ends (stopped_by_signals)."""
    from ..logs import logged

    extra = job_facts(smk, stage)
    with stopped_by_signals(), logged(smk.log[0], smk.rule) as log:
        try:
            stage(**stage_args(smk, record), **extra)
        except Terminated as exc:
            log.error("stage %s stopped by %s", smk.rule, exc.signal.name)
            raise
