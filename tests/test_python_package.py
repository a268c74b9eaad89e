#!/usr/bin/env python3
"""test_python_package.py LIB: the oscar_kv package on a machine without a GPU.

Always: `import oscar_kv` works without importing torch; the cache shape checks (CacheSpec) reject a bad format,
bit width, head_dim (the message lists the compiled ones, read from the library), query grouping and capacity; the
tensor checks reject a wrong shape, dtype, device and layout with messages naming the argument and the fix (on
small duck-typed tensors, and on real CPU torch tensors where torch is installed); setup.py (pip install) copies the
built library and oscar-rotate into the package, which then loads its own copy. With torch and transformers (any
deprecated transformers API fails the test): creating a cache without CUDA raises OscarError (no device) after the
argument checks, and OscarCache raises one RuntimeError before anything else; the transformers integration
imports, refuses unknown recipes/bits and oscar-cov without rotations, refuses an unsupported architecture, and
its layer plan for the tiny models of every supported architecture (head_dim 64) puts sliding-window layers on an
ordinary cache with the reason (soft-capped and sink full-attention layers go to the kernels), and a model whose every
layer falls back (gemma2 and gpt_oss with only sliding layers: their soft-capping and sinks, which transformers' SDPA
function drops; mistral with a window) gives the eager model's logits; oscar_kv.hf.calibrate (the in-memory dump piped
through oscar-rotate) returns and writes rotations equal to the bit those oscar-rotate fits on a file dump of the same
passage (check_calibrate). The task scorer of experiments/hf_tasks.py (check_tasks). Exit 0 passed, 1 failed, 77
library not built.
"""
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from python_checks import ROOT, check, finish, raises  # noqa: E402


class Duck:
    """A tensor-like object: what the checks read (shape, dtype, device, is_contiguous, stride)."""

    def __init__(self, shape, dtype="torch.bfloat16", device="cuda:0", contiguous=True):
        self.shape, self.dtype, self.device, self._c = tuple(shape), dtype, device, contiguous

    def is_contiguous(self):
        return self._c

    def stride(self):
        return (1,) * len(self.shape)


def check_install(build):
    """pip install's build step (setup.py build_py) copies the built library and oscar-rotate into the package, and
    the copy, imported with no environment variables, loads its own library; a build folder without the library is
    refused in one line."""
    import os
    import shutil
    import tempfile
    env = {k: v for k, v in os.environ.items() if not k.startswith("OSCAR_")}
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as src:
        # a copy of the package's sources (setup.py writes its egg-info beside itself)
        shutil.copytree(ROOT / "kernels" / "python", src, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        setup = Path(src) / "setup.py"
        r = subprocess.run([sys.executable, str(setup), "-q", "build_py", "--build-lib", tmp], capture_output=True,
                           text=True, env=dict(env, OSCAR_BUILD=str(build)), cwd=setup.parent)
        pkg = Path(tmp) / "oscar_kv"
        check(r.returncode == 0 and (pkg / "liboscar_kernels.so").is_file(),
              f"setup.py build_py: rc {r.returncode}, library copied: {(pkg / 'liboscar_kernels.so').is_file()} {r.stderr[-300:]}")
        rot = pkg / "bin" / "oscar-rotate"
        if (build / "apps" / "oscar-rotate").is_file():
            check(rot.is_file() and os.access(rot, os.X_OK), "setup.py build_py: oscar-rotate not carried")
        r = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {tmp!r}); import oscar_kv._capi as c; "
                            "print(c.default_library_path()); print(c.load().path)"],
                           capture_output=True, text=True, env=env, cwd=tmp)
        want = str(pkg / "liboscar_kernels.so")
        check(r.returncode == 0 and r.stdout.split() == [want, want],
              f"installed copy loads {r.stdout.split()} (rc {r.returncode} {r.stderr[-300:]}), not {want}")
        r = subprocess.run([sys.executable, str(setup), "-q", "build_py", "--build-lib", tmp], capture_output=True,
                           text=True, env=dict(env, OSCAR_BUILD=tmp), cwd=setup.parent)
        lines = [ln for ln in r.stderr.splitlines() if "error:" in ln]
        check(r.returncode != 0 and len(lines) == 1 and "has no kernels/liboscar_kernels.so" in lines[0],
              f"setup.py with a build lacking the library: rc {r.returncode}, {r.stderr[-300:]!r}")


