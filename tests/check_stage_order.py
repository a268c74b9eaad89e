#!/usr/bin/env python3
"""check_stage_order.py SRC: the stage numbers of lib/ are its include order.

lib/include/oscar/NN_name/ and lib/src/NN_name/ hold stage NN. A file of stage NN may include the headers of its own
stage and of lower-numbered stages only (stage order: README, Internals). Prints every include that reaches a higher
stage, every stage folder whose name does not follow NN_name, and every file of kernels/ that includes a header of
lib/ (the kernel library stands below the analysis library), and every stage file named in a tracked text file
(`NN_name/file.h` or `.cpp` in a comment, a script or a document) that exists in no stage, then exits 1 when there is
any; else prints the stage table with the number of files and includes per stage, and exits 0.
"""
import os
import re
import subprocess
import sys

STAGE = re.compile(r"^(\d\d)_[a-z][a-z0-9_]*$")
INCLUDE = re.compile(r'^\s*#\s*include\s*"oscar/(\d\d)_[a-z0-9_]+/[^"]+"', re.M)
NAMED = re.compile(r"(?<![\w/])(\d\d_[a-z][a-z0-9_]*/[\w/]+\.(?:h|cpp))\b")


def stage_of(path, lib):
    """The stage number of a file under lib/include/oscar/NN_x or lib/src/NN_x, else None."""
    rel = os.path.relpath(path, lib).split(os.sep)
    top = rel[2] if rel[:2] == ["include", "oscar"] and len(rel) > 3 else rel[1] if rel[0] == "src" and len(rel) > 2 else None
    if top is None:
        return None, None
    m = STAGE.match(top)
    return (int(m.group(1)) if m else -1), top


def stale_names(src, lib):
    """Every `NN_name/....h|.cpp` a tracked text file names that is neither under lib/src nor lib/include/oscar."""
    out = subprocess.run(["git", "-C", src, "ls-files", "-z"], capture_output=True, check=False)
    found = []
    for rel in (p for p in out.stdout.decode().split("\0") if p):
        try:
            text = open(os.path.join(src, rel), encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        for m in NAMED.finditer(text):
            name = m.group(1)
            if not any(os.path.exists(os.path.join(lib, base, name)) for base in ("src", "include/oscar")):
                line = text.count("\n", 0, m.start()) + 1
                found.append(f"{rel}:{line}: names {name}, which no stage of lib/ holds")
    return found


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    lib = os.path.join(src, "lib")
    bad, counts = [], {}
    for base in ("include/oscar", "src"):
        for dirpath, _, files in os.walk(os.path.join(lib, base)):
            for f in sorted(files):
                if not f.endswith((".h", ".cpp")):
                    continue
                path = os.path.join(dirpath, f)
                stage, folder = stage_of(path, lib)
                if stage is None:
                    continue
                if stage < 0:
                    bad.append(f"{os.path.relpath(path, src)}: folder {folder} is not named NN_name")
                    continue
                n = counts.setdefault(folder, [0, 0])
                n[0] += 1
                text = open(path, encoding="utf-8").read()
                for m in INCLUDE.finditer(text):
                    n[1] += 1
                    if int(m.group(1)) > stage:
                        line = text.count("\n", 0, m.start()) + 1
                        bad.append(f"{os.path.relpath(path, src)}:{line}: stage {stage:02d} includes a higher stage: "
                                   f"{m.group(0).strip()}")
    for dirpath, _, files in os.walk(os.path.join(src, "kernels")):
        for f in sorted(files):
            if f.endswith((".h", ".cpp", ".cu", ".cuh")):
                path = os.path.join(dirpath, f)
                text = open(path, encoding="utf-8").read()
                for m in INCLUDE.finditer(text):
                    line = text.count("\n", 0, m.start()) + 1
                    bad.append(f"{os.path.relpath(path, src)}:{line}: kernels/ includes the analysis library: {m.group(0).strip()}")
    bad += stale_names(src, lib)
    if bad:
        print("\n".join(bad))
        print(f"check_stage_order: {len(bad)} finding(s): includes against the stage order of lib/ (a stage includes only lower stages), or stage files named that do not exist")
        return 1
    if not counts:
        print(f"check_stage_order: no stage folders under {lib}")
        return 1
    for folder in sorted(counts):
        print(f"{folder:<14} {counts[folder][0]:>3} files {counts[folder][1]:>4} oscar/ includes")
    print(f"check_stage_order: {len(counts)} stage folders, every include reaches its own or a lower stage")
    return 0


if __name__ == "__main__":
    sys.exit(main())
