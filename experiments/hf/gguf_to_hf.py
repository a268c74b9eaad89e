#!/usr/bin/env python3
"""gguf_to_hf.py GGUF OUT_FOLDER: a GGUF checkpoint (e.g. SmolLM2-135M-Instruct.Q4_1.gguf) as a Hugging Face folder
(config, float32 safetensors, tokenizer), through transformers' own GGUF loader (it dequantizes with the `gguf`
package), so that experiments/hf_eval.py can run the same weights oscar-eval reads from the GGUF.
Errors: one line `gguf_to_hf.py: error: ...; what to do`, exit 1; OUT_FOLDER is written only when everything loaded.
"""
import os
import shutil
import sys
import tempfile

PROG = "gguf_to_hf.py"


def fail(msg):
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    sys.exit(1)


def main(argv):
    if len(argv) != 2:
        print(f"usage: {PROG} GGUF OUT_FOLDER", file=sys.stderr)
        return 2
    gguf_path, out = argv
    if not os.path.isfile(gguf_path):
        fail(f"{gguf_path}: no such file; fetch it (data/fetch_smollm2.sh) or fix the path")
    if os.path.exists(out):
        fail(f"{out}: exists; remove it or name a new folder")
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
        fail(f"{out}: the folder {parent} does not exist or is not writable; create it first")
    for mod, pip in (("torch", "torch"), ("transformers", "transformers"), ("gguf", "gguf"), ("accelerate", "accelerate")):
        try:
            __import__(mod)
        except ImportError:
            fail(f"{mod} is not installed; pip install {pip}")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    folder, name = os.path.split(os.path.abspath(gguf_path))
    try:
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    except ImportError as e:  # a package the loader needs: name it, not the file
        fail(f"transformers needs a package to load a GGUF file that is not installed ({str(e).splitlines()[0][:200]}); "
             f"pip install {getattr(e, 'name', None) or 'the package named there'}")
    except KeyboardInterrupt:
        fail("interrupted while loading; nothing was written")
    except Exception as e:  # the loader's own message (unsupported architecture or tensor type, truncated file)
        fail(f"{gguf_path}: transformers cannot load it ({str(e).splitlines()[0][:200]}); check that the file is complete "
             "(its sha256) and of an architecture and tensor types transformers reads")
    bad = [k for k, v in model.state_dict().items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        fail(f"{gguf_path}: the weights hold NaN or infinite values (first: {bad[0]}, {len(bad)} tensors); the file is "
             "damaged: check its sha256 or fetch it again")
    # the loader marks the model as GGUF-quantized, which save_pretrained refuses: the same (dequantized) weights in
    # a plain model of the same config
    cfg = model.config
    if hasattr(cfg, "quantization_config"):
        delattr(cfg, "quantization_config")
    plain = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
    if unexpected or [k for k in missing if "lm_head" not in k]:
        fail(f"{gguf_path}: the dequantized weights do not fit the model ({len(missing)} missing, {len(unexpected)} "
             "unexpected); report the architecture")
    plain.tie_weights()
    model = plain
    tmp = tempfile.mkdtemp(prefix=".gguf_to_hf-", dir=parent)
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        os.chmod(tmp, 0o755)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    cfg = model.config
    print(f"{out}: {cfg.model_type}, {cfg.num_hidden_layers} layers, {cfg.num_attention_heads}/{cfg.num_key_value_heads} "
          f"heads, head_dim {getattr(cfg, 'head_dim', cfg.hidden_size // cfg.num_attention_heads)}, float32")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:  # Ctrl-C during the imports or the save: one line, no traceback, nothing left behind
        print(f"{PROG}: error: interrupted; nothing was written", file=sys.stderr)
        sys.exit(130)
