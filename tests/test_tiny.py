"""Tiny models: corpus split, tokenizer, deterministic init, training, bad input."""


import numpy as np
import pytest
from wf import REPO

from specmoe.checks.schema import load_schema
from specmoe.runtime import tiny
from specmoe.errors import InputError
from specmoe.provenance import atomic_dir

torch = pytest.importorskip("torch")

# the held-out split the configuration's schema defaults to (tiny.heldout_every)
HELDOUT_EVERY = load_schema(REPO / "workflow/schemas/config.schema.yaml")[
    "properties"]["tiny"]["properties"]["heldout_every"]["default"]


def test_corpus_split_is_fixed_and_disjoint():
    train = tiny.corpus_files(False, HELDOUT_EVERY)
    held = tiny.corpus_files(True, HELDOUT_EVERY)
    assert train and held and not set(train) & set(held)
    assert 0.05 < len(held) / (len(train) + len(held)) < 0.15
    assert tiny.corpus_files(True, HELDOUT_EVERY) == held
    assert not [p for p in train if "site-packages" in p.parts or "test" in p.parts]


def test_tokenizer_roundtrip_and_digest(tmp_path):
    files = tiny.corpus_files(False, HELDOUT_EVERY)[:40]
    tiny.train_tokenizer(files, 400, tmp_path / "tok")
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast.from_pretrained(str(tmp_path / "tok"))
    text = "def f(x):\n    return x + 1  # ünïcode\n"
    assert tok.decode(tok(text)["input_ids"]) == text
    assert len(tok) == 400
    tiny.train_tokenizer(files, 400, tmp_path / "tok2")
    assert tiny.tokenizer_digest(tmp_path / "tok") == tiny.tokenizer_digest(tmp_path / "tok2")
    tiny.train_tokenizer(files, 500, tmp_path / "tok3")
    assert tiny.tokenizer_digest(tmp_path / "tok") != tiny.tokenizer_digest(tmp_path / "tok3")


def test_the_tokenizers_provenance_names_the_package_that_trained_it(tiny_models):
    """The tokenizer (and with it every token id downstream) is trained by the tokenizers package,
    so its version is in the provenance beside transformers' (it was missing: a tokenizers
    upgrade that changed the merges left no trace in any output)."""
    from importlib import metadata

    from specmoe.provenance import read_json

    prov = read_json(tiny_models / "tokenizer" / "manifest.json")["provenance"]
    assert prov["packages"]["tokenizers"] == metadata.version("tokenizers")
    assert prov["packages"]["transformers"] == metadata.version("transformers")


def test_corpus_digest_sees_content_and_place(tmp_path):
    """Two corpora with the same file names and sizes but other content, or the same files in
    other folders, have different digests (base names and sizes were all it hashed)."""
    for rel, text in (("a/x.py", "x = 1\n"), ("b/x.py", "y = 2\n")):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    files = [tmp_path / "a/x.py", tmp_path / "b/x.py"]
    before = tiny.corpus_digest(files, tmp_path)
    assert tiny.corpus_digest(files, tmp_path) == before
    (tmp_path / "a/x.py").write_text("x = 3\n")  # same size
    edited = tiny.corpus_digest(files, tmp_path)
    assert edited != before
    (tmp_path / "a/x.py").write_text("y = 2\n")
    (tmp_path / "b/x.py").write_text("x = 3\n")  # the two files swap folders
    assert tiny.corpus_digest(files, tmp_path) not in (before, edited)


