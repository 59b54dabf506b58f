# What the shell tests under mpirun share (sourced): the Open MPI
# environment (as root, loopback only, oversubscribed) and a work folder,
# checks counted into a closing "N passed, N failed" line, runs bounded by
# a timeout with their output kept, and fields of a JSON final line.
source "$(dirname "${BASH_SOURCE[0]}")/mpi_env.sh" # before the cd below: the path may be relative
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-mpi-test-XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
passed=0
failed=0

check() { # check DESCRIPTION CONDITION-COMMAND...
  local what=$1
  shift
  if "$@"; then
    passed=$((passed + 1))
  else
    echo "FAIL: $what" >&2
    failed=$((failed + 1))
  fi
}

# run NAME COMMAND...: stdout in NAME.out, stderr in NAME.err, the exit code
# in NAME.rc; a failure shows its stderr unless expect_failure is set.
run() {
  local name=$1 rc=0
  shift
  timeout --kill-after=10 "${run_timeout:-300}" "$@" >"$name.out" 2>"$name.err" || rc=$?
  echo "$rc" >"$name.rc"
  [ "$rc" -eq 0 ] || [ -n "${expect_failure:-}" ] || { echo "$name: exit $rc" >&2; tail -5 "$name.err" >&2; }
}

field() { # field NAME KEY: KEY of NAME.out's last line (a JSON object)
  python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])[sys.argv[2]])' \
    "$1.out" "$2" 2>/dev/null || echo "missing"
}

close() { # the closing line and the exit status
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
