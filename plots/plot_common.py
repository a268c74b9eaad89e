"""plot_common.py: how every script of plots/ ends when it cannot finish. The tools run these scripts and report
one error line themselves (lib/src/13_report/plotting.cpp), so a script prints no traceback: a failed write is
one line "oscar-plot-errno: N" (the tool turns it into its usual write error), any other failure one line
"SCRIPT: Type: message"; SIGINT/SIGTERM end it quietly with status 128+signal (the scripts set that up before
importing anything slow)."""
import os
import sys


def run(main):
    name = os.path.basename(sys.argv[0])
    try:
        main()
    except OSError as e:
        if e.errno:
            print(f"oscar-plot-errno: {e.errno} ({e.strerror}: {e.filename or ''})", file=sys.stderr)
        else:
            print(f"{name}: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        os._exit(130)
    except Exception as e:  # one line instead of a traceback; the tool names the output
        print(f"{name}: {type(e).__name__}: {e}".replace("\n", " "), file=sys.stderr)
        sys.exit(1)