def main():
    lib_path = sys.argv[1] if len(sys.argv) > 1 else None
    if lib_path and not Path(lib_path).is_file():
        print(f"SKIP: {lib_path} not built")
        return 77
    # import without torch, in a fresh interpreter
    r = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(ROOT / 'kernels' / 'python')!r}); "
                        "import oscar_kv; print('torch' in sys.modules)"], capture_output=True, text=True)
    check(r.returncode == 0 and r.stdout.strip() == "False", f"import oscar_kv: rc {r.returncode}, torch imported: "
          f"{r.stdout.strip()} {r.stderr.strip()[-300:]}")
    if lib_path:
        check_install(Path(lib_path).resolve().parents[1])
    import oscar_kv
    from oscar_kv.checks import CacheSpec, check_tensor
    lib = oscar_kv.load(lib_path)
    hds = [d for d in (64, 128, 256) if lib.dll.oscar_cov_shape_supported(d, 2)]
    check(hds == [64, 128, 256], f"compiled cov head_dims {hds}")

    raises(lambda: CacheSpec(lib, "kivi", 1, 8, 128, 2, 1024, 32), ValueError, "kivi", "oscar-cov, oscar-omni", what="format")
    raises(lambda: CacheSpec(lib, "oscar-cov", 1, 8, 128, 3, 1024, 32), ValueError, "bits: 3", "2 or 4", what="bits")
    raises(lambda: CacheSpec(lib, "oscar-omni", 1, 8, 96, 2, 1024, 32), ValueError, "head_dim 96", "64, 128, 256",
           "ordinary cache", what="head_dim")
    raises(lambda: CacheSpec(lib, "oscar-cov", 1, 8, 128, 2, 1024, 12), ValueError, "not a multiple", what="Hq % Hkv")
    raises(lambda: CacheSpec(lib, "oscar-cov", 1, 2, 128, 2, 1024, 64), ValueError, "32 query heads per KV head",
           "at most 16", what="group")
    raises(lambda: CacheSpec(lib, "oscar-cov", 0, 8, 128, 2, 1024, 32), ValueError, "batch: 0", what="batch")
    raises(lambda: CacheSpec(lib, "oscar-cov", 1, 8, 128, 2, 2**31, 32), ValueError, "int32", what="capacity")
    # ctypes would truncate a large int to int32 (batch 2^32 + 1 sized as batch 1): refused; a float width is refused
    # before ctypes sees it; numpy's integers are integers
    raises(lambda: CacheSpec(lib, "oscar-cov", 2**32 + 1, 8, 128, 2, 1024, 32), ValueError, "batch: 4294967297", "int32",
           what="batch beyond int32")
    raises(lambda: CacheSpec(lib, "oscar-cov", 1, 8, 128, 2.0, 1024, 32), ValueError, "bits: 2.0", "an integer",
           what="float bits")
    raises(lambda: CacheSpec(lib, "oscar-cov", 1, 8, 128.0, 2, 1024, 32), ValueError, "head_dim: 128.0", what="float head_dim")
    try:
        import numpy as np
        check(CacheSpec(lib, "oscar-cov", np.int64(1), 8, np.int32(128), np.int64(2), 1024, 32).head_dim == 128,
              "numpy integers as shapes")
    except ImportError:
        pass
    # a wrong library: one OSError naming the file and the fix, never a raw loader error or a SIGBUS
    import tempfile
    from oscar_kv import _capi
    with tempfile.TemporaryDirectory() as tmp:
        trunc = Path(tmp) / "liboscar_kernels.so"
        trunc.write_bytes(Path(lib.path).read_bytes()[:100000])
        raises(lambda: _capi.Kernels(trunc), OSError, "is truncated", "rebuild it", what="truncated library")
        notelf = Path(tmp) / "x.so"
        notelf.write_text("not a library")
        raises(lambda: _capi.Kernels(notelf), OSError, "not a 64-bit ELF", what="not a library")
        other = next((p for p in ("/usr/lib/x86_64-linux-gnu/libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1")
                      if Path(p).is_file()), None)
        if other:
            raises(lambda: _capi.Kernels(other), OSError, "lacks the function", what="another library")
    spec = CacheSpec(lib, "oscar-cov", 2, 8, 128, 2, 1024, 32)
    spec.device = "cuda:0"
    good = Duck((2, 8, 100, 128))
    check(spec.check_prefill(good, good) == 100, "prefill check on good inputs")
    raises(lambda: spec.check_prefill(Duck((2, 4, 100, 128)), good), ValueError, "k: shape [2, 4, 100, 128]",
           "[2][8][*][128]", what="prefill shape")
    raises(lambda: spec.check_prefill(Duck((2, 8, 100, 128), dtype="torch.float16"), good), ValueError,
           "k: dtype float16", "bfloat16", what="prefill dtype")
    raises(lambda: spec.check_prefill(good, Duck((2, 8, 100, 128), device="cpu")), ValueError, "v: on cpu", ".cuda()",
           what="prefill device")
    raises(lambda: spec.check_prefill(good, Duck((2, 8, 100, 128), device="cuda:1")), ValueError, "cuda:1", "cuda:0",
           what="other GPU")
    raises(lambda: spec.check_prefill(Duck((2, 8, 100, 128), contiguous=False), good), ValueError, "not contiguous",
           ".contiguous()", what="layout")
    raises(lambda: spec.check_prefill(Duck((2, 8, 2000, 128)), Duck((2, 8, 2000, 128))), ValueError, "2000 tokens",
           "larger capacity", what="prefill too long")
    raises(lambda: spec.check_prefill(good, good, [100, 101]), ValueError, "lengths", what="lengths")
    raises(lambda: spec.check_append(Duck((2, 8, 128)), Duck((2, 8, 128)), 1024), ValueError, "full", what="append full")
    raises(lambda: spec.check_decode(Duck((2, 8, 128)), None), ValueError, "q: shape", "[2][32][128]", what="decode q")
    raises(lambda: spec.check_decode(Duck((2, 32, 128)), Duck((2, 32, 128))), ValueError, "out: dtype bfloat16",
           "float32", what="decode out")
    raises(lambda: check_tensor("x", [1, 2], "bfloat16", (2,)), ValueError, "got list", what="not a tensor")
    spec.check_logits(50.0, Duck((32,), dtype="torch.float32"))
    raises(lambda: spec.check_logits(float("nan"), None), ValueError, "softcap: nan", ">= 0", what="softcap NaN")
    raises(lambda: spec.check_logits(-1, None), ValueError, "softcap: -1", what="softcap negative")
    raises(lambda: spec.check_logits(0.0, Duck((8,), dtype="torch.float32")), ValueError, "sinks", "[32]", what="sinks shape")
    raises(lambda: spec.check_logits(0.0, Duck((32,), dtype="torch.int32")), ValueError, "sinks: dtype int32",
           what="sinks dtype")

    try:
        import torch
    except ImportError:
        print("torch not installed: the torch and transformers parts are not run here (they run on the GPU machine)")
        torch = None
    if torch is None:
        raises(lambda: oscar_kv.OmniKvCache(1, 8, 128, 2, 1024, 32, lib=lib), ImportError, "PyTorch is not installed",
               "pip install torch", what="cache without torch")
    if torch is not None:
        t = torch.zeros(2, 8, 100, 128, dtype=torch.bfloat16)
        raises(lambda: spec.check_prefill(t, t), ValueError, "k: on cpu", what="torch cpu tensor")
        raises(lambda: spec.check_prefill(t.float(), t), ValueError, "k: dtype float32", what="torch dtype")
        if not torch.cuda.is_available():
            raises(lambda: oscar_kv.OmniKvCache(1, 8, 128, 2, 1024, 32, lib=lib), oscar_kv.OscarError, "no CUDA device",
                   what="cache without CUDA")
            raises(lambda: oscar_kv.OmniKvCache(1, 8, 100, 2, 1024, 32, lib=lib), ValueError, "head_dim 100",
                   what="checks before the device")
            raises(lambda: oscar_kv.CovKvCache(1, 8, 128, 2, 1024, 32, lib=lib, softcap=-2.0), ValueError, "softcap: -2.0",
                   what="logit checks before the device")
        try:
            import transformers  # noqa: F401
        except ImportError:
            transformers = None
            print("transformers not installed: the integration's CPU checks are not run here")
        if transformers is not None:
            check_integration(lib, torch, transformers)
            check_calibrate(Path(lib_path).resolve().parents[1] if lib_path else None, torch)
    check_tasks(Path(lib_path).resolve().parents[1] if lib_path else None)
    return finish()


