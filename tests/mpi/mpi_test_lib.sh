# What the shell tests under mpirun share (sourced): the Open MPI
# environment (as root, loopback only, oversubscribed) and a work folder,
# checks counted into a closing "N passed, N failed" line, runs bounded by
# a timeout with their output kept, and fields of a JSON final line.
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-mpi-test-XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# meson sets MALLOC_PERTURB_ for every test; Open MPI 4.1's mpirun itself
# then crashes (SIGSEGV) in its abort path now and then. The ranks -- our
# code -- still get it, forwarded by Open MPI; mpirun runs without.
if [ -n "${MALLOC_PERTURB_:-}" ]; then
  export OMPI_MCA_mca_base_env_list="MALLOC_PERTURB_=$MALLOC_PERTURB_"
  unset MALLOC_PERTURB_
fi
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
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
