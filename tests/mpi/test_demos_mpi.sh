#!/usr/bin/env bash
# The demos under mpirun, as a user runs them (here on localhost,
# oversubscribed, as root in CI):
#   - linreg on 2 processes x cpu:1 trains exactly as one process on cpu:2
#     (the same final loss and errors in the JSON line), which reports
#     processes 2, 2 devices and bitwise-identical replicas over the job;
#   - mnist_mlp on 2 processes x cpu:1 over a few batches (a short last one
#     included) gives one process's cpu:2 losses and test accuracy: with 2
#     devices every float sum is taken in the same order;
#   - per-process specs (mpirun's MPMD form, A : B): 1 + 2 devices;
#   - only process 0 prints; a process that fails ends the job.
# Skipped (77) when the Fashion-MNIST files are missing: linreg runs anyway.
# Usage: test_demos_mpi.sh MPIRUN PATH/TO/linreg PATH/TO/mnist_mlp
set -euo pipefail
mpirun=$1
linreg=$(realpath "$2")
mlp=$(realpath "$3")
source "$(dirname "$0")/mpi_test_lib.sh"
run_timeout=120

same() { # same NAME1 NAME2 KEY...: every KEY equal in both final lines
  local a=$1 b=$2 key
  shift 2
  for key; do
    [ "$(field "$a" "$key")" = "$(field "$b" "$key")" ] || { echo "  $key: $(field "$a" "$key") vs $(field "$b" "$key")" >&2; return 1; }
  done
}

run lin2 "$mpirun" -np 2 "$linreg" --devices cpu:1
run lin1 "$linreg" --devices cpu:2
check "linreg np 2 x cpu:1 exits 0" [ "$(cat lin2.rc)" = 0 ]
check "linreg np 2: processes 2" [ "$(field lin2 processes)" = 2 ]
check "linreg np 1: processes 1" [ "$(field lin1 processes)" = 1 ]
check "linreg np 2: 2 devices over the job" [ "$(field lin2 devices)" = 2 ]
check "linreg np 2: replicas identical over the job" [ "$(field lin2 replicas_bitwise_identical)" = True ]
check "linreg np 2 x cpu:1 = one process on cpu:2 (final loss $(field lin2 final_loss) vs $(field lin1 final_loss))" \
  same lin2 lin1 final_loss max_abs_err_w abs_err_b
check "linreg np 2: only process 0 prints (one final line, one header)" \
  [ "$(grep -c '"demo":"linreg"' lin2.out)/$(grep -c '^linreg on' lin2.out)" = 1/1 ]
check "linreg np 2: same per-epoch losses" diff <(grep '^epoch' lin2.out) <(grep '^epoch' lin1.out)

# 1 + 2 devices: 300 rows over 3 devices, 100 + 200 over the processes.
run linmpmd "$mpirun" -np 1 "$linreg" --devices cpu:1 : -np 1 "$linreg" --devices cpu:2
run lin3 "$linreg" --devices cpu:3
check "linreg per-process specs: 3 devices" [ "$(field linmpmd devices)" = 3 ]
check "linreg per-process specs: replicas identical" [ "$(field linmpmd replicas_bitwise_identical)" = True ]
# Three devices may sum in another order across processes: equal to float rounding.
check "linreg per-process specs train as one process on cpu:3 ($(field linmpmd final_loss) vs $(field lin3 final_loss))" \
  python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-5 * max(1, abs(b)))' \
  "$(field linmpmd final_loss)" "$(field lin3 final_loss)"

# A process that fails ends the job (its device fails in its 2nd step).
expect_failure=1 run linfail "$mpirun" -np 1 "$linreg" --devices cpu:1 : -np 1 "$linreg" --devices 'cpu:1@fail=2'
check "a failing process ends the job at once, with an error (exit $(cat linfail.rc))" \
  [ "$(cat linfail.rc)" -ne 0 -a "$(cat linfail.rc)" -lt 124 ]
check "the failing process names itself" grep -q 'linreg (process 1 of 2): td_trainer_step failed' linfail.err

if [ ! -e /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz ] && [ ! -e /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte ]; then
  echo "$passed passed, $failed failed; mnist_mlp skipped: no Fashion-MNIST in /usr/share/datasets/fashion-mnist"
  [ "$failed" -eq 0 ] || exit 1
  exit 77
fi

# 500 examples in batches of 128: the last batch has 116, so process 1's
# rows of it are partly padding.
mlpargs=(--limit 500 --epochs 1)
run mlp2 "$mpirun" -np 2 "$mlp" "${mlpargs[@]}" --devices cpu:1
run mlp1 "$mlp" "${mlpargs[@]}" --devices cpu:2
check "mnist_mlp np 2 x cpu:1 exits 0" [ "$(cat mlp2.rc)" = 0 ]
check "mnist_mlp np 2: processes 2, 2 devices, split 64,64" \
  [ "$(field mlp2 processes)/$(field mlp2 device_count)/$(field mlp2 split)" = "2/2/[64, 64]" ]
check "mnist_mlp np 2: devices_at_end 2" [ "$(field mlp2 devices_at_end)" = 2 ]
check "mnist_mlp np 2: replicas identical over the job" [ "$(field mlp2 replicas_bitwise_identical)" = True ]
check "mnist_mlp np 2 x cpu:1 = one process on cpu:2 (test accuracy $(field mlp2 test_accuracy) vs $(field mlp1 test_accuracy))" \
  same mlp2 mlp1 test_accuracy test_loss train_loss train_accuracy
check "mnist_mlp np 2: only process 0 prints" [ "$(grep -c '"demo": "mnist_mlp"' mlp2.out)" = 1 ]

close
