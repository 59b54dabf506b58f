#!/usr/bin/env bash
# Runs a multi-process test under mpirun on this machine: NP processes in
# the tests' Open MPI environment (mpi_env.sh), bounded by a timeout.
# Usage: run_mpi_test.sh MPIRUN NP PROGRAM ARGS...
set -euo pipefail
mpirun=$1 np=$2
shift 2
source "$(dirname "$0")/mpi_env.sh"
exec timeout --kill-after=10 300 "$mpirun" -np "$np" "$@"