def stdlib_like(root, prefix: str):
    """A stdlib-like folder installed at `prefix`: ordinary sources (one naming /usr, as 52 of
    3.11's do), the build's configuration (_sysconfigdata_*.py) and python-config, the last two
    holding the prefix as an installation writes them."""
    files = {"os.py": "import sys\n", "json/__init__.py": "def dumps(o):\n    return str(o)\n",
             "shutil.py": "PATH = '/usr/bin:/usr/local/bin'\n",
             "_sysconfigdata__linux_x86_64-linux-gnu.py":
                 f"build_time_vars = {{'prefix': '{prefix}',\n"
                 f"                   'LIBDEST': '{prefix}/lib/python3.11'}}\n",
             "config-3.11-x86_64-linux-gnu/python-config.py": f"#!{prefix}/bin/python3.11\n"}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_the_corpus_is_the_same_wherever_python_is_installed(tmp_path):
    """Two installations of one Python version, at different prefixes (pyenv's folder; under
    --sdm conda, an environment inside the checkout), give the same corpus: the same files and
    the same digest. The build's own files, which hold the prefix, were in it (the stdlib
    copied with only its prefix rewritten changed the digest, the tokenizer and the weights)."""
    roots = [stdlib_like(tmp_path / "a", "/root/.pyenv/versions/3.11.7"),
             stdlib_like(tmp_path / "b", "/work/.snakemake/conda/0123abcd")]
    for heldout in (False, True):
        every = 2  # both splits hold files of this small tree
        lists = [tiny.corpus_files(heldout, every, r) for r in roots]
        rel = [[str(p.relative_to(r)) for p in files] for files, r in zip(lists, roots)]
        assert rel[0] == rel[1] and rel[0]
        assert tiny.corpus_digest(lists[0], roots[0]) == tiny.corpus_digest(lists[1], roots[1])
    every_file = [str(p.relative_to(roots[0])) for h in (False, True)
                  for p in tiny.corpus_files(h, 2, roots[0])]
    assert sorted(every_file) == ["json/__init__.py", "os.py", "shutil.py"]


def test_no_file_of_this_pythons_corpus_names_the_folder_it_was_read_from():
    """The real stdlib's corpus holds no path of its installation (its _sysconfigdata_ named
    this interpreter's stdlib folder nine times)."""
    root = str(tiny.corpus_root()).encode()
    files = tiny.corpus_files(False, HELDOUT_EVERY) + tiny.corpus_files(True, HELDOUT_EVERY)
    assert [p.name for p in files if root in p.read_bytes()] == []

def test_encoding_in_batches_gives_each_files_ids_in_order_as_one_at_a_time(tmp_path):
    """tiny.encode encodes ENCODE_BATCH files at a time (on every core): the ids are those of
    each file encoded alone, EOS after each, in file order, cut at max_tokens, whether the cut
    falls inside a batch or after several."""
    from transformers import PreTrainedTokenizerFast

    files = tiny.corpus_files(False, HELDOUT_EVERY)[:150]  # more than two batches
    tiny.train_tokenizer(files[:40], 400, tmp_path / "tok")
    tok = PreTrainedTokenizerFast.from_pretrained(str(tmp_path / "tok"))
    alone = np.concatenate([np.asarray(tok(t)["input_ids"] + [tok.eos_token_id], np.int32)
                            for t in tiny._read(files, 64 << 20)])
    assert len(files) > 2 * tiny.ENCODE_BATCH
    np.testing.assert_array_equal(tiny.encode(tmp_path / "tok", files, alone.size), alone)
    for cut in (1000, alone.size - 5):
        np.testing.assert_array_equal(tiny.encode(tmp_path / "tok", files, cut), alone[:cut])


def test_build_is_deterministic_in_seed():
    arch = tiny.Arch(kind="moe", hidden=32, layers=1, heads=2, kv_heads=1, head_dim=32,
                     num_experts=8, top_k=2, expert_intermediate=8)
    a, b = tiny.build_model(arch, 300, seed=1), tiny.build_model(arch, 300, seed=1)
    c = tiny.build_model(arch, 300, seed=2)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)
    assert a.config.num_experts == 8 and a.config.num_experts_per_tok == 2


def test_training_lowers_heldout_loss():
    rng = np.random.default_rng(0)
    # a learnable stream: a repeated random phrase of 20 tokens
    phrase = rng.integers(0, 300, 20)
    tokens = np.tile(phrase, 400).astype(np.int32)
    arch = tiny.Arch(kind="dense", hidden=32, layers=1, heads=2, kv_heads=1, head_dim=32,
                     intermediate=64)
    model = tiny.build_model(arch, 300, seed=0)
    spec = tiny.TrainSpec(steps=60, seq_len=32, batch_size=8, lr=1e-2, warmup=5, eval_batches=2)
    before = tiny.evaluate(model, tokens, 32, 2, 8)
    res = tiny.train(model, tokens, spec, progress=False)
    after = tiny.evaluate(model, tokens, 32, 2, 8)
    assert res["steps"] == 60 and after < before - 2


@pytest.mark.parametrize("kw,msg", [({"steps": 0}, "budget"), ({"lr": 0}, "lr"),
                                    ({"seq_len": 0}, "seq_len")])
