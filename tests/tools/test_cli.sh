#!/usr/bin/env bash
# Runs the built `tandem` binary as a user would: train (linreg; mlp on
# generated data with checkpoints and metrics), eval on another mesh,
# resume (bitwise the uninterrupted run), SIGTERM (exit 143, a checkpoint,
# a resume that lands on the uninterrupted run's bits), bad flags named in
# the error, --help, plot (skipped with a message without gnuplot).
# Usage: test_cli.sh PATH/TO/tandem
set -euo pipefail

tandem=$(realpath "$1")
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-cli-test-XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# expect_rc RC DESCRIPTION COMMAND...: runs the command, output in out/err.
expect_rc() {
  local want=$1 what=$2
  shift 2
  local rc=0
  "$@" >out 2>err || rc=$?
  if [ "$rc" -ne "$want" ]; then
    fail "$what: exit $rc, expected $want; stderr: $(cat err)"
    return 1
  fi
  return 0
}

# expect_error WORD DESCRIPTION COMMAND...: exit 2 and WORD in the message.
expect_usage_error() {
  local word=$1 what=$2
  shift 2
  if expect_rc 2 "$what" "$@" && ! grep -qF -- "$word" err; then
    fail "$what: the message does not name '$word': $(cat err)"
  fi
}

json_field() { # json_field FILE KEY: KEY of the file's last line (a JSON object)
  python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])[sys.argv[2]])' "$1" "$2"
}

