#!/usr/bin/env python3
"""sass_loop.py OBJ [--cuobjdump PATH] [--kernel REGEX]: the static instruction mix of each decode kernel's body loop.

Disassembles OBJ (an object file or library holding sm_90a SASS) with cuobjdump, finds in every kernel whose name
matches --kernel (default: decode_kernel) the loop that streams the packed body (the backward branch whose range
holds the most fp16 MMAs: the quantized keys' QK) and prints its instructions by class, over the chunk and per token
(the chunk's tokens: oscar-cov 64 at INT2, 32 at INT4, from the template arguments <HD, BITS>; oscar-omni 32, its key block). A static count: every
instruction of the loop once, the rare branches (a partial last chunk, a rescale) included; ncu's inst_executed is
the dynamic count. cuobjdump ships with the CUDA toolkit, or in PyPI's nvidia-cuda-cuobjdump wheel."""
import argparse
import collections
import re
import subprocess
import sys

CLASSES = [  # (name, opcode prefixes), first match wins
    ("mma", ("HMMA",)), ("lop3", ("LOP3",)), ("mufu", ("MUFU",)), ("fp32", ("FADD", "FMUL", "FFMA", "FSEL", "FMNMX", "FSETP", "FCHK")),
    ("convert", ("F2F", "F2I", "I2F", "F2FP")), ("half2", ("HADD2", "HMUL2", "HFMA2")), ("shift/permute", ("SHF", "PRMT", "SHL", "SHR")),
    ("integer", ("IMAD", "IADD3", "ISETP", "LEA", "IMNMX", "SEL", "MOV", "UIADD3", "UMOV", "ULEA", "UISETP", "USEL", "ULOP3", "UIMAD", "USHF", "S2R", "S2UR", "CS2R", "R2UR")),
    ("shared/global", ("LDS", "STS", "LDG", "STG", "LDGSTS", "LDGDEPBAR", "DEPBAR", "LDC", "ULDC", "LD", "ST")),
    ("control", ("BRA", "BSSY", "BSYNC", "WARPSYNC", "VOTE", "SHFL", "BAR", "NOP", "EXIT", "CALL", "RET", "YIELD", "PLOP3", "P2R", "R2P")),
]


def cls(op):
    for name, prefixes in CLASSES:
        if any(op == p or op.startswith(p + ".") or op.startswith(p) for p in prefixes):
            return name
    return "other"


def kernels(text, pattern):
    cur, body = None, []
    for line in text.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            if cur and re.search(pattern, cur):
                yield cur, body
            cur, body = m.group(1), []
            continue
        m = re.match(r"\s*/\*([0-9a-f]+)\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)\s*([^;]*);", line)
        if m and cur:
            body.append((int(m.group(1), 16), m.group(3), m.group(4)))
    if cur and re.search(pattern, cur):
        yield cur, body


def body_loop(ins):
    best = None
    for addr, op, args in ins:
        if op.startswith("BRA"):
            m = re.search(r"0x([0-9a-f]+)", args)
            if m and int(m.group(1), 16) < addr:
                lo = int(m.group(1), 16)
                inside = [x for x in ins if lo <= x[0] <= addr]
                f16 = sum(1 for _, o, _a in inside if o.startswith("HMMA.16816.F32") and "BF16" not in o)
                if f16 and (best is None or f16 > best[0]):
                    best = (f16, inside)
    return best[1] if best else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("obj")
    ap.add_argument("--cuobjdump", default="cuobjdump")
    ap.add_argument("--kernel", default="decode_kernel")
    a = ap.parse_args()
    try:
        text = subprocess.run([a.cuobjdump, "-sass", a.obj], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"sass_loop: error: {a.obj}: cuobjdump failed ({e}); install the CUDA toolkit's cuobjdump or pass --cuobjdump")
    names = [n for n, _ in CLASSES] + ["other"]
    print("| kernel | tokens/chunk | loop instr. | per token | " + " | ".join(names) + " |")
    print("|---|---|---|---|" + "---|" * len(names))
    for name, ins in kernels(text, a.kernel):
        loop = body_loop(ins)
        m = re.search(r"ILi(\d+)ELi(\d+)E", name)
        if not loop or not m:
            continue
        hd, bits = int(m.group(1)), int(m.group(2))
        fmt = re.sub(r".*_(\w+?)_decode_cu.*", r"\1", name)
        ch = 32 if fmt == "omni" or bits == 4 else 64  # oscar-omni: one 32-token key block per chunk
        count = collections.Counter(cls(op) for _, op, _a in loop)
        print(f"| {fmt} hd{hd} INT{bits} | {ch} | {len(loop)} | {len(loop) / ch:.1f} | " + " | ".join(f"{count[n] / ch:.2f}" for n in names) + " |")


if __name__ == "__main__":
    main()