def test_bad_training_spec(kw, msg):
    with pytest.raises(InputError, match=msg):
        tiny.TrainSpec(**kw).validate()


ATTENTION = {"hidden": 32, "layers": 1, "heads": 2, "kv_heads": 1, "head_dim": 32}


def test_bad_arch():
    with pytest.raises(InputError, match="top_k"):
        tiny.Arch(kind="moe", **ATTENTION, num_experts=4, top_k=8, expert_intermediate=8).validate()
    with pytest.raises(InputError, match="unknown arch key"):
        tiny.arch_from_dict({"hiden": 3})


def test_an_arch_has_no_sizes_of_its_own():
    """Every size comes from the configuration (the schema requires its kind's): a MoE without
    its k of N trained 8 of 64 experts from defaults here, which the checks never saw. The
    manifest records the kind's sizes only."""
    with pytest.raises(InputError, match=r"^arch needs kind, head_dim$"):
        tiny.arch_from_dict({k: v for k, v in ATTENTION.items() if k != "head_dim"})
    with pytest.raises(InputError, match=r"^arch kind moe needs num_experts, top_k$"):
        tiny.arch_from_dict({"kind": "moe", **ATTENTION, "expert_intermediate": 8}).validate()
    with pytest.raises(InputError, match=r"^arch kind dense needs intermediate$"):
        tiny.arch_from_dict({"kind": "dense", **ATTENTION}).validate()
    dense = tiny.arch_from_dict({"kind": "dense", **ATTENTION, "intermediate": 64})
    assert tiny.describe(dense, tiny.TrainSpec())["arch"] == {"kind": "dense", **ATTENTION,
                                                              "intermediate": 64}


def test_a_tiny_models_seed_is_the_schemas_default():
    """A tiny model or drafter without a seed gets the schema's (filled by the validation) in its
    training record; TrainSpec's own, which only benchmarks built on it read, is the same."""
    import yaml

    from specmoe.checks.schema import check
    from specmoe.config import Config
    from specmoe.contracts import Named
    from specmoe.contracts.models import TrainParams

    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    for e in cfg["models"] + cfg["drafters"]:
        e.pop("seed", None)
    check(cfg, REPO / "workflow/schemas/config.schema.yaml")
    resolved = Config.resolve(cfg)
    schema = load_schema(REPO / "workflow/schemas/config.schema.yaml")["properties"]
    for section, name in (("models", "tiny-fine"), ("drafters", "tiny-drafter")):
        (then,) = [c["then"] for c in schema[section]["items"]["allOf"]
                   if c["if"]["properties"].get("source", {}).get("const") == "tiny"]
        record = TrainParams.from_config(resolved, Named({"tiny": name}))
        assert record.model["seed"] == then["properties"]["seed"]["default"] == \
            tiny.TrainSpec.seed


def test_atomic_dir_replaces_whole(tmp_path):
    out = tmp_path / "m"
    with atomic_dir(out) as d:
        (d / "a").write_text("1")
    with pytest.raises(RuntimeError):
        with atomic_dir(out) as d:
            (d / "b").write_text("2")
            raise RuntimeError("crash mid-write")
    assert sorted(p.name for p in out.iterdir()) == ["a"]
    assert [p.name for p in tmp_path.iterdir()] == ["m"]


def test_atomic_dir_gives_the_folder_the_usual_permissions(tmp_path):
    """mkdtemp makes 0700: a model or tokenizer folder others on a shared cluster cannot read. It
    takes the umask's permissions, as a file atomic_path writes does."""
    import os
    import stat

    old = os.umask(0o022)
    try:
        with atomic_dir(tmp_path / "m") as d:
            (d / "a").write_text("1")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "m").stat().st_mode) == 0o755

def test_train_stage_rejects_zero_budget_before_building(tmp_path):
    from specmoe.contracts import Named
    from specmoe.contracts.models import TrainParams
    from specmoe.stages.models import train_stage

    cfg = {"name": "x", "arch": {"kind": "dense", "hidden": 32, "layers": 1, "heads": 2,
                                 "kv_heads": 1, "head_dim": 32, "intermediate": 32}, "steps": 0}
    with pytest.raises(InputError, match="budget"):
        train_stage(Named({"tokenizer": tmp_path / "nope"}), Named({"dir": tmp_path / "out"}),
                    TrainParams(cfg, {"vocab_size": 300, "train": {}}, True))
    assert not (tmp_path / "out").exists()


