#!/usr/bin/env python3
"""export_llama2c.py: a llama2.c checkpoint as a Hugging Face LlamaForCausalLM folder (config.json + model.safetensors,
float32), so that the same weights run in transformers (experiments/hf_eval.py, oscar_kv.hf) and in oscar-kv's C++ tools.

    experiments/hf/export_llama2c.py data/kjv-llama-hd128/kjv-llama-hd128.f16 --out /tmp/kjv-hf

Input: the legacy float32 file (header of 7 int32: dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size (negative:
an untied classifier follows), seq_len; then float32 token_embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3,
rms_final, freq_cis_real/imag (skipped), [wcls]) or oscar-kv's OSCKF16 form of it (checked against the float32 sha256 it
records), either possibly split into NAME.part00, NAME.part01, ... (given as NAME).
Contract: head_dim = dim / n_heads; llama2.c's RoPE rotates adjacent channel pairs (2i, 2i+1) and HF's Llama rotates
halves (i, i + head_dim/2) with the same frequency for pair i, so the rows of wq and wk are permuted per head
(row 2i -> i, row 2i+1 -> head_dim/2 + i): attention logits are unchanged, keys are a channel permutation of
llama2.c's. rope_theta 10000, rms_norm_eps 1e-5, tied embeddings when the classifier is shared,
max_position_embeddings = seq_len. The folder has no tokenizer (llama2.c's tokenizer.bin is not a HF tokenizer): give
token ids (oscar-dump's /token_ids). The folder is written under a temporary name beside --out and renamed when
complete; an existing --out is refused unless --force. Errors: one line `export_llama2c.py: error: ...`, exit 1.
"""
import argparse
import hashlib
import json
import os
import shutil
import struct
import sys
import tempfile

PROG = "export_llama2c.py"
MAGIC16 = b"OSCKF16\0"
LEGACY_HEADER = 7 * 4
F16_HEADER = 8 + 4 + 4 + LEGACY_HEADER + 32 + 8


class Refusal(Exception):
    pass


def read_bytes(path):
    """The file, or its parts PATH.part00, PATH.part01, ... joined (as oscar-kv's loader reads them)."""
    if os.path.exists(path) or not os.path.exists(path + ".part00"):
        if os.path.isdir(path):
            raise Refusal(f"{path}: a folder; give a llama2.c checkpoint file (or the NAME of NAME.part00, ...)")
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as e:
            raise Refusal(f"{path}: cannot read ({e.strerror}); give a llama2.c checkpoint")
    out, i = [], 0
    while os.path.exists(f"{path}.part{i:02d}"):
        with open(f"{path}.part{i:02d}", "rb") as f:
            out.append(f.read())
        i += 1
    return b"".join(out)


