#!/usr/bin/env python3
"""run_table.py BUILD SRC TABLE.tsv...: the bad-input and fault suite, one row per input or fault.

Each row runs a bash command in a fresh empty folder ($WORK, the current directory) and checks what a user
would see: the exit code, one `tool: error: ...` line on stderr, and which files are left behind.
Variables the command can use: $BUILD (the build folder that runs the suite, tools in $BUILD/apps),
$SRC (source root), $FIX (fixtures made once per run by fixtures.sh: small dumps, configs, broken files),
$WORK (the row's folder), $DATA (bundled data, $SRC/data), and for short rows $S260 (the stories260K model),
$HD128 (the kjv-llama-hd128 model), $TOK (the tokenizer), $KJV (the KJV text), and $PY (the Python the build
plots with: $OSCAR_PYTHON, else the build's configured OSCAR_PYTHON, else python3).
A row may hold tabs nowhere but between fields; it may set limits (`ulimit -f N`: a file-size limit, which the
tools turn into "File too large" write errors) or send signals (`timeout --preserve-status -s INT 0.5 ...`).

Row format, tab-separated; '#' starts a comment line; blank lines are skipped:
    id <TAB> exit <TAB> stderr_regex <TAB> files <TAB> command
  exit          an exit code, or '!0' for any non-zero code
  stderr_regex  Python regex searched in stderr ('-': anything)
  files         comma-separated globs relative to $WORK: 'PATTERN' must match something afterwards,
                '!PATTERN' must match nothing ('-': no check)
Rules applied to every row besides its own:
  * a non-zero exit prints exactly one line containing ': error: ' (usage errors included) and no
    Python traceback;
  * no temporary file (names containing '.tmp' or starting with '.oscar-') is left anywhere in $WORK.
Prints one line per row and, last, 'N passed, N failed'. Exit 1 when any row failed.
ROWS=REGEX in the environment runs only the rows whose id matches REGEX (re.search).
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile


def parse(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            parts = line.split("\t", 4)
            if len(parts) != 5:
                sys.exit(f"run_table: {path}:{n}: expected 5 tab-separated fields, got {len(parts)}")
            rows.append((f"{os.path.basename(path)}:{n}", *parts))
    return rows


def leftovers(work):
    bad = []
    for dirpath, dirnames, filenames in os.walk(work):
        for name in filenames + dirnames:
            if ".tmp" in name or name.startswith(".oscar-"):
                bad.append(os.path.relpath(os.path.join(dirpath, name), work))
    return bad


def check_row(row, env, root):
    where, rid, exit_spec, regex, files, cmd = row
    work = tempfile.mkdtemp(prefix=f"row-{rid}-", dir=root)
    env = dict(env, WORK=work)
    try:
        p = subprocess.run(["bash", "-c", cmd], cwd=work, env=env, capture_output=True, text=True,
                           timeout=300, stdin=subprocess.DEVNULL)
        code, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return [f"timed out after 300 s"]
    problems = []
    if exit_spec == "!0":
        if code == 0:
            problems.append("exit 0, expected non-zero")
    elif code != int(exit_spec):
        problems.append(f"exit {code}, expected {exit_spec}")
    if regex != "-" and not re.search(regex, err, re.S):
        problems.append(f"stderr does not match /{regex}/")
    if code != 0:
        errs = [l for l in err.splitlines() if ": error: " in l]
        if len(errs) != 1:
            problems.append(f"{len(errs)} lines with ': error: ' on stderr, expected exactly 1")
        if "Traceback (most recent call last)" in err:
            problems.append("a Python traceback on stderr")
    if files != "-":
        for pat in (s.strip() for s in files.split(",")):
            neg = pat.startswith("!")
            hits = glob.glob(os.path.join(work, pat[1:] if neg else pat), recursive=True)
            if neg and hits:
                problems.append(f"left {', '.join(os.path.relpath(h, work) for h in hits)}")
            if not neg and not hits:
                problems.append(f"missing {pat}")
    left = leftovers(work)
    if left:
        problems.append(f"temporary files left: {', '.join(left)}")
    if problems:
        problems.append(f"stderr was: {err.strip()[-600:]!r}")
    return problems


def build_python(build):
    if os.environ.get("OSCAR_PYTHON"):
        return os.environ["OSCAR_PYTHON"]
    try:
        with open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8") as f:
            for line in f:
                if line.startswith("OSCAR_PYTHON:") and line.strip().split("=", 1)[1]:
                    return line.strip().split("=", 1)[1]
    except OSError:
        pass
    return "python3"


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    build, src, tables = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), sys.argv[3:]
    root = tempfile.mkdtemp(prefix="oscar-bad-inputs-", dir=os.environ.get("TMPDIR", "/tmp"))
    fix = os.path.join(root, "fixtures")
    os.makedirs(fix)
    data = os.path.join(src, "data")
    env = dict(os.environ, BUILD=build, SRC=src, FIX=fix, DATA=data, PYTHONUNBUFFERED="1",
               S260=os.path.join(data, "stories260K", "stories260K.bin"),
               HD128=os.path.join(data, "kjv-llama-hd128", "kjv-llama-hd128.f16"),
               TOK=os.path.join(data, "stories260K", "tok512.bin"), KJV=os.path.join(data, "text", "kjv.txt.gz"),
               PY=build_python(build))
    mk = subprocess.run(["bash", os.path.join(os.path.dirname(__file__), "fixtures.sh")], env=env,
                        capture_output=True, text=True)
    if mk.returncode != 0:
        print(mk.stdout + mk.stderr)
        sys.exit("run_table: fixtures.sh failed")
    passed = failed = 0
    only = re.compile(os.environ["ROWS"]) if os.environ.get("ROWS") else None
    for t in tables:
        for row in parse(t):
            if only and not only.search(row[1]):
                continue
            problems = check_row(row, env, root)
            if problems:
                failed += 1
                print(f"FAIL {row[1]} ({row[0]}): " + "; ".join(problems))
            else:
                passed += 1
                print(f"ok   {row[1]}")
    print(f"{passed} passed, {failed} failed")
    if not failed:
        shutil.rmtree(root, ignore_errors=True)
    else:
        print(f"run_table: rows' folders kept in {root}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