def token_folder(tmp_path, train: int, heldout: int):
    """A tokenizer folder as rule tokenizer leaves it: random train and held-out token arrays
    (vocabulary 300) and an empty tokenizer."""
    import json

    tok = tmp_path / "tok"
    tok.mkdir()
    rng = np.random.default_rng(0)
    np.save(tok / "train_tokens.npy", rng.integers(0, 300, train).astype(np.int32))
    np.save(tok / "heldout_tokens.npy", rng.integers(0, 300, heldout).astype(np.int32))
    (tok / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {}, "merges": []}}))
    return tok


def test_train_stage_records_the_cpu_capability_its_weights_depend_on(tmp_path):
    """torch's CPU kernels differ by instruction set (avx2 and avx512 train different weights):
    the checkpoint's provenance names the one this training ran on."""
    import json

    from specmoe.contracts import Named
    from specmoe.contracts.models import TrainParams
    from specmoe.stages.models import train_stage

    tok = token_folder(tmp_path, 5_000, 1_000)
    cfg = {"name": "m", "steps": 2, "arch": {"kind": "dense", "hidden": 32, "layers": 1,
                                             "heads": 2, "kv_heads": 1, "head_dim": 32,
                                             "intermediate": 32}}
    train_stage(Named({"tokenizer": tok}), Named({"dir": tmp_path / "m"}),
                TrainParams(cfg, {"vocab_size": 300, "train": {
                    "seq_len": 16, "batch_size": 2, "warmup": 1, "eval_batches": 1,
                    "threads": 1}}, True), progress=False)
    prov = json.loads((tmp_path / "m" / "manifest.json").read_text())["provenance"]
    assert prov["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert prov["cpu_capability"] in ("DEFAULT", "AVX2", "AVX512", "ZVECTOR", "SVE256", "SVE128")


def _moe_training(aux_coef: float, steps: int = 12):
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 300, 20_000).astype(np.int32)
    arch = tiny.Arch(kind="moe", hidden=32, layers=2, heads=2, kv_heads=1, head_dim=32,
                     num_experts=16, top_k=4, expert_intermediate=8)
    model = tiny.build_model(arch, 300, seed=0, aux_coef=aux_coef)
    spec = tiny.TrainSpec(steps=steps, seq_len=32, batch_size=8, warmup=2, threads=2,
                          aux_coef=aux_coef)
    res = tiny.train(model, tokens, spec, progress=False)
    return model, res


@pytest.mark.slow  # three MoE trainings on 2 threads: 225 s of a 32-minute fast suite under load
def test_training_is_bit_reproducible_with_the_load_balancing_loss():
    """Same config, same machine: the same weights bit for bit (the grouped expert GEMM's backward
    adds in varying order on 2 threads unless deterministic kernels are asked for), and the
    coefficient is recorded in the checkpoint's config."""
    a, res = _moe_training(0.01)
    b, _ = _moe_training(0.01)
    sa, sb = a.state_dict(), b.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert a.config.router_aux_loss_coef == 0.01 and res["aux_loss"] > 0
    c, res_c = _moe_training(0.0)
    assert res_c["aux_loss"] is None
    assert not all(torch.equal(sa[k], c.state_dict()[k]) for k in sa)


def test_load_balancing_loss_per_layer_sees_skew_that_pooling_hides():
    """Two layers that each send every token to 4 of 16 experts, but to different ones: pooled
    over layers (transformers' form) the loads look half as skewed; per layer they are not."""
    n, k, tokens = 16, 4, 64
    uniform = [torch.zeros(tokens, n), torch.zeros(tokens, n)]
    skew = [torch.zeros(tokens, n), torch.zeros(tokens, n)]
    skew[0][:, :4] = 10.0
    skew[1][:, 4:8] = 10.0
    per_layer = tiny.load_balancing_loss(skew, n, k, "layer")
    pooled = tiny.load_balancing_loss(skew, n, k, "pooled")
    assert float(per_layer) == pytest.approx(n * k * (1 / 4) * 0.999, rel=1e-2)  # ~ 4x uniform's k
    assert float(pooled) == pytest.approx(float(per_layer) / 2, rel=1e-2)
    rot = torch.arange(tokens)[:, None] * k + torch.arange(k)[None, :]
    flat = torch.zeros(tokens, n).scatter_(1, rot % n, 1.0)  # every expert equally often
    assert float(tiny.load_balancing_loss([flat, flat], n, k)) == pytest.approx(k, rel=1e-6)
    assert float(tiny.load_balancing_loss(uniform, n, k)) > 0