def parse_header(h, path):
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = h
    c = dict(dim=dim, hidden_dim=hidden, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv, vocab_size=abs(vocab),
             shared_classifier=vocab > 0, seq_len=seq_len)
    ok = (0 < dim <= 1 << 16 and 0 < hidden <= 1 << 18 and 0 < n_layers <= 1024 and n_heads > 0 and dim % n_heads == 0
          and n_kv > 0 and n_heads % n_kv == 0 and (dim // n_heads) % 2 == 0 and 0 < abs(vocab) <= 1 << 22
          and 0 < seq_len <= 1 << 22)
    if not ok:
        raise Refusal(f"{path}: not a llama2.c checkpoint (implausible header {list(h)}); give a legacy llama2.c .bin "
                      "or oscar-kv's OSCKF16 file")
    c["head_dim"] = dim // n_heads
    return c


def float_count(c):
    d, hd, L, hid = c["dim"], c["head_dim"], c["n_layers"], c["hidden_dim"]
    kv, qd = c["n_kv_heads"] * hd, c["n_heads"] * hd
    n = c["vocab_size"] * d + L * (2 * d + d * qd + 2 * d * kv + qd * d + 3 * d * hid) + d + c["seq_len"] * hd
    return n + (0 if c["shared_classifier"] else c["vocab_size"] * d)


def load_llama2c(path):
    """(config dict, float32 numpy array of every value after the header, sha256 of the float32 file)."""
    import numpy as np
    raw = read_bytes(path)
    if raw[:8] == MAGIC16:
        if len(raw) < F16_HEADER:
            raise Refusal(f"{path}: float16 checkpoint truncated inside its header ({len(raw)} bytes)")
        version = struct.unpack_from("<I", raw, 8)[0]
        if version != 1:
            raise Refusal(f"{path}: OSCKF16 version {version} is not supported (this reads version 1)")
        hdr = raw[16:16 + LEGACY_HEADER]
        c = parse_header(struct.unpack("<7i", hdr), path)
        stored = raw[16 + LEGACY_HEADER:16 + LEGACY_HEADER + 32].hex()
        n = struct.unpack_from("<Q", raw, 16 + LEGACY_HEADER + 32)[0]
        if n != float_count(c) or len(raw) != F16_HEADER + 2 * n:
            raise Refusal(f"{path}: float16 checkpoint size disagrees with its header ({len(raw)} bytes, expected "
                          f"{F16_HEADER + 2 * float_count(c)}); the file is truncated or a part is missing")
        values = np.frombuffer(raw, dtype="<f2", count=n, offset=F16_HEADER).astype(np.float32)
        sha = hashlib.sha256(hdr + values.astype("<f4").tobytes()).hexdigest()
        if sha != stored:
            raise Refusal(f"{path}: float16 checkpoint is corrupt (rebuilt float32 sha256 {sha} differs from the "
                          f"recorded {stored}); fetch the parts again")
        return c, values, sha
    if len(raw) < LEGACY_HEADER:
        raise Refusal(f"{path}: too short to be a llama2.c checkpoint ({len(raw)} bytes)")
    c = parse_header(struct.unpack_from("<7i", raw, 0), path)
    n = float_count(c)
    if len(raw) != LEGACY_HEADER + 4 * n:
        raise Refusal(f"{path}: {len(raw)} bytes, the header implies {LEGACY_HEADER + 4 * n}; the file is truncated or "
                      "not a llama2.c legacy checkpoint")
    return c, np.frombuffer(raw, dtype="<f4", count=n, offset=LEGACY_HEADER).copy(), hashlib.sha256(raw).hexdigest()


def adjacent_to_half(w, n_heads, head_dim):
    """Rows of a [n_heads*head_dim][in] projection reordered per head from adjacent RoPE pairs to halves."""
    return w.reshape(n_heads, head_dim // 2, 2, -1).transpose(0, 2, 1, 3).reshape(n_heads * head_dim, -1)


def hf_tensors(c, v):
    """name -> float32 numpy array in LlamaForCausalLM's naming."""
    import numpy as np
    d, hd, L, hid, V = c["dim"], c["head_dim"], c["n_layers"], c["hidden_dim"], c["vocab_size"]
    H, Hkv = c["n_heads"], c["n_kv_heads"]
    qd, kv = H * hd, Hkv * hd
    pos = 0

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        a = v[pos:pos + n].reshape(shape)
        pos += n
        return a

    emb = take(V, d)
    rms_att, wq, wk, wv = take(L, d), take(L, qd, d), take(L, kv, d), take(L, kv, d)
    wo, rms_ffn = take(L, d, qd), take(L, d)
    w1, w2, w3 = take(L, hid, d), take(L, d, hid), take(L, hid, d)
    rms_final = take(d)
    take(c["seq_len"], hd // 2)
    take(c["seq_len"], hd // 2)
    t = {"model.embed_tokens.weight": emb, "model.norm.weight": rms_final}
    if not c["shared_classifier"]:
        t["lm_head.weight"] = take(V, d)
    if pos != v.size:
        raise Refusal(f"internal: {v.size - pos} values left over after the classifier")
    for i in range(L):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = rms_att[i]
        t[p + "self_attn.q_proj.weight"] = adjacent_to_half(wq[i], H, hd)
        t[p + "self_attn.k_proj.weight"] = adjacent_to_half(wk[i], Hkv, hd)
        t[p + "self_attn.v_proj.weight"] = wv[i]
        t[p + "self_attn.o_proj.weight"] = wo[i]
        t[p + "post_attention_layernorm.weight"] = rms_ffn[i]
        t[p + "mlp.gate_proj.weight"] = w1[i]
        t[p + "mlp.down_proj.weight"] = w2[i]
        t[p + "mlp.up_proj.weight"] = w3[i]
    return {k: np.ascontiguousarray(a, dtype=np.float32) for k, a in t.items()}


def hf_config(c, name, sha):
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": c["vocab_size"],
        "hidden_size": c["dim"], "intermediate_size": c["hidden_dim"], "num_hidden_layers": c["n_layers"],
        "num_attention_heads": c["n_heads"], "num_key_value_heads": c["n_kv_heads"], "head_dim": c["head_dim"],
        "hidden_act": "silu", "max_position_embeddings": c["seq_len"], "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "rope_scaling": None, "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False,
        "tie_word_embeddings": bool(c["shared_classifier"]), "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "float32", "initializer_range": 0.02, "use_cache": True,
        "oscar_source": {"llama2c_name": name, "llama2c_sha256": sha, "rope": "rows of q/k permuted adjacent-pairs -> half-split"},
    }


def check_out(out, force):
    out = os.path.abspath(out)
    parent = os.path.dirname(out)
    if os.path.exists(out) and not os.path.isdir(out):
        raise Refusal(f"{out}: exists and is not a folder; choose another --out")
    if os.path.isdir(out) and os.listdir(out) and not force:
        raise Refusal(f"{out}: exists and is not empty; choose another --out or pass --force to replace it")
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
        raise Refusal(f"{out}: its folder {parent} does not exist or is not writable; create it or choose another --out")
    return out


def export(src, out, force=False):
    """Writes the HF folder `out` for llama2.c checkpoint `src`; returns the config dict written."""
    from safetensors.numpy import save_file
    out = check_out(out, force)
    c, values, sha = load_llama2c(src)
    name = os.path.basename(src)
    for suf in (".f16", ".bin"):
        if name.endswith(suf):
            name = name[: -len(suf)]
    tensors = hf_tensors(c, values)
    cfg = hf_config(c, name, sha)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.tmp-", dir=os.path.dirname(out))
    try:
        save_file(tensors, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        os.chmod(tmp, 0o755)
        for n in os.listdir(tmp):
            os.chmod(os.path.join(tmp, n), 0o644)
        if os.path.isdir(out):
            old = out + ".old-" + os.path.basename(tmp)
            os.rename(out, old)
            os.rename(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return cfg


def permute_rotations(src, out):
    """Rewrites an oscar-rotate file fitted on the llama2.c model (oscar-dump's keys, adjacent-pair channel order)
    for the exported HF model: the rows of every key rotation are permuted like wq/wk (R_hf[j] = R[perm[j]], so that
    k_hf R_hf = k R); value rotations are unchanged. Written atomically to `out`."""
    import h5py
    import numpy as np
    try:
        f = h5py.File(src, "r")
    except OSError as e:
        raise Refusal(f"{src}: cannot open the rotations file ({e}); make it with oscar-rotate")
    out = os.path.abspath(out)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(out)}.tmp-", dir=os.path.dirname(out))
    os.close(fd)
    try:
        with f, h5py.File(tmp, "w") as g:
            if f.attrs.get("format") != "oscar-kernel-rotations":
                raise Refusal(f"{src}: not an oscar-rotate file; make it with oscar-rotate")
            D = int(f.attrs["head_dim"])
            perm = np.concatenate([np.arange(0, D, 2), np.arange(1, D, 2)])
            for k, v in f.attrs.items():
                g.attrs[k] = v
            g.attrs["channel_order"] = "half-split (rows of key_rotation permuted by export_llama2c.py)"
            for name in f:
                if isinstance(f[name], h5py.Dataset):
                    g.create_dataset(name, data=f[name][...])
                    continue
                grp = g.create_group(name)
                for ds in f[name]:
                    m = f[name][ds][...]
                    grp.create_dataset(ds, data=np.ascontiguousarray(m[:, perm, :]) if ds == "key_rotation" else m)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv=None):
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint", nargs="?", help="llama2.c checkpoint (.bin, OSCKF16, or NAME of NAME.part00, ...)")
    ap.add_argument("--out", required=True, help="the Hugging Face folder to write (with --rotations: the file)")
    ap.add_argument("--force", action="store_true", help="replace an existing non-empty --out")
    ap.add_argument("--rotations", metavar="ROT.h5", help="instead: convert an oscar-rotate file fitted on the llama2.c "
                                                          "model to the exported model's key channel order")
    a = ap.parse_args(argv)
    try:
        if a.rotations:
            permute_rotations(a.rotations, a.out)
            print(f"{a.out}: key rotations in the half-split channel order")
            return 0
        if not a.checkpoint:
            raise Refusal("no checkpoint given; give a llama2.c checkpoint (or --rotations ROT.h5)")
        cfg = export(a.checkpoint, a.out, a.force)
    except Refusal as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except ImportError as e:
        print(f"{PROG}: error: {e.name} is not installed; install numpy and safetensors (pip install numpy safetensors)",
              file=sys.stderr)
        return 1
    except OSError as e:
        print(f"{PROG}: error: {a.out}: could not write ({e.strerror}); free space or choose another --out", file=sys.stderr)
        return 1
    print(f"{a.out}: LlamaForCausalLM, {cfg['num_hidden_layers']} layers, {cfg['num_attention_heads']} query / "
          f"{cfg['num_key_value_heads']} KV heads of head_dim {cfg['head_dim']}, vocab {cfg['vocab_size']}, "
          f"context {cfg['max_position_embeddings']}, tied embeddings: {cfg['tie_word_embeddings']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
