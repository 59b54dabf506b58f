#!/usr/bin/env bash
# `tandem train` and `tandem eval` under mpirun, as a user runs them on a
# cluster, here on localhost (oversubscribed, as root in CI):
#   - 2 processes x cpu:1 train exactly as one process on cpu:2 (the same
#     final losses in the JSON line), which reports processes 2, 2 devices
#     and bitwise-identical replicas over the whole job;
#   - a checkpoint written by 3 processes (Adam: every process's part of
#     the optimizer state) is resumed by 2 processes and by 1 process with
#     the same device count, landing on the same losses;
#   - a per-process device spec (mpirun's MPMD form, A : B) and an uneven
#     batch split over processes;
#   - tandem eval over 2 processes gives one process's test loss;
#   - only process 0 prints;
#   - the GPT (--model gpt on a small text): 2 processes x cpu:1 write the
#     checkpoint one process on cpu:2 writes, bitwise, and eval over 2
#     processes gives its validation loss.
# Usage: test_cli_mpi.sh MPIRUN PATH/TO/tandem
set -euo pipefail
mpirun=$1
tandem=$(realpath "$2")
source "$(dirname "$0")/mpi_test_lib.sh"

linreg=(train --model linreg --limit 256 --batch 32 --epochs 2)
run np2 "$mpirun" -np 2 "$tandem" "${linreg[@]}" --devices cpu:1
run one "$tandem" "${linreg[@]}" --devices cpu:2
check "np 2 x cpu:1 exits 0" [ "$(cat np2.rc)" = 0 ]
check "np 2: processes 2 in the final line" [ "$(field np2 processes)" = 2 ]
check "np 2: 2 devices over the job" [ "$(field np2 device_count)" = 2 ]
check "np 2: replicas identical over the job" [ "$(field np2 replicas_bitwise_identical)" = True ]
check "np 2 x cpu:1 trains as one process on cpu:2 (train loss $(field np2 train_loss) vs $(field one train_loss))" \
  [ "$(field np2 train_loss)" = "$(field one train_loss)" ]
check "np 2 x cpu:1 tests as one process on cpu:2" [ "$(field np2 test_loss)" = "$(field one test_loss)" ]
check "only process 0 prints: one final line" [ "$(grep -c '"command":"train"' np2.out)" = 1 ]

# Adam on generated data: the optimizer state is split over the processes.
mlp=(train --model mlp --data generated --limit 480 --batch 48 --optimizer adam)
run write3 "$mpirun" -np 3 "$tandem" "${mlp[@]}" --epochs 1 --devices cpu:1 --checkpoint ck
check "np 3 writes a checkpoint" [ -n "$(ls ck/ckpt-*.safetensors 2>/dev/null)" ]
cp -r ck ck1
run resume2 "$mpirun" -np 2 "$tandem" "${mlp[@]}" --epochs 2 --devices cpu:1 --checkpoint ck --resume
run resume1 "$tandem" "${mlp[@]}" --epochs 2 --devices cpu:2 --checkpoint ck1 --resume
check "np 2 resumes np 3's checkpoint" [ "$(cat resume2.rc)" = 0 ]
check "np 1 resumes np 3's checkpoint" [ "$(cat resume1.rc)" = 0 ]
check "resumed by 2 processes = by 1 process, same devices (train loss $(field resume2 train_loss) vs $(field resume1 train_loss))" \
  [ "$(field resume2 train_loss)" = "$(field resume1 train_loss)" ]
check "resumed by 2 processes = by 1 process (test loss)" [ "$(field resume2 test_loss)" = "$(field resume1 test_loss)" ]

# A spec per process (MPMD) and a batch that splits unevenly: 1 + 2 devices.
run mpmd "$mpirun" -np 1 "$tandem" "${linreg[@]}" --devices cpu:1 : -np 1 "$tandem" "${linreg[@]}" --devices cpu:2
run one3 "$tandem" "${linreg[@]}" --devices cpu:3
check "per-process specs: 3 devices" [ "$(field mpmd device_count)" = 3 ]
check "per-process specs: the split 11,11,10" [ "$(field mpmd split)" = "[11, 11, 10]" ]
check "per-process specs: replicas identical" [ "$(field mpmd replicas_bitwise_identical)" = True ]
# Three devices sum in another order across processes: equal to float rounding.
check "per-process specs train as one process on cpu:3 ($(field mpmd test_loss) vs $(field one3 test_loss))" \
  python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-5 * max(1, abs(b)))' \
  "$(field mpmd test_loss)" "$(field one3 test_loss)"

# A device lost in one process, --on-device-loss continue: every process
# re-plans at the same step, and the run lands where one process with the
# same devices and the same failure lands.
lossy=(train --model linreg --limit 256 --batch 32 --epochs 2 --on-device-loss continue)
run lost "$mpirun" -np 1 "$tandem" "${lossy[@]}" --devices cpu:2 : -np 1 "$tandem" "${lossy[@]}" --devices "cpu:1,cpu:1@fail=5"
run lost1 "$tandem" "${lossy[@]}" --devices "cpu:3,cpu:1@fail=5"
check "a device lost in process 1: the job goes on" [ "$(cat lost.rc)" = 0 ]
check "a device lost in process 1: 1 lost, 3 at the end" \
  [ "$(field lost devices_lost)/$(field lost devices_at_end)" = "1/3" ]
check "a device lost in process 1: replicas identical" [ "$(field lost replicas_bitwise_identical)" = True ]
check "a device lost in process 1 = one process with the same loss ($(field lost test_loss) vs $(field lost1 test_loss))" \
  python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-5 * max(1, abs(b)))' \
  "$(field lost test_loss)" "$(field lost1 test_loss)"