def check_integration(lib, torch, transformers):
    """The transformers integration without a GPU: refusals, layer plans of every architecture, fallback layers."""
    import os
    os.environ.setdefault("OSCAR_KERNELS_LIB", str(lib.path))
    import oscar_kv.hf as okv
    from oscar_kv.hf import architectures
    from transformers import AutoModelForCausalLM
    from strict_transformers import DeprecatedApi, strict
    strict()  # a deprecated transformers API used below fails the test
    # the trap, on both of transformers' ways to announce a deprecation (its logger, a FutureWarning from its modules)
    raises(lambda: transformers.utils.logging.get_logger("transformers.models").warning_once("x is deprecated, use y"),
           DeprecatedApi, "deprecated", what="the deprecation trap (logger)")
    import warnings
    raises(lambda: warnings.warn_explicit("x is deprecated", FutureWarning, "f.py", 1, module="transformers.models"),
           FutureWarning, "deprecated", what="the deprecation trap (warning)")
    want = {"mistral": [], "gemma2": [1, 3], "gpt_oss": [1, 3], "gemma3": [3]}
    reasons = {"mistral": "sliding attention (window 24)", "gemma2": "sliding attention", "gpt_oss": "sliding attention",
               "gemma3": "sliding attention"}
    for arch in architectures.NAMES:
        with torch.device("meta"):
            m = AutoModelForCausalLM.from_config(architectures.tiny_config(arch, head_dim=64))
        plan = okv.layer_plan(m, "oscar-omni", 2)
        on = [i for i, why in plan if why is None]
        check(on == want.get(arch, [0, 1, 2, 3]), f"{arch}: kernel layers {on}")
        if arch in reasons:
            check(any(why and reasons[arch] in why for _, why in plan), f"{arch}: reasons {plan}")
        if arch == "llama":
            raises(lambda: okv.OscarCache(m, "kivi"), ValueError, "oscar-eval", what="recipe")
            raises(lambda: okv.OscarCache(m, "oscar-omni", bits=3), ValueError, "2 or 4", what="hf bits")
            raises(lambda: okv.OscarCache(m, "oscar-cov"), ValueError, "calibrate", what="cov without rotations")
            if not torch.cuda.is_available():
                raises(lambda: okv.OscarCache(m, "oscar-omni"), RuntimeError, "no CUDA device", "oscar-eval",
                       what="hf cache without CUDA")
            raises(lambda: okv.OscarCache(m, "oscar-cov", rotations="/nonexistent/r.h5"), ValueError,
                   "/nonexistent/r.h5", "oscar-rotate", what="missing rotations file")
    # models whose every layer falls back compute what the model computes (CPU: no kernel is called)
    for arch in ("gemma2", "gpt_oss", "mistral"):
        cfg = architectures.tiny_config(arch, head_dim=64)
        if arch != "mistral":  # only sliding layers: the soft-capped / sink layers that fall back
            cfg.layer_types = ["sliding_attention"] * cfg.num_hidden_layers
        model = architectures.random_model(arch, "cpu", torch.float32, config=cfg)
        ids = torch.randint(3, 500, (2, 40), generator=torch.Generator().manual_seed(1))
        model.set_attn_implementation("eager")
        with torch.no_grad():
            ref = model(input_ids=ids).logits
        okv.enable(model)
        cache = okv.OscarCache(model, "oscar-omni", bits=2, max_cache_len=64)
        with torch.no_grad():
            got = model(input_ids=ids, use_cache=True, **okv.cache_argument(model, cache)).logits
        err = ((got - ref).norm() / ref.norm()).item()
        check(cache.kernel_layers() == [] and err <= 1e-5, f"{arch}: all layers fall back, logits differ {err:.1e}")
    with torch.device("meta"):
        m32 = AutoModelForCausalLM.from_config(architectures.tiny_config("llama"))
    plan = okv.layer_plan(m32, "oscar-cov", 2)
    check(all(why == "head_dim 32 at 2 bits not compiled" for _, why in plan), f"head_dim 32 plan {plan}")
    cfg = transformers.MambaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1)
    with torch.device("meta"):
        mm = AutoModelForCausalLM.from_config(cfg)
    raises(lambda: okv.layer_plan(mm, "oscar-omni", 2), ValueError, "'mamba' is not supported", what="mamba")


