#!/usr/bin/env bash
# bg.sh start|wait|stop NAME ...: a run longer than one device call (at most 600 s), kept on the warm machine between
# calls: the machine stays lent while calls follow each other within its idle limit (30 s), so one call starts the run
# in the background and later calls wait on it, each for less than a call's limit.
#   bg.sh start NAME CMD [ARGS...]   runs CMD in its own session (setsid), output in $BG/NAME.log (BG default /tmp/bg),
#                                    its exit status in $BG/NAME.rc when it ends
#   bg.sh wait NAME SECONDS [SRC DEST]  waits until the run ends or SECONDS pass, prints the log's tail, copies folder
#                                    SRC (the run's results so far) into DEST (e.g. $OUT); exit 0 ended, 3 still running
#   bg.sh stop NAME                  stops the run's whole process group (not by a pattern, which would match the
#                                    calling command's own line)
# Each call gets a fresh copy of the tree: a run that reads the tree's files while it runs should run from a copy.
# Example (experiments/vllm_bench.py at 100K tokens, about 20 minutes for five caches):
#   call 1: cp -r kernels experiments /tmp/okv/ && cd /tmp/okv && PYTHONPATH=/tmp/okv/kernels/python bash experiments/device/bg.sh \
#             start b100 bash experiments/device/vllm_carry.sh run experiments/vllm_bench.py /tmp/b100 --prompt 100000 --output 1024
#   call k: bash experiments/device/bg.sh wait b100 540 /tmp/b100 $OUT/b100
set -uo pipefail
bg=${BG:-/tmp/bg}
die() { echo "bg: error: $*" >&2; exit 1; }
cmd=${1:-}; name=${2:-}
[ -n "$name" ] || die "usage: bg.sh start|wait|stop NAME ..."
mkdir -p "$bg"
case "$cmd" in
start)
  shift 2; [ $# -ge 1 ] || die "usage: bg.sh start NAME CMD [ARGS...]"
  [ -f "$bg/$name.pid" ] && [ ! -f "$bg/$name.rc" ] && kill -0 "$(cat "$bg/$name.pid")" 2>/dev/null && die "$name is running already"
  rm -f "$bg/$name.rc" "$bg/$name.log"
  setsid bash -c 'echo $$ > "$1.pid"; shift; "$@"; echo $? > "${0}.rc"' "$bg/$name" "$bg/$name" "$@" > "$bg/$name.log" 2>&1 < /dev/null &
  sleep 1
  echo "bg: $name started (pid $(cat "$bg/$name.pid" 2>/dev/null)), log $bg/$name.log"
  ;;
wait)
  secs=${3:-60}; src=${4:-}; dest=${5:-}
  [ -f "$bg/$name.pid" ] || die "$name: never started (bg.sh start first, on this machine)"
  end=$((SECONDS + secs))
  while [ ! -f "$bg/$name.rc" ] && [ $SECONDS -lt $end ]; do sleep 2; done
  tail -c 3000 "$bg/$name.log"
  if [ -n "$src" ] && [ -n "$dest" ] && [ -d "$src" ]; then mkdir -p "$dest" && cp -r "$src"/. "$dest"/; fi
  if [ -f "$bg/$name.rc" ]; then echo "bg: $name ended, rc $(cat "$bg/$name.rc")"; exit 0; fi
  echo "bg: $name still running"; exit 3
  ;;
stop)
  [ -f "$bg/$name.pid" ] || die "$name: never started"
  pid=$(cat "$bg/$name.pid")
  kill -TERM -- "-$pid" 2>/dev/null; sleep 3; kill -KILL -- "-$pid" 2>/dev/null
  echo "bg: $name stopped (process group $pid)"
  ;;
*) die "usage: bg.sh start|wait|stop NAME ..." ;;
esac
