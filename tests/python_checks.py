"""python_checks.py: what the Python tests share. Importing it puts the checkout's kernels/python (the package oscar_kv)
first on sys.path; check() records a failure and prints it; raises() checks that a call raises an exception of a type
whose message carries given texts; finish() prints the tally and gives the exit status (0 passed, 1 failed)."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "kernels" / "python"))
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}", flush=True)


def raises(fn, exc, *texts, what=""):
    """The message of the `exc` that fn() raises (a failure, and None, when it raises nothing or something else, or
    when the message lacks one of `texts`)."""
    try:
        fn()
    except exc as e:
        msg = str(e)
        for t in texts:
            check(t in msg, f"{what}: message {msg!r} lacks {t!r}")
        return msg
    except Exception as e:  # noqa: BLE001
        check(False, f"{what}: raised {type(e).__name__}: {e}, expected {exc.__name__}")
        return None
    check(False, f"{what}: nothing raised")
    return None


def finish():
    print(f"{len(failures)} failures" if failures else "all passed")
    return 1 if failures else 0
