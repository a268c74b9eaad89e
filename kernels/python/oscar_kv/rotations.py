"""rotations.py: reading an oscar-rotate file (HDF5: the per-layer R_K, R_V oscar-cov's kernels apply), checked against
the model that will use it; shared by the transformers integration (oscar_kv.hf) and the vLLM plugin (vllm/backend.py).
Needs h5py and numpy; errors are `error` (ValueError or a subclass) with one line naming the file and the fix."""


def open_checked(path, num_layers, head_dim, per_head=None, error=ValueError, name=None):
    """The open h5py file (close it, or use it in a with block) after checking its format, layer count, head_dim,
    matrix kinds and (per_head not None) whether it holds one matrix per KV head or per layer. path: a file name, or an
    open binary file object (then `name` stands for it in messages)."""
    import h5py
    where = path if name is None else name
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise error(f"{where}: cannot open the rotations file ({e}); make it with oscar-rotate") from None
    try:
        a = f.attrs
        if a.get("format") != "oscar-kernel-rotations":
            raise error(f"{where}: not an oscar-rotate file (format {a.get('format')!r}); make it with oscar-rotate")
        if int(a["n_layers"]) != num_layers or int(a["head_dim"]) != head_dim:
            raise error(f"{where}: rotations for {int(a['n_layers'])} layers of head_dim {int(a['head_dim'])}, the model "
                        f"has {num_layers} of head_dim {head_dim}; calibrate on this model")
        if per_head is not None and bool(int(a.get("per_kv_head", 0))) != per_head:
            raise error(f"{where}: rotations per {'KV head' if int(a.get('per_kv_head', 0)) else 'layer'}; recipe "
                        f"{'oscar-cov-head' if per_head else 'oscar-cov'} needs them per {'KV head' if per_head else 'layer'}")
        if a.get("key_kind") != "matrix" or a.get("value_kind") != "matrix":
            raise error(f"{where}: kinds {a.get('key_kind')}/{a.get('value_kind')}; oscar-cov needs matrices")
    except BaseException:
        f.close()
        raise
    return f


def layer(f, i):
    """(R_K, R_V) of layer i as numpy float arrays ([d][d] or [n][d][d])."""
    g = f[f"layer_{i:03d}"]
    return g["key_rotation"][...], g["value_rotation"][...]