def test_bad_load_balancing_settings():
    with pytest.raises(InputError, match="aux_coef"):
        tiny.TrainSpec(aux_coef=-1).validate()
    with pytest.raises(InputError, match="aux_scope"):
        tiny.TrainSpec(aux_scope="global").validate()


# --- OpenMP wait policy of training (tiny.TRAIN_OMP_ENV) -------------------------------------------

def _python(code: str, env_extra: dict | None = None, timeout: int = 600):
    """`code` in a fresh interpreter (OpenMP reads its settings when torch loads), with libgomp's
    settings shown on stderr (OMP_DISPLAY_ENV) and none of the caller's OpenMP variables."""
    import os
    import subprocess
    import sys

    # LD_PRELOAD: vLLM's CPU platform adds torch's libgomp to it in a process that imported vLLM
    # (an earlier test's), which loads libgomp before the code runs (training_threads then
    # reports applied: false, tested below)
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_DISPLAY_ENV", "LD_PRELOAD")}
    env.update(OMP_DISPLAY_ENV="VERBOSE", **(env_extra or {}))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout, check=True)


@pytest.mark.slow  # four Python processes importing torch (50 s under load)
def test_training_threads_set_the_wait_policy_that_the_loaded_openmp_uses():
    """libgomp as torch loads it waits passively when training_threads ran first; without it,
    libgomp's default spins 300,000 times; a setting of the user's is kept; and in a process that
    loaded torch already the policy cannot apply, and says so."""
    code = ("import json; from specmoe.runtime import tiny; r = tiny.training_threads(2); "
            "import torch; torch.ones(1); print(json.dumps(r))")
    r = _python(code)
    assert "GOMP_SPINCOUNT = '0'" in r.stderr and "OMP_WAIT_POLICY = 'PASSIVE'" in r.stderr
    assert '"applied": true' in r.stdout and '"OMP_WAIT_POLICY": "PASSIVE"' in r.stdout
    plain = _python("import torch; torch.ones(1)")
    assert "GOMP_SPINCOUNT = '300000'" in plain.stderr
    mine = _python(code, {"GOMP_SPINCOUNT": "1000"})
    assert "GOMP_SPINCOUNT = '1000'" in mine.stderr and '"GOMP_SPINCOUNT": "1000"' in mine.stdout
    assert tiny.training_threads(2)["applied"] is False  # torch is loaded in this process
    from pathlib import Path

    import torch
    # libgomp preloaded as vLLM's CPU platform does: not applied, and said so
    gomp = sorted((Path(torch.__file__).parent / "lib").glob("libgomp*"))
    assert gomp, "torch's own libgomp not found"
    pre = _python(code, {"LD_PRELOAD": str(gomp[0])})
    assert '"applied": false' in pre.stdout


TRAIN_STAGE = """
import json, sys
import numpy as np
from specmoe.runtime import tiny
from specmoe.contracts import Named
from specmoe.contracts.models import TrainParams
from specmoe.stages.models import train_stage
if sys.argv[1] == "libgomp-default":
    tiny.TRAIN_OMP_ENV = {}
if sys.argv[1] == "unpinned":
    tiny.TRAIN_NUMERICS_ENV = {}
m = train_stage(Named({"tokenizer": sys.argv[2]}), Named({"dir": sys.argv[3]}),
                TrainParams({"name": "m", "steps": 12, "seed": 0,
                             "arch": {"kind": "moe", "hidden": 32, "layers": 2, "heads": 2,
                                      "kv_heads": 1, "head_dim": 32, "num_experts": 16,
                                      "top_k": 4, "expert_intermediate": 8}},
                            {"vocab_size": 300, "train": {"seq_len": 32, "batch_size": 8,
                                                          "warmup": 2, "eval_batches": 2,
                                                          "threads": 2, "aux_coef": 0.01}},
                            True),
                progress=False)
import ctypes, pathlib, torch
# MKL's reproducibility branch as MKL itself reports it (mkl_cbwr_get(MKL_CBWR_BRANCH): 1 off, 2
# auto, 3 COMPATIBLE), from the MKL linked into torch
lib = ctypes.CDLL(str(pathlib.Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
lib.mkl_serv_cbwr_get.restype, lib.mkl_serv_cbwr_get.argtypes = ctypes.c_int, [ctypes.c_int]
print(json.dumps({"numerics": m["numerics"], "capability": torch.backends.cpu.get_cpu_capability(),
                  "mkl_branch": lib.mkl_serv_cbwr_get(1)}))
print(json.dumps(m["threading"]))
"""