check "a device lost in process 1 is handled at once, not at a timeout ($(field lost seconds) s)" \
  python3 -c 'import sys; sys.exit(float(sys.argv[1]) > 20)' "$(field lost seconds)"

# The same while evaluating (run 12: after the 8 steps of epoch 1, in the
# test set's batches): the evaluation goes on without the device on every
# process, the epoch's checkpoint is there, and training goes on.
run evallost "$mpirun" -np 1 "$tandem" "${lossy[@]}" --devices cpu:2 --checkpoint cke : \
  -np 1 "$tandem" "${lossy[@]}" --devices "cpu:1,cpu:1@fail=12" --checkpoint cke
run evallost1 "$tandem" "${lossy[@]}" --devices "cpu:3,cpu:1@fail=12"
check "a device lost in process 1 while evaluating: the job goes on" [ "$(cat evallost.rc)" = 0 ]
check "a device lost while evaluating: 1 lost, 3 at the end, 2 checkpoints" \
  [ "$(field evallost devices_lost)/$(field evallost devices_at_end)/$(ls cke | grep -c safetensors)" = "1/3/2" ]
check "a device lost while evaluating = one process with the same loss ($(field evallost test_loss) vs $(field evallost1 test_loss))" \
  python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-5 * max(1, abs(b)))' \
  "$(field evallost test_loss)" "$(field evallost1 test_loss)"

# A process that fails ends the job; the last checkpoint stays whole, and
# fewer processes resume it: process 1's device fails while evaluating
# epoch 1 (run 12: 8 steps, then the test set), after the epoch's checkpoint.
started=$SECONDS
expect_failure=1 run failing "$mpirun" -np 1 "$tandem" "${linreg[@]}" --devices cpu:1 --checkpoint ckf : \
  -np 1 "$tandem" "${linreg[@]}" --devices "cpu:1@fail=12" --checkpoint ckf
check "a failing process ends the job with an error" [ "$(cat failing.rc)" != 0 ]
elapsed=$((SECONDS - started))
check "the job ended at once, not at a timeout ($elapsed s; the timeout is 60 s)" [ "$elapsed" -lt 30 ]
check "epoch 1's checkpoint is there" [ -f ckf/ckpt-00000008.safetensors ]
run resumed "$tandem" "${linreg[@]}" --devices cpu:2 --checkpoint ckf --resume
check "one process resumes the failed job's checkpoint, landing on the uninterrupted run ($(field resumed test_loss) vs $(field one test_loss))" \
  [ "$(field resumed test_loss)" = "$(field one test_loss)" ]

# --trace over 2 processes: one file, a track per device of every process.
run traced "$mpirun" -np 2 "$tandem" "${linreg[@]}" --devices cpu:2 --trace trace.json
check "--trace over 2 processes: one merged file, no part left" [ -f trace.json ] && [ ! -e trace.json.1 ]
check "--trace over 2 processes: 3 tracks (host and 2 devices) in each of 2 processes" \
  python3 -c 'import json,sys; e = json.load(open("trace.json"))["traceEvents"]
tracks = {(x["pid"], x["tid"]) for x in e if x.get("ph") == "X"}
sys.exit(tracks != {(p, t) for p in (1, 2) for t in (0, 1, 2)})'

# Evaluation over 2 processes of the checkpoint process 3 wrote.
run eval2 "$mpirun" -np 2 "$tandem" eval --checkpoint ck1 --devices cpu:2
run eval1 "$tandem" eval --checkpoint ck1 --devices cpu:4
check "eval over 2 processes x cpu:2 = one process on cpu:4 ($(field eval2 test_loss) vs $(field eval1 test_loss))" \
  python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-6 * max(1, abs(b)))' \
  "$(field eval2 test_loss)" "$(field eval1 test_loss)"

# The GPT: every process assembles the global batch (a function of seed and
# step) and binds its own rows.
python3 -c 'import random; r = random.Random(2); w = "a b c d e f g".split()
open("text.txt", "w").write("\n".join(" ".join(r.choice(w) for _ in range(8)) for _ in range(400)))'
gpt=(train --model gpt --data text.txt --layers 1 --width 16 --heads 2 --context 16 --batch 4 --steps 8 --eval-every 4)
run gpt2 "$mpirun" -np 2 "$tandem" "${gpt[@]}" --devices cpu:1 --checkpoint gck2
run gpt1 "$tandem" "${gpt[@]}" --devices cpu:2 --checkpoint gck1
check "gpt: np 2 x cpu:1 exits 0, 2 devices over the job" [ "$(cat gpt2.rc)/$(field gpt2 device_count)" = 0/2 ]
check "gpt: np 2 x cpu:1 writes one process's cpu:2 checkpoint bitwise" \
  cmp -s gck2/ckpt-00000008.safetensors gck1/ckpt-00000008.safetensors
check "gpt: the same validation loss ($(field gpt2 val_loss) vs $(field gpt1 val_loss))" \
  [ "$(field gpt2 val_loss)" = "$(field gpt1 val_loss)" ]
run gpteval "$mpirun" -np 2 "$tandem" eval --checkpoint gck2 --devices cpu:1
check "gpt: eval over 2 processes = the run's last validation" [ "$(field gpteval val_loss)" = "$(field gpt1 val_loss)" ]
check "gpt: only process 0 prints" [ "$(grep -c '"command":"train"' gpt2.out)" = 1 ]

close
