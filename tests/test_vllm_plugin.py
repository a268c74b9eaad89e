#!/usr/bin/env python3
"""test_vllm_plugin.py LIB: the vLLM plugin's parts that need neither vLLM nor a GPU.

oscar_kv.paged's layout, read from the C library (oscar_cov_paged_layout_of), against the layout of cov_paged_format.h
written out here independently (sizes and region offsets) for every compiled head_dim and bit width and several page
sizes, and against the design's Llama-3-8B table (kernels/SERVING_ENGINES.md: 147,456 B pages, 7.11x BF16); the shapes
the library refuses (a message naming the field); slot and code-address arithmetic;
the version check (0.26.x only) and the refusals (MLA, sliding windows, head_dim, fp16, ALiBi, prefix caching,
speculative decoding, page sizes), each one line naming the fix; `import oscar_kv.vllm` without vLLM raises one
ImportError line; pip install's build carries oscar_kv/vllm and oscar_kv/hf, registers the `vllm.general_plugins` entry
point, and its `vllm` extra pins the vLLM minor the plugin checks for (paged.SUPPORTED_VLLM);
experiments/device/vllm_loss_check.py reads oscar-eval's eval.json (and refuses one without token ids in one line);
experiments/vllm_bench.py's table (ratios, targets, the share in low bits, kernel kinds) from a made-up run;
vllm_plugin_check.py refuses an unknown OSCAR_CHECK_RUNS name. Exit 0 passed, 1 failed, 77 library not built.
"""
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from python_checks import ROOT, check, failures, raises  # noqa: E402


def refuses(fn, needle, what):
    """fn() raises paged.Unsupported with a one-line message carrying `needle`."""
    from oscar_kv import paged
    msg = raises(fn, paged.Unsupported, needle, what=what)
    check(msg is None or "\n" not in msg, f"{what}: message {msg!r} spans lines")


def check_layouts(lib, _capi, paged):
    """The layout the library gives (through oscar_kv.paged) against cov_paged_format.h's words, and the shapes it refuses;
    returns the number of layouts compared."""
    n = 0
    for hd in paged.HEAD_DIMS:
        for bits in (2, 4):
            for P in (64, 256, 512):
                for h in (1, 3, 8):
                    lay = paged.PagedLayout(h, hd, bits, P)
                    cb = hd * bits // 8
                    want = dict(code_bytes=cb, param_bytes=4, token_bytes=2 * (cb + 4), region_bytes=P * 2 * (cb + 4),
                                page_bytes=h * P * 2 * (cb + 4), window_slot_bytes=h * (paged.SINK + paged.RECENT) * 4 * hd)
                    got = {k: getattr(lay, k) for k in want}
                    check(got == want, f"layout P={P} Hkv={h} D={hd} bits={bits}: library {got}, cov_paged_format.h {want}")
                    check(lay.offsets() == (0, P * cb, 2 * P * cb, 2 * P * cb + 4 * P), f"region offsets P={P} D={hd} bits={bits}")
                    n += 1
    for bad, needle in (((100, 8, 128, 2), "page_tokens=100"), ((256, 8, 96, 2), "head_dim=96 bits=2"), ((256, 0, 128, 2), "num_kv_heads=0"),
                        ((256, 8, 128, 3), "head_dim=128 bits=3")):
        try:
            lib.cov_paged_layout(*bad)
            check(False, f"oscar_cov_paged_layout_of{bad} must be refused")
        except _capi.OscarError as e:
            check("oscar_cov_paged_layout_of: " + needle in e.message, f"oscar_cov_paged_layout_of{bad}: {e.message!r} lacks {needle!r}")
    try:
        lib.cov_paged_layout(256, 8, 128, 2, sink=32)
        check(False, "a sink of 32 tokens must be refused")
    except _capi.OscarError as e:
        check("sink=32" in e.message, f"sink=32: {e.message!r}")
    return n