@pytest.mark.slow
def test_train_stage_applies_the_policy_records_it_and_the_weights_do_not_change(tmp_path):
    """The training stage, in a fresh process as Snakemake runs it, trains under the passive
    wait policy and records it in the checkpoint's manifest; the weights are bit-identical to
    those trained under libgomp's default."""
    import hashlib
    import json

    tok = token_folder(tmp_path, 20_000, 2_000)
    sha, threading = {}, {}
    for mode in ("policy", "libgomp-default"):
        out = tmp_path / mode
        r = _python(TRAIN_STAGE.replace("sys.argv[1]", repr(mode))
                    .replace("sys.argv[2]", repr(str(tok))).replace("sys.argv[3]", repr(str(out))))
        threading[mode] = (json.loads(r.stdout.strip().splitlines()[-1]), r.stderr)
        sha[mode] = hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["threading"] == threading[mode][0]
    rec, err = threading["policy"]
    assert rec == {"threads": 2, "applied": True, "OMP_WAIT_POLICY": "PASSIVE",
                   "GOMP_SPINCOUNT": None} and "GOMP_SPINCOUNT = '0'" in err
    assert "GOMP_SPINCOUNT = '300000'" in threading["libgomp-default"][1]
    assert sha["policy"] == sha["libgomp-default"]


PINNED_SHA256 = "81a4e1fb1c989df672809dde33f9ea16a2ca577380327ad9f3181c08636631d0"


@pytest.mark.slow
def test_training_numerics_are_pinned_whatever_the_machine_or_the_user_sets(tmp_path):
    """A trained tiny-fine came out different on an AMD EPYC and an Intel Xeon (both AVX512):
    torch's kernels run at the CPU's widest instruction set and MKL picks its GEMM path by the
    CPU's maker. The training stage, in a fresh process as Snakemake runs it, now runs torch at
    AVX2 and MKL on its COMPATIBLE branch (as MKL itself reports it) and records both. Settings
    that move those choices (ATEN_CPU_CAPABILITY, MKL_CBWR, and MKL_ENABLE_INSTRUCTIONS, which
    narrows MKL's dispatch as an older CPU would) leave the weights unchanged; without the pins
    the same settings change them, so the comparison can fail."""
    import hashlib
    import json

    tok = token_folder(tmp_path, 20_000, 2_000)
    moved = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "AUTO",
             "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}
    sha, seen = {}, {}
    for mode, env in (("pinned", {}), ("pinned-moved", moved), ("unpinned", {}),
                      ("unpinned-moved", moved)):
        out = tmp_path / mode
        r = _python(TRAIN_STAGE.replace("sys.argv[1]", repr(mode.removesuffix("-moved")))
                    .replace("sys.argv[2]", repr(str(tok))).replace("sys.argv[3]", repr(str(out))),
                    env)
        seen[mode] = json.loads(r.stdout.strip().splitlines()[-2])
        sha[mode] = hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()
        assert json.loads((out / "manifest.json").read_text())["numerics"] == \
            seen[mode]["numerics"]
    for mode in ("pinned", "pinned-moved"):
        assert seen[mode] == {"numerics": {"applied": True, **tiny.TRAIN_NUMERICS_ENV},
                              "capability": "AVX2", "mkl_branch": 3}, mode
    assert sha["pinned"] == sha["pinned-moved"]
    # the weights themselves, as an AMD EPYC (AVX512) trained them under the pins: another
    # x86-64 CPU with AVX2, Intel's included, must train the same (torch, MKL and transformers
    # as pyproject's cpu extra pins them); unpinned, that EPYC and an Intel Xeon trained
    # tiny-fine apart
    assert sha["pinned"] == PINNED_SHA256, sha["pinned"]
    assert seen["unpinned-moved"]["capability"] == "DEFAULT"
    assert sha["unpinned"] != sha["unpinned-moved"]