def built_tool(build, name, what):
    """BUILD/apps/NAME, or None (saying which checks are skipped) where it is not built."""
    tool = build / "apps" / name if build else None
    if tool is None or not tool.is_file():
        print(f"SKIP: {what} ({name} not built)")
        return None
    return tool

def check_calibrate(build, torch):
    """oscar_kv.hf.calibrate on the CPU with a tiny random llama: the rotations it returns, and those of the file it
    writes, equal to the bit the ones oscar-rotate fits on a file dump of the same passage (experiments/hf_dump.py
    --no-pre-rope --check off: the same capture, through a file), for oscar-cov and oscar-cov-head; the file records
    the passage's ids and names the passage; without `out` nothing is written."""
    import os
    import tempfile
    import h5py
    import oscar_kv.hf as okv
    from oscar_kv.hf import architectures
    tool = built_tool(build, "oscar-rotate", "calibration checks")
    if tool is None:
        return
    with tempfile.TemporaryDirectory() as d:
        dump = Path(d) / "passage.h5"
        r = subprocess.run([sys.executable, str(ROOT / "experiments" / "hf_dump.py"), "--random", "llama", "--text",
                            str(ROOT / "data" / "text" / "kjv.txt.gz"), "--offset", "200", "--tokens", "300", "--check",
                            "off", "--no-pre-rope", "--device", "cpu", "--out", str(dump)], capture_output=True, text=True)
        check(r.returncode == 0, f"hf_dump.py of the calibration passage: {r.stderr.strip()[-300:]}")
        if r.returncode != 0:
            return
        with h5py.File(dump, "r") as f:
            ids = f["token_ids"][...].tolist()
        model = architectures.random_model("llama")
        for recipe in ("oscar-cov", "oscar-cov-head"):
            ref = Path(d) / f"{recipe}-from-file.h5"
            r = subprocess.run([str(tool), "--calib", str(dump), "--recipe", recipe, "--out", str(ref), "--quiet"],
                               capture_output=True, text=True)
            check(r.returncode == 0, f"oscar-rotate --calib FILE: {r.stderr.strip()}")
            want = okv.load_rotations(str(ref), model, per_head=recipe == "oscar-cov-head")
            out = Path(d) / f"{recipe}-calibrated.h5"
            got = okv.calibrate(model, ids, out, recipe=recipe)
            written = okv.load_rotations(str(out), model, per_head=recipe == "oscar-cov-head")
            for what, rot in (("returned", got), ("written", written)):
                same = len(rot) == len(want) and all(torch.equal(a, b) for pr, pw in zip(rot, want) for a, b in zip(pr, pw))
                check(same, f"calibrate({recipe}): the {what} rotations differ from oscar-rotate's on the file dump")
            eye = torch.eye(want[0][0].shape[-1])
            check(not all(torch.equal(m, eye.expand_as(m)) for pair in want for m in pair), f"{recipe}: identity rotations")
            with h5py.File(out, "r") as f:
                check(f["calibration_token_ids"][...].tolist() == ids, f"{recipe}: the file's calibration ids")
                check("300-token passage through oscar_kv.hf.calibrate" in str(f.attrs["calibration"]),
                      f"{recipe}: calibration attribute {f.attrs['calibration']!r}")
        before = sorted(os.listdir(d))
        check(len(okv.calibrate(model, ids[:100])) == 4 and sorted(os.listdir(d)) == before, "calibrate without out")
        raises(lambda: okv.calibrate(model, ids, recipe="oscar-omni"), ValueError, "only oscar-cov", what="omni calibrate")


