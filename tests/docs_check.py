#!/usr/bin/env python3
"""docs_check.py SOURCE_DIR history|links [FILE...]: the repository's files describe the product, and its links lead
somewhere. Reads what git tracks under SOURCE_DIR (`git ls-files`), or only the FILEs given (relative to SOURCE_DIR).

history: every tracked text file (binary files, those with a NUL byte, are skipped) is scanned for words that narrate
how the project was developed: development sessions or rounds, issue numbers, commit hashes, "previously", "used to",
and "was N" comparisons. A few legitimate uses are allowed explicitly (ALLOWED below: a library class named Session,
setsid, the upstream commits and pull request that a citation pins). History lives in the commit messages.

links: in every tracked Markdown file, each link or image `[text](target)` outside code (fenced blocks and inline code
are skipped) must lead somewhere: an external target (http:, https:, mailto:) is left alone; a path, relative to the
linking file, must be a file or folder that git tracks; an `#anchor` must be a heading of the target Markdown file (or
of the linking file itself), spelled as GitHub spells it: lower case, punctuation dropped but `-` and `_`, spaces as
`-`, `-1`, `-2`, ... for repeated headings.

Each finding is printed as `file:line: what`, then the count. Exit 0: none; 1: findings; 2: usage, or SOURCE_DIR is
not a git checkout.
"""
import re
import subprocess
import sys
from pathlib import Path, PurePosixPath

RULES = [
    ("session", re.compile(r"\bsessions?\b|\bsessions?'s?", re.I)),
    ("development round", re.compile(r"\b(development|review|work) rounds?\b", re.I)),
    ("issue number", re.compile(r"\bissues? #?\d+|\bissue's\b|(?<![\w&#$/{'\"])#\d{1,5}\b(?![\w-])", re.I)),
    # 7 to 40 hex digits with a letter and a digit, not inside a longer word (a sha256 digest is 64 digits).
    ("commit hash", re.compile(r"(?<![\w.-])(?!0[bx])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w])")),
    ("previously", re.compile(r"\bpreviously\b", re.I)),
    ("used to", re.compile(r"(?<!\bis )(?<!\bare )(?<!\bbe )(?<!\bbeen )(?<!\bwas )(?<!\bwere )\bused to\b", re.I)),
    ("was N", re.compile(r"\bwas\s+[-+−~≈]?\.?\d|\(was\b", re.I)),
]

# (path, text on the line): legitimate uses, each with its reason.
ALLOWED = [
    ("tests/test_bpe_tokenizer_gemma3.cpp", "Catch::Session"),  # Catch2's class
    ("tests/test_bpe_tokenizer_smollm2.cpp", "Catch::Session"),  # Catch2's class
    ("experiments/device/bg.sh", "setsid"),  # a process session
    ("kernels/SERVING_ENGINES.md", "00b57feb7b1a2dc0e3a5a8d81eaf2a9410f91001"),  # the FlashInfer commit it cites
    ("experiments/authors_check.py", "473ff3f"),  # the authors' commits the check was run against
    ("experiments/authors_check.py", "d2109f5"),
    ("experiments/authors_check.py", "876b4d2"),
    ("kernels/SERVING_ENGINES.md", "vLLM PR #3010"),  # the upstream pull request it cites
    ("results/vllm/bench-100k-h200.json", "torch_compile_cache/77c20de437"),  # vLLM's cache folder in a run's log
    ("tests/docs_check.py", ""),  # this file names the words it looks for
]


def tracked(root):
    """The files git tracks under root, and the folders that hold them."""
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=False)
    if out.returncode != 0:
        print(f"docs_check: error: {root}: not a git checkout ({out.stderr.decode().strip()}); give the source dir")
        sys.exit(2)
    files = sorted(p for p in out.stdout.decode().split("\0") if p)
    folders = {str(parent) for f in files for parent in PurePosixPath(f).parents if str(parent) != "."}
    return files, folders


def allowed(path, line):
    """Whether a line of a file is one of the legitimate uses."""
    return any(path == p and text in line for p, text in ALLOWED)


def hits(root, path):
    """The history words of one file, a line each with the rules it breaks."""
    data = (root / path).read_bytes() if (root / path).is_file() else b""
    if b"\0" in data:
        return []
    found = []
    for n, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        if allowed(path, line):
            continue
        names = [name for name, rule in RULES if rule.search(line)]
        if names:
            found.append(f"{path}:{n}: {', '.join(names)}: {line.strip()[:160]}")
    return found


FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"\]\(([^()\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text):
    """(line number, line) of the lines outside fenced code, inline code blanked out."""
    inside = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.strip()):
            inside = not inside
            continue
        if not inside:
            yield n, re.sub(r"`[^`]*`", lambda m: "`" + "x" * (len(m.group(0)) - 2) + "`", line)


def slug(heading):
    s = re.sub(r"`", "", heading).strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(text):
    seen, out = {}, set()
    inside = False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            inside = not inside
        m = None if inside else HEADING.match(line)
        if m:
            base = slug(m.group(2))
            k = seen.get(base, 0)
            seen[base] = k + 1
            out.add(base if k == 0 else f"{base}-{k}")
    return out


def links(text):
    """(line number, target) of every link, a link's text allowed to span lines."""
    lines = list(prose_lines(text))
    joined = "\n".join(line for _, line in lines)
    starts, pos = [], 0
    for n, line in lines:
        starts.append((pos, n))
        pos += len(line) + 1
    for m in LINK.finditer(joined):
        n = max(num for p, num in starts if p <= m.start(1))
        yield n, m.group(1)


def normalised(path):
    """A relative path with its `.` and `..` parts resolved, POSIX style."""
    parts = []
    for part in path.split("/"):
        if part == "..":
            if parts:
                parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    return "/".join(parts)


def check_file(root, path, files, folders):
    """The broken links of one Markdown file."""
    text = (root / path).read_text(encoding="utf-8")
    bad = []
    for n, target in links(text):
        if re.match(r"^[a-z]+:", target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = normalised(str(PurePosixPath(path).parent / file_part)) if file_part else path
        if file_part and dest not in files and dest not in folders:
            bad.append(f"{path}:{n}: {target}: {dest} is not a tracked file or folder")
        elif anchor and dest.endswith(".md") and anchor not in anchors((root / dest).read_text(encoding="utf-8")):
            bad.append(f"{path}:{n}: {target}: {dest} has no heading whose anchor is #{anchor}")
    return bad


def main():
    if len(sys.argv) < 3 or sys.argv[2] not in ("history", "links"):
        print("usage: docs_check.py SOURCE_DIR history|links [FILE...]")
        return 2
    root, mode = Path(sys.argv[1]).resolve(), sys.argv[2]
    files, folders = tracked(root)
    if mode == "history":
        paths = sys.argv[3:] or files
        found = [h for p in paths for h in hits(root, p)]
        what = "lines speak of how the project was developed"
    else:
        paths = sys.argv[3:] or [f for f in files if f.endswith(".md")]
        found = [b for p in paths for b in check_file(root, p, set(files), folders)]
        what = "links lead nowhere"
    for f in found:
        print(f)
    print(f"docs_check {mode}: {len(found)} {what}, in {len(paths)} files read")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
