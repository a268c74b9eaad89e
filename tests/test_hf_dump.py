#!/usr/bin/env python3
"""test_hf_dump.py: experiments/hf_dump.py on tiny random models of every architecture of oscar_kv.hf.architectures.

Where torch and transformers are importable: every architecture dumps with the default (quick) check passing,
in chunks that do not divide the passage; the files carry the v2 attributes each architecture must show
(gemma2 soft-cap and windows, gemma3's two RoPE bases, phi3's partial RoPE, smollm3's NoPE layers, granite's
attention_multiplier, gpt_oss's sinks); the loss in each file equals the loss of the unmodified model (its
default attention, one pass); chunked and one-pass dumps hold the same tensors; a wrong scaling, window,
soft-cap, sink or RoPE base in the file (written there by this test, which wraps the capture's attribute writer
oscar_kv.hf.capture.write_layer_attributes and runs the script in this process) makes the check fail with exit 1 and
leaves no file; a folder of an unsupported
architecture is refused in one line naming it; --check full passes. Elsewhere it prints
"OSCAR-SKIPPED: torch/transformers not installed" and exits 0 (CTest reports it skipped).
"""
import json, os, subprocess, sys, tempfile
from pathlib import Path

try:
    import torch  # noqa: F401
    import transformers  # noqa: F401
    import h5py
    import numpy as np
except ImportError:
    print("OSCAR-SKIPPED: torch/transformers not installed")
    sys.exit(0)

ROOT = Path(__file__).resolve().parents[1]
DEV = os.environ.get("HF_DUMP_TEST_DEVICE", "cpu")  # e.g. cuda on the GPU machine
SCRIPT = ROOT / "experiments" / "hf_dump.py"
COMPARE = ROOT / "experiments" / "hf" / "compare_dumps.py"
TEXT = ROOT / "data" / "text" / "kjv.txt.gz"
sys.path.insert(0, str(SCRIPT.parent))
import hf_dump  # noqa: E402
from oscar_kv.hf import architectures, capture  # noqa: E402  (the path hf_dump put in place)

failures = 0


def check(cond, what):
    global failures
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures += 1


def run(*args):
    p = subprocess.run([sys.executable, str(SCRIPT), "--text", str(TEXT), *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def corrupt(g, meta, sinks, fault):
    """A wrong attribute where the layer has the feature: what the reproduction check must catch."""
    if fault == "scaling":
        g.attrs["scaling"] = meta["scaling"] * 1.25
    elif fault == "window" and meta["sliding_window"]:
        g.attrs["sliding_window"] = meta["sliding_window"] + 1
    elif fault == "softcap" and meta["softcap"]:
        g.attrs["softcap"] = 0.0
    elif fault == "sinks" and sinks is not None:
        del g["sinks"]
    elif fault == "theta" and meta["rotary_dim"]:
        g.attrs["rope_theta"] = meta["rope_theta"] * 10


def run_with_fault(fault, *args):
    """The script's main() in this process with `fault` written into every layer's attributes: (exit status, stderr)."""
    import contextlib
    import io
    real = capture.write_layer_attributes

    def faulty(g, meta, sinks):
        real(g, meta, sinks)
        corrupt(g, meta, sinks, fault)
    capture.write_layer_attributes, err = faulty, io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            hf_dump.main(["--text", str(TEXT), *args])
        rc = 0
    except SystemExit as e:
        rc = e.code
    finally:
        capture.write_layer_attributes = real
    return rc, err.getvalue()


def reference_loss(arch, ids):
    """Mean next-token loss of the unmodified tiny model (its default attention), one pass."""
    model, _, _, _ = hf_dump.build_random(arch, DEV, torch.float32)
    model.set_attn_implementation("sdpa" if arch not in ("gemma2", "gpt_oss") else "eager")
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids], device=DEV)).logits[0].float()
    return torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(ids[1:], device=DEV)).item()


