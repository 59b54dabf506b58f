#!/usr/bin/env bash
# Runs mpi_rank_faults MODE under mpirun (through run_mpi_test.sh: as root
# too, loopback only, oversubscribed) and judges the job from outside,
# since a job that loses a process cannot count its own checks: mpirun
# must end by itself (not by this script's limit), within the mode's bound
# after process 1's fault, with no process of the job left behind; in the
# hang modes every other process must have failed with TD_ERR_TIMEOUT
# naming process 1, after twice the context timeout and within three
# times, and a later exchange must refuse at once; a killed process must
# be named by mpirun. Prints each check, then "N passed, N failed"; exits
# non-zero on any failure.
# Usage: run_mpi_fault_test.sh MPIRUN NP PROGRAM MODE [DEVICES_PER_PROCESS]
set -uo pipefail
mpirun=$1 np=$2 program=$3 mode=$4 devices=${5:-1}
here=$(cd "$(dirname "$0")" && pwd)

# The program's context timeout (TIMEOUT_MS in mpi_rank_faults.c).
timeout_s=2
# From process 1's fault to the end of the job. A kill: mpirun sees the
# child die and ends the job (measured: about 1 s); the issue's
# bound is a minute, and a survivor would time out by itself at 2x the
# timeout anyway, so 4x + 10 s is ample and still catches a regression to
# "waits for the timeout and more". A hang: the survivors' timeout (2x,
# at most 3x), their wait for each other's reports (at most 1x), and
# mpirun ending the job after MPI_Abort or a non-zero exit.
kill_bound=$((4 * timeout_s + 10))
hang_bound=$((4 * timeout_s + 10))
# The limit that turns a hung job into a failure, not a hung test.
outer=120

dir=$(mktemp -d "${TMPDIR:-/tmp}/tandem-rank-faults.XXXXXX")
trap 'rm -rf "$dir"' EXIT
passed=0 failed=0
check() { # check OK DESCRIPTION
    if [ "$1" = 1 ]; then
        passed=$((passed + 1))
        echo "ok: $2"
    else
        failed=$((failed + 1))
        echo "FAILED: $2"
    fi
}
is() { "$@" && echo 1 || echo 0; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }
field() { sed -n "s/^$2 //p" "$1" 2>/dev/null; }

"$here/run_mpi_test.sh" "$mpirun" "$np" "$program" "$mode" "$dir" "$devices" >"$dir/out" 2>&1 &
job=$!
# The outer limit, polled here rather than by `timeout`: mpirun's own exit
# status can be 124 or 137 too (a process killed by SIGKILL), so only a
# mark says the limit was hit.
hit_limit=0 started=$SECONDS
while kill -0 "$job" 2>/dev/null; do
    if ((SECONDS - started >= outer + 10)); then
        kill -KILL "$job" 2>/dev/null
    elif ((SECONDS - started >= outer && !hit_limit)); then
        hit_limit=1
        kill -TERM "$job" 2>/dev/null # run_mpi_test.sh's timeout passes it on to mpirun
    fi
    sleep 0.05
done
end=$(date +%s.%N)
wait "$job"
rc=$?
sed 's/^/| /' "$dir/out"

check $((1 - hit_limit)) "mpirun ended by itself within ${outer} s (exit status $rc)"
# Any process of this job still alive (the directory is in its command
# line, so nothing else matches) hung past the job's end: report and end it.
if command -v pgrep >/dev/null; then
    mapfile -t left < <(pgrep -f -- "$dir")
    check "$(is test "${#left[@]}" = 0)" "no process of the job is left behind${left[*]:+ (left: ${left[*]})}"
    ((${#left[@]})) && kill -KILL "${left[@]}" 2>/dev/null
else
    echo "(no pgrep: leftover processes not checked)"
fi
check "$(is test -z "$(grep -E '^process [0-9]+: FAILED' "$dir/out")")" "no process reported a failed check"

if [ "$mode" = none ]; then
    check "$(is test "$rc" = 0)" "the job without a fault succeeded"
    check "$(is grep -Eq '^[1-9][0-9]* passed, 0 failed$' "$dir/out")" "its processes' checks passed"
    check "$(is test ! -e "$dir/fault")" "no fault was injected"
else
    check "$(is test "$rc" != 0)" "the job failed (exit status $rc)"
    fault=$(cat "$dir/fault" 2>/dev/null)
    check "$(is test -n "$fault")" "process 1 recorded its fault"
    took=$(awk -v a="${fault:-0}" -v b="$end" 'BEGIN { printf "%.2f", b - a }')
    if [ "$mode" = kill ]; then
        check "$(is le "$took" "$kill_bound")" \
            "the job ended ${took} s after process 1 was killed (bound ${kill_bound} s)"
        check "$(is grep -Eq 'process rank 1 .*signal 9' "$dir/out")" "mpirun names process 1 and its signal"
    else
        check "$(is le "$took" "$hang_bound")" \
            "the job ended ${took} s after process 1 stopped (bound ${hang_bound} s)"
        for ((q = 0; q < np; q++)); do
            [ "$q" = 1 ] && continue
            f="$dir/process-$q"
            check "$(is test -e "$f")" \
                "process $q reported: $(field "$f" call) -> $(field "$f" status) after $(field "$f" elapsed_ms) ms"
            check "$(is test "$(field "$f" status)" = TD_ERR_TIMEOUT)" "process $q: the status is TD_ERR_TIMEOUT"
            check "$(is grep -q '^message .*process(es) 1[ ,]' "$f")" "process $q: the message names process 1"
            ms=$(field "$f" elapsed_ms)
            check "$(is le $((2000 * timeout_s)) "${ms:-0}")" "process $q: waited at least 2x the timeout (${ms} ms)"
            check "$(is le "${ms:-1e9}" $((3000 * timeout_s)))" "process $q: failed within 3x the timeout (${ms} ms)"
            case $mode in
            hang | hang-exit | hang-overlap) want=3 ;;
            *) want=0 ;;
            esac
            check "$(is test "$(field "$f" steps_ok)" = "$want")" "process $q: $want steps succeeded before"
            # A context that joined (all but hang-join) refuses what follows.
            if [ "$mode" != hang-join ]; then
                after=$(field "$f" after_ms)
                refused=$(field "$f" after_status)
                check "$(is test "$refused" = TD_ERR_STATE)" "process $q: a later exchange is refused ($refused)"
                check "$(is le "${after:-1e9}" 100)" "process $q: at once (${after} ms)"
                check "$(is grep -q '^after_message .*process(es) 1[ ,]' "$f")" "process $q: saying what failed before"
            fi
        done
    fi
fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