def check_tasks(build):
    """hf_eval.py --tasks' pieces that need no GPU: the task file (as oscar-tasks writes it, with the model's ids),
    RULER's score (whole values) and Wilson's interval (the values lib's test checks)."""
    import json
    import tempfile
    sys.path.insert(0, str(ROOT / "experiments"))
    import hf_tasks as T
    from hf_eval import Refusal
    lo, hi = T.wilson(8, 10)
    check(abs(lo - 0.4902) < 1e-4 and abs(hi - 0.9433) < 1e-4, f"wilson(8, 10) = {lo}, {hi}")
    check(T.wilson(0, 3) == (0.0, T.wilson(0, 3)[1]) and abs(T.wilson(0, 3)[1] - 0.5615) < 1e-3, "wilson(0, 3)")
    check(T.score(["ABCDE", "FGHIJ"], "vars: abcde") == 0.5, "partial credit, case ignored")
    check(T.score(["22855"], " 228555.") == 0.0 and T.score(["22855"], " 22855.") == 1.0, "a key with an extra digit scores 0")
    tool = built_tool(build, "oscar-tasks", "task file checks")
    if tool is None:
        return
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "t.jsonl"
        r = subprocess.run([str(tool), "--model", str(ROOT / "data/stories260K/stories260K.bin"), "--tokenizer",
                            str(ROOT / "data/stories260K/tok512.bin"), "--tasks", "passkey", "--lengths", "300",
                            "--samples", "1", "--out", str(f)], capture_output=True, text=True)
        check(r.returncode == 0, f"oscar-tasks: {r.stderr.strip()}")
        samples = T.read_tasks(str(f), 512)
        check(len(samples) == 3 and all(1 <= s["question_start"] < len(s["prompt_ids"]) <= 300 for s in samples),
              "task file with ids")
        raises(lambda: T.read_tasks(str(f), 100), Refusal, "another model", what="ids beyond the vocabulary")
        rows = [json.loads(x) for x in f.read_text().splitlines()]
        del rows[1]["prompt_ids"]
        f.write_text("".join(json.dumps(x) + "\n" for x in rows))
        raises(lambda: T.read_tasks(str(f), 512), Refusal, "line 2 has no prompt_ids", what="no ids")
        f.write_text("{not json\n")
        raises(lambda: T.read_tasks(str(f), 512), Refusal, "line 1", "regenerate", what="bad JSON")


if __name__ == "__main__":
    sys.exit(main())
