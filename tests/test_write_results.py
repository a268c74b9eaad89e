#!/usr/bin/env python3
"""test_write_results.py SOURCE_DIR: experiments/write_results.py on a copy of RESULTS.md and of the shipped results/.

Checks that every generated section is rewritten, headed by the run's stamp, and nothing outside the markers moves;
that the GPU sections change only with OSCAR_GPU_STAMP; that OSCAR_KEEP_SECTIONS keeps a section as it is; that the
computed readings agree with the data (the evaluation's recipes in order of Δloss, each once); and that a missing
table or marker stops it with one error line, RESULTS.md untouched. Exit 0 passed, 1 failed.
"""
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SRC = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
SCRIPT = SRC / "experiments" / "write_results.py"
MARK = re.compile(r"(<!-- BEGIN (\S+) -->\n)(.*?)(<!-- END \2 -->)", re.S)
GPU = {"kernel-bench", "eval-gpu-kjv-hd128"}
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}")


def run(doc, res, **env):
    e = {"PATH": "/usr/bin:/bin", **env}
    return subprocess.run([sys.executable, str(SCRIPT), str(doc), "STAMP-TEST", str(res)], capture_output=True,
                          text=True, env=e)


def sections(text):
    return {m.group(2): m.group(3) for m in MARK.finditer(text)}


def outside(text):
    return MARK.sub(lambda m: m.group(1) + m.group(4), text)


def check_rewrite(tmp, res, original):
    doc = tmp / "RESULTS.md"
    doc.write_text(original)
    r = run(doc, res, OSCAR_KEEP_SECTIONS="tasks-gemma3")
    check(r.returncode == 0, f"write_results exits 0 (got {r.returncode}: {r.stderr.strip()})")
    new = doc.read_text()
    check(outside(new) == outside(original), "the text outside the markers is left as it is")
    old_s, new_s = sections(original), sections(new)
    check(len(new_s) >= 14, f"RESULTS.md has its generated sections ({len(new_s)})")
    for name, body in new_s.items():
        kept = name in GPU or name == "tasks-gemma3"
        if kept:
            check(body == old_s[name], f"section {name} is kept without OSCAR_GPU_STAMP / with OSCAR_KEEP_SECTIONS")
        else:
            check("(STAMP-TEST" in body.splitlines()[0], f"section {name} is rewritten under the run's stamp")
    return new_s


def check_reading(new_s, res):
    ev = json.loads((res / "eval" / "kjv-hd128" / "eval.json").read_text())
    want = sorted((r for r in ev["rows"] if r["quantized_share"] is not None), key=lambda r: r["dloss"]["mean"])
    line = next((l for l in new_s["eval-kjv-hd128"].splitlines() if l.startswith("- Δloss against fp32")), "")
    got = re.findall(r"(\S+@\d) [+-]", line)
    check(got == [r["recipe"] for r in want], f"the Δloss reading lists the quantized recipes in order: {got}")
    sweep = new_s["sweep-smollm2"]
    check("Omni-Token Scaling" in sweep and "the presets at 2 bits by attention KL" in sweep,
          "the sweep's reading compares the presets and the variants")


def check_gpu(tmp, res, original):
    doc = tmp / "RESULTS.md"
    doc.write_text(original)
    r = run(doc, res, OSCAR_GPU_STAMP="GPU-STAMP")
    body = sections(doc.read_text()).get("kernel-bench", "")
    check(r.returncode == 0 and body.startswith("GPU run:") and "GPU-STAMP" in body.splitlines()[0],
          "with OSCAR_GPU_STAMP the GPU sections are rewritten under the GPU stamp")


def check_failures(tmp, res, original):
    broken = tmp / "broken-results"
    shutil.copytree(res, broken)
    (broken / "eval" / "kjv-hd128" / "eval.json").unlink()
    doc = tmp / "RESULTS.md"
    doc.write_text(original)
    r = run(doc, broken)
    check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "eval-kjv-hd128" in r.stderr,
          f"a missing table is one error naming its section (got {r.returncode}: {r.stderr.strip()})")
    check(doc.read_text() == original and not (tmp / "RESULTS.md.tmp").exists(), "RESULTS.md is untouched on failure")
    r = run(tmp / "absent.md", res)
    check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "absent.md" in r.stderr,
          "a missing RESULTS.md is one error line naming it")
    doc.write_text(original.replace("<!-- END tni -->", ""))
    r = run(doc, res)
    check(r.returncode == 1 and "<!-- BEGIN tni -->" in r.stderr, "a missing marker is refused, naming it")


def main():
    original = (SRC / "RESULTS.md").read_text()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        res = tmp / "results"
        shutil.copytree(SRC / "results", res)
        new_s = check_rewrite(tmp, res, original)
        if not failures:
            check_reading(new_s, res)
        check_gpu(tmp, res, original)
        check_failures(tmp, res, original)
    print("test_write_results: " + ("passed" if not failures else f"{len(failures)} checks failed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