def check_splits(lib, paged):
    """The paged decode's workspace and the engine's fixed decode split (from max_model_len or the environment)."""
    ws0 = lib.oscar_decode_workspace_bytes(16, 32, 8, 128, 32768, 1)
    ws = lib.oscar_cov_paged_workspace_bytes(16, 32, 8, 128, 32768, paged.DECODE_SPLIT_TOKENS)
    need = 16 * 8 * (-(-32768 // paged.DECODE_SPLIT_TOKENS) + 1) * 8 * (128 + 2) * 4  # partials of the fixed plan
    check(ws >= need and lib.oscar_cov_paged_workspace_bytes(16, 32, 8, 128, 32768, 0) == ws0,
          f"paged decode workspace {ws} < {need} (fixed splits), or split 0 != oscar_decode_workspace_bytes {ws0}")
    check(lib.oscar_cov_paged_workspace_bytes(16, 32, 8, 128, 32768, 100) == 0, "split_tokens 100 must give 0")
    for mml, env, want in ((8192, {}, 2048), (65535, {}, 2048), (65536, {}, 4096), (101024, {}, 4096),
                           (101024, {paged.SPLIT_ENV: "8192"}, 8192), (2048, {paged.SPLIT_ENV: " 256 "}, 256)):
        got = paged.decode_split_tokens(mml, env)
        check(got == want, f"decode_split_tokens({mml}, {env}) = {got}, want {want}")
        check(lib.oscar_cov_paged_workspace_bytes(29, 32, 8, 128, mml, got) > 0, f"the C library refuses split {got}")
    for bad in ("100", "0", "-256", "4k", "4096.0"):
        refuses(lambda: paged.decode_split_tokens(101024, {paged.SPLIT_ENV: bad}), f"{paged.SPLIT_ENV}={bad}: the decode split must be",
                f"{paged.SPLIT_ENV}={bad}")


def check_arithmetic(paged):
    """The design's Llama-3-8B numbers (8 KV heads, head_dim 128, P = 256), slots and code addresses."""
    l8 = paged.PagedLayout(8, 128, 2, 256)
    check(l8.page_bytes == 147456 and paged.PagedLayout(8, 128, 4, 256).page_bytes == 278528,
          f"Llama-3-8B page bytes {l8.page_bytes}, want 147,456 (INT2) and 278,528 (INT4)")
    check(abs(l8.bf16_ratio() - 512 / 72) < 1e-12 and l8.window_slot_bytes == 1310720,
          f"Llama-3-8B: {l8.bf16_ratio():.3f}x BF16 (want 7.111), window slot {l8.window_slot_bytes} (want 1,310,720)")
    # Slots and addresses.
    lay = paged.PagedLayout(3, 64, 2, 256)
    check(lay.slot(5, 17) == 5 * 256 + 17 and lay.page_of(5 * 256 + 17) == (5, 17), "slot <-> (page, offset)")
    kc, vc, kp, vp = lay.offsets()
    check((kc, vc, kp, vp) == (0, 256 * 16, 2 * 256 * 16, 2 * 256 * 16 + 1024), f"region offsets {lay.offsets()}")
    check(lay.code_address(lay.slot(2, 10), 1) == 2 * lay.page_bytes + lay.region_bytes + 10 * 16, "key code address")
    check(lay.code_address(lay.slot(2, 10), 1, value=True) == 2 * lay.page_bytes + lay.region_bytes + vc + 10 * 16, "value code address")
    try:
        lay.slot(0, 256)
        check(False, "an offset past the page must be refused")
    except ValueError:
        pass


def check_refusals(paged):
    """The version check and the refusals of what the paged kernels cannot serve, each one line naming the fix."""
    for ok in ("0.26.0", "0.26.3"):
        try:
            paged.check_vllm_version(ok)
        except paged.Unsupported as e:
            check(False, f"vLLM {ok} refused: {e}")
    refuses(lambda: paged.check_vllm_version("0.27.1"), "supports vLLM 0.26.x only", "vLLM 0.27.1")
    refuses(lambda: paged.check_vllm_version("0.33.0"), "pip install vllm==0.26.0", "vLLM 0.33.0")
    refuses(lambda: paged.check_layer(128, "bfloat16", use_mla=True), "MLA", "MLA")
    refuses(lambda: paged.check_layer(256, "bfloat16", sliding_window=True), "sliding-window", "sliding window")
    refuses(lambda: paged.check_layer(96, "bfloat16"), "head_dim 96", "head_dim 96")
    refuses(lambda: paged.check_layer(128, "float16"), "dtype='bfloat16'", "fp16 model")
    refuses(lambda: paged.check_layer(128, "bfloat16", alibi=True), "ALiBi", "ALiBi")
    refuses(lambda: paged.check_engine(True, False, 16), "enable_prefix_caching=False", "prefix caching")
    refuses(lambda: paged.check_engine(False, True, 16), "speculative", "speculative decoding")
    refuses(lambda: paged.PagedLayout(8, 128, 2, 100), "block size to 256", "a 100-token page")
    refuses(lambda: paged.PagedLayout(8, 128, 3, 256), "2- or 4-bit", "3 bits")
    paged.check_layer(64, "bfloat16")
    paged.check_engine(False, False, 16)


def check_import_and_packaging(lib_path):
    """Importing the plugin without vLLM is one ImportError line; pip install's build carries the subpackages, names
    vLLM's entry point, and its vllm extra pins paged's vLLM."""
    from oscar_kv import paged
    code = ("import sys; sys.modules['vllm'] = None; sys.path.insert(0, %r)\n"
            "try:\n import oscar_kv.vllm\nexcept ImportError as e:\n print('IMPORT-ERROR', e)\n" % str(ROOT / "kernels" / "python"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    line = r.stdout.strip()
    check(line.startswith("IMPORT-ERROR oscar_kv.vllm: vLLM is not installed") and "vllm==0.26.0" in line and "\n" not in line,
          f"import without vLLM: {line!r} {r.stderr[-300:]!r}")
    # Packaging: pip install's build carries the plugin subpackage, and the metadata names vLLM's entry point.
    import shutil
    import tempfile
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as src:
        shutil.copytree(ROOT / "kernels" / "python", src, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("OSCAR_")}
        env["OSCAR_BUILD"] = str(lib_path.resolve().parent.parent)
        r = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", tmp, "egg_info", "--egg-base", tmp],
                           capture_output=True, text=True, cwd=src, env=env)
        eps = list(Path(tmp).glob("*.egg-info/entry_points.txt"))
        text = eps[0].read_text() if eps else ""
        check(r.returncode == 0 and (Path(tmp) / "oscar_kv" / "vllm" / "backend.py").is_file() and
              (Path(tmp) / "oscar_kv" / "hf" / "calibration.py").is_file() and
              "[vllm.general_plugins]" in text and "oscar_kv.vllm.plugin:register" in text,
              f"setup.py build_py / egg_info: rc {r.returncode}, entry points {text!r}, {r.stderr[-300:]!r}")
        reqs = list(Path(tmp).glob("*.egg-info/requires.txt"))
        extra = reqs[0].read_text().split("[vllm]")[-1].split("[")[0] if reqs else ""
        minor = paged.SUPPORTED_VLLM.split(".")
        pin = f"vllm<{minor[0]}.{int(minor[1]) + 1},>={paged.SUPPORTED_VLLM}"
        check(pin in extra, f"the 'vllm' extra {extra.split()} does not pin the plugin's vLLM ({pin})")


def load_loss_check():
    import importlib.util
    spec = importlib.util.spec_from_file_location("vllm_loss_check", ROOT / "experiments" / "device" / "vllm_loss_check.py")
    vlc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vlc)
    return vlc


def loss_check_eval():
    """A made-up oscar-eval eval.json: passage ids, one oscar-cov@2 row, greedy continuations."""
    return {"passage": "p", "passage_ids": [1, 5, 6, 7], "greedy_context_ids": [1, 9, 9],
            "rows": [{"recipe": "fp16", "loss": 2.5, "dloss": {"mean": 0.0, "lo": 0, "hi": 0}, "quantized_share": None},
                     {"recipe": "oscar-cov@2", "loss": 2.6, "dloss": {"mean": 0.125, "lo": 0.1, "hi": 0.15}, "quantized_share": 0.55}],
            "greedy": [{"recipe": "full precision (fp32)", "ids": [3, 4], "generated": 2},
                       {"recipe": "fp16", "ids": [3, 4], "generated": 2}, {"recipe": "oscar-cov@2", "ids": [3, 8], "generated": 2}]}


def check_loss_reader(vlc, ev, tmp):
    """vllm_loss_check reads eval.json (passage ids, greedy ids) and refuses an old, truncated or missing file in one
    line; returns the good file."""
    import contextlib
    import io
    import json
    good, old = Path(tmp) / "e.json", Path(tmp) / "old.json"
    good.write_text(json.dumps(ev))
    old.write_text(json.dumps({k: v for k, v in ev.items() if k != "passage_ids"}))
    c = vlc.cases_of([str(good)])
    p0, g0 = c["passages"][0], c["greedy"][0]
    check(p0["ids"] == [1, 5, 6, 7] and abs(p0["oe_loss_fp32"] - 2.475) < 1e-12 and p0["oe_dloss"] == 0.125 and
          g0["context_ids"] == [1, 9, 9] and g0["oe_q"] == [3, 8] and g0["oe_fp32"] == [3, 4] and g0["generate"] == 2,
          f"vllm_loss_check.cases_of: {c}")
    truncated = Path(tmp) / "cut.json"
    truncated.write_text(json.dumps(ev)[:200])
    for bad, needle in ((old, "no passage_ids"), (truncated, "cannot read"), (Path(tmp) / "missing.json", "cannot read")):
        r = subprocess.run([sys.executable, "-c", "import importlib.util as u, sys; s = u.spec_from_file_location('m', sys.argv[1]); "
                            "m = u.module_from_spec(s); s.loader.exec_module(m); m.cases_of([sys.argv[2]])",
                            str(ROOT / "experiments" / "device" / "vllm_loss_check.py"), str(bad)], capture_output=True, text=True)
        check(r.returncode != 0 and needle in r.stderr and str(bad) in r.stderr and r.stderr.count("\n") == 1,
              f"vllm_loss_check on {bad.name}: rc {r.returncode}, {r.stderr!r}")
    try:  # --bits 4 needs oscar-eval's oscar-cov@4 row
        with contextlib.redirect_stderr(io.StringIO()):
            vlc.cases_of([str(good)], 4)
        check(False, "vllm_loss_check.cases_of(bits 4) accepted an eval.json without an oscar-cov@4 row")
    except SystemExit as e:
        check("no oscar-cov@4 row" in str(e.code) and "--bits 4" in str(e.code), f"vllm_loss_check bits 4 refusal: {e.code!r}")
    ev4 = json.loads(json.dumps(ev))
    ev4["rows"][1]["recipe"], ev4["greedy"][2]["recipe"] = "oscar-cov@4", "oscar-cov@4"
    four = Path(tmp) / "e4.json"
    four.write_text(json.dumps(ev4))
    c4 = vlc.cases_of([str(four)], 4)
    check(c4["passages"][0]["oe_dloss"] == 0.125 and c4["greedy"][0]["oe_q"] == [3, 8], f"vllm_loss_check.cases_of(bits 4): {c4}")
    check(vlc.shared_prefix([1, 2, 3], [1, 2, 4]) == 2 and vlc.shared_prefix([1], [1]) == 1, "shared_prefix")
    return good


def loss_verdict(vlc, good, tmp, d_int2, d_broken):
    """vllm_loss_check's exit code and loss.json with the engine's runs faked: the int2 run d_int2 above fp16, the broken
    cache d_broken above."""
    import contextlib
    import io
    import json

    def run(loss):
        return {"passages": [{"forced_ok": True, "loss": loss, "predictions": 3, "argmax": [5, 6, 1]}],
                "greedy": [{"forced_ok": True, "ids": [3, 8]}]}
    runs = {"auto": run(2.5), "graphs": run(2.5 + d_int2), "broken": run(2.5 + d_broken)}

    class Done:
        def __init__(self, mode):
            self.returncode, self.stdout, self.stderr = 0, "RESULT " + json.dumps(runs[mode]) + "\n", ""

    def fake_run(cmd, **kw):
        return Done("auto" if cmd[4] == "auto" else cmd[5])
    real, argv = vlc.subprocess.run, sys.argv
    vlc.subprocess.run, sys.argv = fake_run, ["vllm_loss_check.py", str(Path(tmp) / "out"), "MODEL", str(good)]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            vlc.main()
        rc = 0
    except SystemExit as e:
        rc = e.code
    finally:
        vlc.subprocess.run, sys.argv = real, argv
    return rc, json.loads((Path(tmp) / "out" / "loss.json").read_text())


def check_loss_check():
    """The engine loss check: its reader of oscar-eval's eval.json, and its verdict: within 0.02 and the broken cache
    caught passes; an engine Δloss 0.05 off, or a broken cache that looks right, fails (the check can fail)."""
    import json
    import tempfile
    vlc, ev = load_loss_check(), loss_check_eval()
    with tempfile.TemporaryDirectory() as tmp:
        good = check_loss_reader(vlc, ev, tmp)
        ev["fp32_argmax_ids"], ev["rows"][1]["argmax_ids"] = [5, 6, 0], [5, 6, 1]
        good.write_text(json.dumps(ev))
        rc, res = loss_verdict(vlc, good, tmp, 0.130, 2.3)
        check(rc == 0 and res["within"] and res["broken_caught"] and abs(res["pooled_engine"] - 0.130) < 1e-9 and
              res["top1_agreement"]["vLLM int2 vs oscar-eval oscar-cov@2"] == 1.0, f"loss check verdict (good): rc {rc}, {res}")
        rc, res = loss_verdict(vlc, good, tmp, 0.175, 2.3)
        check(rc == 1 and not res["within"], f"loss check verdict (Δloss 0.05 off): rc {rc}")
        rc, res = loss_verdict(vlc, good, tmp, 0.130, 0.126)
        check(rc == 1 and not res["broken_caught"], f"loss check verdict (broken cache not caught): rc {rc}")


def main():
    lib_path = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    if lib_path is None or not lib_path.is_file():
        print(f"SKIPPED: the kernel library {lib_path} is not built")
        return 77
    os.environ["OSCAR_KERNELS_LIB"] = str(lib_path)  # the library oscar_kv.paged reads its layout from
    from oscar_kv import _capi, paged
    lib = _capi.load(lib_path)
    n = check_layouts(lib, _capi, paged)
    check_splits(lib, paged)
    check_arithmetic(paged)
    check_refusals(paged)
    check_import_and_packaging(lib_path)
    check_loss_check()
    check_bench_table()
    check_plugin_check_runs()
    print(f"{n} library layouts against cov_paged_format.h; refusals, arithmetic, packaging, the loss check's reader and the serving "
          f"table checked")
    if failures:
        print(f"FAILED: {len(failures)} check(s)")
        return 1
    print("PASSED")
    return 0


def check_bench_table():
    """experiments/vllm_bench.py's table: ratios to vLLM's own caches of the same run, the targets' verdicts, the share
    of the cache in low bits, a failed run's note, and the profiled kernels' kinds (TurboQuant's Triton decode)."""
    import importlib.util
    import json
    import tempfile
    spec = importlib.util.spec_from_file_location("vllm_bench", ROOT / "experiments" / "vllm_bench.py")
    vb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vb)
    for name, kind in (("_tq_decode_stage1", "attention"), ("_fwd_kernel_stage2", "attention"), ("void oscar::kernels::decode_kernel<128, 2>", "attention"),
                       ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16>", "kv write"), ("paged_write_kernel<128, 2, true>", "kv write"),
                       ("nvjet_sm90_tst_128x8_64x12", "GEMM"), ("triton_red_fused_add_rms_norm", "other kernels")):
        check(vb.kernel_kind(name) == kind, f"vllm_bench.kernel_kind({name!r}) = {vb.kernel_kind(name)!r}, want {kind!r}")
    split = {"gpu_ms_per_step": {"kv write": 0.2, "attention": 23.0, "GEMM": 5.8, "other kernels": 1.1}, "gpu_busy_ms": 30.1}
    run = lambda cap, tok, tpot, conc, **kw: dict({"capacity_tokens": cap, "output_tok_s": tok, "tpot_ms": tpot, "concurrency": conc,
                                                   "ttft_mean_s": 10.0, "max_seqs": 64, "split": split}, **kw)
    res = {"config": {"num_hidden_layers": 32},
           "settings": {"prompt": 100000, "output": 1024, "max_seqs": 64, "util": 0.9, "measure_steps": 32},
           "runs": {"auto": run(444528, 170.0, 23.6, 4, device="NVIDIA H100 80GB HBM3"), "fp8": run(889056, 310.0, 25.8, 8),
                    "oscar_cov_int2": run(3001600, 948.0, 30.6, 25, decode_split_tokens=4096),
                    "int4_per_token_head": {"rc": "timeout", "max_seqs": 8, "note": "prefill too slow"}}}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.md"
        vb.write_md(res, str(path))
        md = path.read_text()
    rows = {}
    for line in md.splitlines():  # the main table's row of each cache (the split table repeats the names)
        if line.startswith("| "):
            rows.setdefault(line.split(" | ")[0].strip("| "), line)
    int2 = rows.get("oscar_cov_int2", "")
    check("on NVIDIA H100 80GB HBM3" in md and "(int4_per_token_head: 8)" in md, f"bench table header: {md.splitlines()[0]!r}")
    check("| 6.75x | 3.38x |" in int2 and "| 5.58x | 3.06x |" in int2 and "99.7% at 2 bits" in int2 and "25 of 29 that fit" in int2,
          f"bench table row: {int2!r}")
    check("failed (rc timeout): prefill too slow" in rows.get("int4_per_token_head", ""), "bench table: a failed run's note")
    check("decode tok/s 5.58x BF16 (missed: >= 6.0x), 3.06x fp8 (met: >= 3.0x)" in md and "KV capacity 6.75x BF16 (met: >= 6.5x)" in md,
          "bench table: the targets' verdicts")
    check("| oscar_cov_int2 | 30.6 | 0.2 | 23.0 | 5.8 | 1.1 | 30.1 | 0.5 |" in md, "bench table: the step's split")
    check("oscar_cov_int2: decode split 4096 tokens" in md, "bench table: the oscar cache's decode split")
    with tempfile.TemporaryDirectory() as tmp:  # --render of a missing or truncated bench.json: one line, no bench.md
        for text in (None, '{"runs": {'):
            if text is not None:
                (Path(tmp) / "bench.json").write_text(text)
            r = subprocess.run([sys.executable, str(ROOT / "experiments" / "vllm_bench.py"), tmp, "--render"], capture_output=True, text=True)
            check(r.returncode != 0 and r.stderr.count("\n") == 1 and "cannot read" in r.stderr and not (Path(tmp) / "bench.md").exists(),
                  f"vllm_bench --render on {'a truncated' if text else 'no'} bench.json: rc {r.returncode}, {r.stderr!r}")


def check_plugin_check_runs():
    """vllm_plugin_check.py refuses an unknown OSCAR_CHECK_RUNS name in one line, before any engine starts."""
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, str(ROOT / "experiments" / "device" / "vllm_plugin_check.py"), str(Path(tmp) / "out")],
                           capture_output=True, text=True, env=dict(os.environ, OSCAR_CHECK_RUNS="int2-eager,int2-bogus"), timeout=60)
    check(r.returncode != 0 and r.stderr.strip().count("\n") == 0 and "unknown run(s) int2-bogus" in r.stderr,
          f"vllm_plugin_check OSCAR_CHECK_RUNS refusal: rc {r.returncode}, {r.stderr!r}")


if __name__ == "__main__":
    sys.exit(main())