# with_metadata SOURCE TARGET KEY [VALUE]: TARGET is the checkpoint SOURCE with
# KEY removed from its metadata, or set to VALUE (what another writer, or an
# older tandem, could have written); the tensors' bytes are unchanged.
with_metadata() {
  python3 - "$@" <<'PY'
import json, struct, sys
source, target, key = sys.argv[1:4]
raw = open(source, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
if len(sys.argv) > 4:
    header["__metadata__"][key] = sys.argv[4]
else:
    del header["__metadata__"][key]
text = json.dumps(header).encode()
open(target, "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
PY
}

echo "== help"
for sub in "" train eval plot devices; do
  if expect_rc 0 "tandem $sub --help" "$tandem" $sub --help && ! grep -q "usage" out; then
    fail "tandem $sub --help prints no usage"
  fi
done

echo "== bad command lines"
expect_usage_error "--bogus" "unknown flag" "$tandem" train --bogus
expect_usage_error "--epochs" "epochs 0" "$tandem" train --epochs 0
expect_usage_error "'x1'" "epochs not a number" "$tandem" train --epochs x1
expect_usage_error "--optimizer" "unknown optimizer" "$tandem" train --optimizer lbfgs
expect_usage_error "--model" "unknown model" "$tandem" train --model resnet
expect_usage_error "--dropout" "dropout 1" "$tandem" train --dropout 1
expect_usage_error "--lr" "lr nan" "$tandem" train --lr nan
expect_usage_error "--batch-norm" "switch with a value" "$tandem" train --batch-norm=1
expect_usage_error "--seed" "missing value" "$tandem" train --seed
expect_usage_error "--resume" "resume without a directory" "$tandem" train --resume
expect_usage_error "--checkpoint" "eval without a checkpoint" "$tandem" eval
expect_usage_error "frobnicate" "unknown command" "$tandem" frobnicate
expect_usage_error "-o" "plot without -o" "$tandem" plot m.jsonl
expect_usage_error "3 devices" "batch smaller than the mesh" "$tandem" train --model linreg --devices cpu:3 --batch 2
if expect_rc 1 "unknown device" "$tandem" train --model linreg --devices nodevice:0 && ! grep -q "nodevice" err; then
  fail "an unknown device spec is not named: $(cat err)"
fi
if expect_rc 1 "unwritable trace" "$tandem" train --model linreg --devices cpu:1 --epochs 1 --trace /nonexistent-dir/t.json &&
  ! grep -q "/nonexistent-dir/t.json" err; then
  fail "an unwritable --trace path is not named: $(cat err)"
fi

# --trace onto something that is not a regular file: refused by name before
# the run, the node left as it was (a scratch node here, never one in /dev).
mkfifo trace-fifo
if expect_rc 1 "--trace onto a FIFO" "$tandem" train --model linreg --devices cpu:1 --epochs 1 --trace trace-fifo &&
  ! grep -q "trace-fifo is a FIFO" err; then
  fail "a FIFO at the --trace path is not named: $(cat err)"
fi
[ -p trace-fifo ] || fail "--trace replaced the FIFO at its path"
if mknod trace-node c 1 3 2>/dev/null; then
  expect_rc 1 "--trace onto a character device" "$tandem" train --model linreg --devices cpu:1 --epochs 1 \
    --trace trace-node || true
  [ -c trace-node ] || fail "--trace replaced the character device at its path"
fi

echo "== linreg"
if expect_rc 0 "linreg" "$tandem" train --model linreg --devices cpu:2 --epochs 3; then
  python3 -c 'import json,sys; r=json.loads(open("out").read().strip().splitlines()[-1]); sys.exit(0 if r["test_loss"] < 0.05 and r["replicas_bitwise_identical"] else 1)' ||
    fail "linreg did not learn: $(tail -1 out)"
fi

echo "== a device that fails, and training goes on without it"
if expect_rc 0 "continue on survivors" "$tandem" train --model mlp --data generated --limit 600 --batch 60 --epochs 2 \
  --devices "cpu:3,cpu:1@fail=4" --on-device-loss continue; then
  python3 -c 'import json,sys; r=json.loads(open("out").read().strip().splitlines()[-1]); sys.exit(0 if r["devices_at_end"] == 3 and r["devices_lost"] == 1 and r["updates"] == 20 and r["replicas_bitwise_identical"] else 1)' ||
    fail "did not finish on three devices after the failure: $(tail -1 out)"
  grep -q "1 device(s) lost, continuing on 3" err || fail "the loss was not reported: $(cat err)"
fi
expect_rc 1 "fail is the default" "$tandem" train --model mlp --data generated --limit 600 --batch 60 --epochs 1 \
  --devices "cpu:3,cpu:1@fail=4" || true
expect_usage_error "--on-device-loss" "bad loss policy" "$tandem" train --on-device-loss retry

echo "== a device lost during the end-of-epoch evaluation"
# 8 steps per epoch: fail=9 makes the fourth device fail in its ninth run,
# the first batch of epoch 1's evaluation.
evalloss=(--model linreg --limit 256 --batch 32 --epochs 2 --devices "cpu:3,cpu:1@fail=9")
if expect_rc 0 "continue through an evaluation" "$tandem" train "${evalloss[@]}" --on-device-loss continue \
  --checkpoint evalloss; then
  [ -n "$(ls -A evalloss)" ] || fail "no checkpoint after a loss during the evaluation"
  [ "$(grep -c '^epoch [12]/2:' out)" -eq 2 ] || fail "not 2 epochs reported: $(cat out)"
  python3 -c 'import json,sys; r=json.loads(open("out").read().strip().splitlines()[-1]); sys.exit(0 if r["devices_at_end"] == 3 and r["devices_lost"] == 1 and r["updates"] == 16 and r["replicas_bitwise_identical"] else 1)' ||
    fail "did not finish on three devices after the loss in the evaluation: $(tail -1 out)"
  grep -q "evaluating epoch 1: 1 device(s) lost, continuing on 3" err || fail "the loss was not reported: $(cat err)"
fi
# Failing (the default policy), the evaluation takes the run down, not the
# epoch's checkpoint: that is written before the evaluation.
expect_rc 1 "an evaluation that fails" "$tandem" train "${evalloss[@]}" --checkpoint evalfail || true
[ -f evalfail/ckpt-00000008.safetensors ] || fail "the epoch's checkpoint depends on its evaluation: $(ls evalfail)"

echo "== a slow device and a speed-aware split"
if expect_rc 0 "balance auto" "$tandem" train --model mlp --data generated --limit 640 --batch 64 --epochs 2 \
  --devices "cpu:1,cpu:1@slow=3" --balance auto --metrics balance.jsonl; then
  python3 - out balance.jsonl <<'PY' || fail "auto balance did not split by speed: $(tail -1 out)"
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert r["balance"] == "auto" and sum(r["split"]) == 64 and r["split"][0] > r["split"][1], r
assert len(r["device_speeds"]) == 2 and r["device_speeds"][0] > r["device_speeds"][1], r
steps = [json.loads(l) for l in open(sys.argv[2]) if '"kind":"step"' in l]
assert [d["examples"] for d in steps[0]["devices"]] == [32, 32], steps[0]
assert [d["examples"] for d in steps[-1]["devices"]] == r["split"], steps[-1]
PY
  grep -q "batch is split anew" err || fail "the new split was not reported: $(cat err)"
fi
if expect_rc 0 "balance by weights" "$tandem" train --model linreg --devices cpu:3 --epochs 1 --batch 60 --balance 1,2,3; then
  # units of 4 (60 holds four per device): 8 20 32 finishes in 10.7, the best units allow (ideal 10 20 30: 10)
  [ "$(json_field out split)" = "[8, 20, 32]" ] || fail "--balance 1,2,3 split: $(tail -1 out)"
fi
expect_usage_error "--balance" "bad balance" "$tandem" train --balance fastest
expect_rc 1 "a weight per device" "$tandem" train --model linreg --devices cpu:3 --epochs 1 --balance 1,2 || true
grep -q "expected 3 (one per mesh device)" err || fail "a wrong weight count is not named: $(cat err)"

echo "== mlp on generated data, checkpoints and metrics"
mlp=(--model mlp --data generated --limit 300 --batch 64 --seed 3)
if expect_rc 0 "mlp train" "$tandem" train "${mlp[@]}" --devices cpu:2 --epochs 2 --checkpoint ck --metrics m.jsonl --trace t.json; then
  cp out train.out
  [ -f ck/ckpt-00000010.safetensors ] || fail "no checkpoint after 2 epochs of 5 steps: $(ls ck)"
  python3 - m.jsonl <<'PY' || fail "metrics file: $(head -c 400 m.jsonl)"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
steps = [r for r in rows if r["kind"] == "step"]
epochs = [r for r in rows if r["kind"] == "epoch"]
assert len(steps) == 10 and len(epochs) == 2, (len(steps), len(epochs))
for r in steps:
    for k in ("epoch", "step", "loss", "accuracy", "lr", "samples_per_second", "seconds"):
        assert k in r, k
    assert len(r["devices"]) == 2
    for d in r["devices"]:
        for k in ("upload", "compute", "allreduce", "update", "download"):
            assert d[k] >= 0, (k, d)
for r in epochs:
    for k in ("train_loss", "train_accuracy", "test_loss", "test_accuracy", "seconds"):
        assert k in r, k
assert steps[-1]["global_step"] == 10
trace = json.load(open("t.json"))
names = {}
for e in trace["traceEvents"]:
    if e["ph"] == "X":
        names.setdefault(e["tid"], set()).add(e["name"])
assert len(names) == 3, sorted(names)  # the host and two devices
assert {"step", "epoch", "checkpoint", "batch", "evaluate"} <= names[0], names[0]
for tid in (1, 2):
    assert {"step", "evaluate", "upload host->device", "matmul", "all-reduce", "reduce-scatter", "all-gather",
            "optimizer"} <= names[tid], names[tid]
PY
  trained=$(json_field train.out test_loss)
  echo "== eval on another mesh"
  if expect_rc 0 "eval cpu:4" "$tandem" eval --checkpoint ck --devices cpu:4; then
    evaluated=$(json_field out test_loss)
    python3 -c 'import sys; a,b=map(float,sys.argv[1:]); sys.exit(0 if abs(a-b) <= 1e-4*max(1,abs(a)) else 1)' "$trained" "$evaluated" ||
      fail "eval on cpu:4 gives test loss $evaluated, training on cpu:2 gave $trained"
  fi
  # 64 over 3 devices: shares of 22, 21, 21, weighted (td_graph_shard_weight)
  if expect_rc 0 "eval cpu:3 --batch 64" "$tandem" eval --checkpoint ck --devices cpu:3; then
    evaluated=$(json_field out test_loss)
    python3 -c 'import sys; a,b=map(float,sys.argv[1:]); sys.exit(0 if abs(a-b) <= 1e-4*max(1,abs(a)) else 1)' "$trained" "$evaluated" ||
      fail "eval on cpu:3 (uneven shares) gives test loss $evaluated, training on cpu:2 gave $trained"
  fi
  expect_rc 0 "eval cpu:3 --batch 63" "$tandem" eval --checkpoint ck --devices cpu:3 --batch 63 || true

  echo "== a checkpoint without the 'inputs' key (written before it existed, or by another writer)"
  mkdir old
  with_metadata ck/ckpt-00000010.safetensors old/ckpt-00000010.safetensors inputs
  # Such files predate standardized inputs: they read as raw, the mlp's default, so eval agrees with training.
  if expect_rc 0 "eval without 'inputs'" "$tandem" eval --checkpoint old --devices cpu:2; then
    evaluated=$(json_field out test_loss)
    python3 -c 'import sys; a,b=map(float,sys.argv[1:]); sys.exit(0 if abs(a-b) <= 1e-4*max(1,abs(a)) else 1)' "$trained" "$evaluated" ||
      fail "eval of a checkpoint without 'inputs' gives test loss $evaluated, training gave $trained"
  fi
  expect_usage_error "--inputs" "resume without 'inputs', standardized asked" "$tandem" train --devices cpu:2 --epochs 3 \
    --checkpoint old --resume --inputs standardized
  if expect_rc 0 "resume without 'inputs'" "$tandem" train --devices cpu:2 --epochs 3 --checkpoint old --resume; then
    python3 - old/ckpt-00000015.safetensors <<'PY' || fail "the run resumed from a checkpoint without 'inputs' does not record raw inputs"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
sys.exit(0 if json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])["__metadata__"]["inputs"] == "raw" else 1)
PY
  fi
  mkdir odd
  with_metadata ck/ckpt-00000010.safetensors odd/ckpt-00000010.safetensors inputs whitened
  if expect_rc 1 "eval with an unknown 'inputs'" "$tandem" eval --checkpoint odd --devices cpu:2 &&
    ! grep -q "'inputs' is 'whitened'" err; then
    fail "an unknown 'inputs' value is not named: $(cat err)"
  fi

  echo "== resume"
  expect_usage_error "already holds" "a new run in a used directory" "$tandem" train "${mlp[@]}" --devices cpu:2 --checkpoint ck
  expect_usage_error "--model" "resume with another model" "$tandem" train --model cnn --checkpoint ck --resume
  if expect_rc 0 "one epoch" "$tandem" train "${mlp[@]}" --devices cpu:2 --epochs 1 --checkpoint half &&
     expect_rc 0 "resume to two" "$tandem" train --devices cpu:2 --epochs 2 --checkpoint half --resume; then
    cmp -s ck/ckpt-00000010.safetensors half/ckpt-00000010.safetensors ||
      fail "1 + 1 epochs resumed does not write the 2-epoch run's checkpoint bitwise"
  fi