def check_file(arch, p, T):
    """The v2 attributes architecture `arch` must show in its dump `p`; returns (token ids, the file's loss)."""
    with h5py.File(p, "r") as f:
        a = f.attrs
        L, H, Hkv, D = (int(a[k]) for k in ("n_layers", "n_heads", "n_kv_heads", "head_dim"))
        check(int(a["format_version"]) == 2 and int(a["has_pre_rope"]) == 1 and int(a["token_count"]) == T,
              f"{arch}: format_version 2, has_pre_rope 1, token_count {T}")
        cfg = json.loads(a["config_json"])
        check(a["architecture"] == cfg["model_type"] and cfg["num_hidden_layers"] == L,
              f"{arch}: architecture {a['architecture']} and config_json agree")
        lay = [f[f"layer_{i:03d}"] for i in range(L)]
        check(all(g["q"].shape == (H, T, D) and g["k"].shape == (Hkv, T, D) and g["q_pre"].shape == (H, T, D)
                  for g in lay), f"{arch}: q/k/q_pre shapes [{H}|{Hkv}, {T}, {D}]")
        attrs = [{k: g.attrs[k] for k in g.attrs} for g in lay]
        win = [int(x["sliding_window"]) for x in attrs]
        rope = [str(x["rope_convention"]) for x in attrs]
        ids = [int(t) for t in f["token_ids"][...]]
        loss = float(a["mean_next_token_loss"])
        # the tiny models' windows: mistral's on every layer, gemma2's and gpt_oss's alternating, gemma3's (checked
        # with its bases below) on the local layers; every other architecture has none
        want = {"mistral": [24] * L, "gemma2": [24, 0, 24, 0], "gpt_oss": [24, 0, 24, 0]}.get(arch, [0] * L)
        if arch != "gemma3":
            check(win == want, f"{arch}: sliding windows {win}, want {want}")
        if arch == "gemma2":
            check(all(float(x["softcap"]) == 3.0 for x in attrs), "gemma2: softcap 3 on every layer")
            check(abs(float(attrs[0]["scaling"]) - 24 ** -0.5) < 1e-12, "gemma2: scaling query_pre_attn_scalar^-0.5")
        if arch == "gemma3":
            th = [float(x["rope_theta"]) for x in attrs]
            check(win == [24, 24, 24, 0] and th == [1e4, 1e4, 1e4, 1e6], f"gemma3: local/global windows and bases ({win}, {th})")
        if arch == "phi3":
            check(all(int(x["rotary_dim"]) == D // 2 for x in attrs), f"phi3: rotary_dim {D // 2} (partial RoPE)")
            q, qp = lay[0]["q"][...], lay[0]["q_pre"][...]
            check(np.array_equal(q[..., D // 2:], qp[..., D // 2:]) and not np.allclose(q, qp),
                  "phi3: channels past rotary_dim are not rotated")
        if arch == "smollm3":
            check(rope == ["half-split", "none"] * 2 and [int(x["rotary_dim"]) for x in attrs] == [D, 0, D, 0],
                  f"smollm3: NoPE every 2nd layer ({rope})")
            check(np.array_equal(lay[1]["k"][...], lay[1]["k_pre"][...]), "smollm3: NoPE layer k_pre == k")
        if arch == "granite":
            check(all(abs(float(x["scaling"]) - 0.09) < 1e-12 for x in attrs), "granite: scaling = attention_multiplier")
        if arch == "gpt_oss":
            check(all("sinks" in g and g["sinks"].shape == (H,) for g in lay), "gpt_oss: sinks [n_heads] in every layer")
            check(str(a["rope_scaling_type"]) == "yarn", "gpt_oss: rope_scaling_type yarn")
        else:
            check(not any("sinks" in g for g in lay), f"{arch}: no sinks")
    return ids, loss


def main():
    T = 160
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "all"
        rc, out, err = run("--random", "all", "--tokens", str(T), "--chunk", "48", "--device", DEV, "--out", str(d))
        print(out, err)
        check(rc == 0, f"--random all with the quick check: exit 0 (got {rc})")
        check(out.count(": ok") == len(architectures.NAMES), "every architecture's check passed")
        for arch in architectures.NAMES:
            p = d / f"{arch}.h5"
            if not p.exists():
                check(False, f"{arch}: file written")
                continue
            ids, loss = check_file(arch, p, T)
            ref = reference_loss(arch, ids)
            check(abs(loss - ref) < 1e-4, f"{arch}: loss {loss:.6f} equals the unmodified model's {ref:.6f}")

        for arch in ("gemma2", "gpt_oss", "smollm3"):
            one = Path(tmp) / f"{arch}_one.h5"
            rc, out, err = run("--random", arch, "--tokens", str(T), "--chunk", "0", "--check", "off", "--device", DEV,
                               "--out", str(one))
            p = subprocess.run([sys.executable, str(COMPARE), str(d / f"{arch}.h5"), str(one), "--tol", "1e-5"],
                               capture_output=True, text=True)
            print(p.stdout, p.stderr)
            check(rc == 0 and p.returncode == 0, f"{arch}: chunks of 48 and one pass give the same dump")

        for arch, fault in (("llama", "scaling"), ("mistral", "window"), ("gemma2", "softcap"), ("gpt_oss", "sinks")):
            outp = Path(tmp) / f"fault_{arch}.h5"
            rc, err = run_with_fault(fault, "--random", arch, "--tokens", str(T), "--chunk", "64", "--device", DEV,
                                     "--out", str(outp))
            left = [n for n in os.listdir(tmp) if n.startswith(f".fault_{arch}")]
            check(rc == 1 and "do not reproduce" in err and not outp.exists() and not left,
                  f"{arch}: a wrong {fault} fails the check, exit 1, nothing left ({err.strip()})")

        outp = Path(tmp) / "fault_theta.h5"
        rc, err = run_with_fault("theta", "--random", "gemma3", "--tokens", str(T), "--chunk", "64", "--device", DEV,
                                 "--out", str(outp))
        check(rc == 1 and "do not describe the model's rotation" in err and not outp.exists(),
              f"gemma3: a wrong rope_theta is refused ({err.strip()})")
        rc, err = run_with_fault("none", "--random", "gemma3", "--tokens", str(T), "--chunk", "64", "--device", DEV,
                                 "--out", str(outp))
        check(rc == 0 and outp.exists(), f"the in-process run without a fault passes ({err.strip()})")

        bad = Path(tmp) / "gpt2-folder"
        bad.mkdir()
        (bad / "config.json").write_text('{"model_type": "gpt2"}')
        outp = Path(tmp) / "bad.h5"
        rc, out, err = run("--model", str(bad), "--out", str(outp))
        lines = err.strip().splitlines()
        check(rc != 0 and len(lines) == 1 and str(bad) in err and "'gpt2'" in err and "supported: llama" in err
              and not outp.exists(), f"unsupported architecture refused in one line: {err.strip()}")

        outp = Path(tmp) / "full.h5"
        rc, out, err = run("--random", "smollm3", "--check", "full", "--tokens", "96", "--chunk", "40", "--device", DEV,
                           "--out", str(outp))
        check(rc == 0 and out.count("check layer") == 4 and "check (full)" in out, "--check full: every layer checked")
    print(f"{failures} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