fi

echo "== resume in the middle of an epoch, with accumulation"
# 5 batches per epoch in rounds of 2: the round open at the end of epoch 1
# closes one batch into epoch 2, where the checkpoint is written (update 3).
acc=(--model mlp --data generated --limit 320 --batch 64 --accumulate 2 --devices cpu:2)
if expect_rc 0 "accumulate" "$tandem" train "${acc[@]}" --epochs 2 --checkpoint acc; then
  if [ ! -f acc/ckpt-00000003.safetensors ] || [ ! -f acc/ckpt-00000005.safetensors ]; then
    fail "accumulation checkpoints: $(ls acc)"
  else
    mkdir mid && cp acc/ckpt-00000003.safetensors mid/
    expect_rc 0 "resume mid-epoch" "$tandem" train --devices cpu:2 --checkpoint mid --resume &&
      { cmp -s acc/ckpt-00000005.safetensors mid/ckpt-00000005.safetensors ||
        fail "resumed one batch into epoch 2 does not end bitwise where the uninterrupted run did"; }
  fi
fi

echo "== SIGTERM"
long=(--model mlp --data generated --limit 4096 --batch 32 --seed 5 --devices cpu:2)
if expect_rc 0 "reference" "$tandem" train "${long[@]}" --epochs 1 --checkpoint ref; then
  "$tandem" train "${long[@]}" --epochs 1000 --checkpoint int --metrics int.jsonl >int.out 2>int.err &
  pid=$!
  for _ in $(seq 1 500); do # until its first step is on disk, at most 10 s
    [ -s int.jsonl ] && break
    sleep 0.02
  done
  kill -TERM "$pid"
  rc=0
  wait "$pid" || rc=$?
  if [ "$rc" -ne 143 ]; then
    fail "SIGTERM: exit $rc, expected 143; $(cat int.out int.err)"
  elif ! grep -q "checkpoint" int.out; then
    fail "SIGTERM: no checkpoint reported: $(cat int.out)"
  elif expect_rc 0 "resume after SIGTERM" "$tandem" train --devices cpu:2 --epochs 1 --checkpoint int --resume; then
    cmp -s ref/ckpt-00000128.safetensors int/ckpt-00000128.safetensors ||
      fail "the run stopped by SIGTERM and resumed does not match the uninterrupted one bitwise"
  fi
fi

echo "== plot"
if command -v gnuplot >/dev/null 2>&1; then
  if [ -f m.jsonl ] && expect_rc 0 "plot" "$tandem" plot m.jsonl -o curves.png; then
    [ "$(head -c 4 curves.png | od -An -c | tr -d ' ')" = "211PNG" ] || fail "plot did not write a PNG"
  fi
else
  echo "SKIP: gnuplot is not installed (gnuplot-nox); tandem plot not run"
  expect_rc 1 "plot without gnuplot" "$tandem" plot m.jsonl -o curves.png && grep -q gnuplot err ||
    fail "plot without gnuplot does not say so"
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "all CLI checks passed"
