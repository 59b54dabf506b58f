#!/usr/bin/env bash
# Runs the built `tandem` binary as a user would: train (linreg; mlp on
# generated data with checkpoints and metrics), eval on another mesh,
# --precision bf16 (bitwise at 1 and 3 threads, not fp32's bits),
# resume (bitwise the uninterrupted run), SIGTERM (exit 143, a checkpoint,
# a resume that lands on the uninterrupted run's bits), --steps, bad flags
# named in the error, --help, plot (skipped with a message without
# gnuplot); the GPT on a small text this script writes: train, resume,
# SIGTERM, eval, sample (bytes, and GPT-2 ids with llm.c's files), --init
# from llm.c-layout weights, --recompute.
# Usage: test_cli.sh PATH/TO/tandem [PATH/TO/linreg PATH/TO/mnist_mlp]
set -euo pipefail

tandem=$(realpath "$1")
linreg=${2:+$(realpath "$2")}
mnist_mlp=${3:+$(realpath "$3")}
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

# with_transposed SOURCE TARGET: TARGET is the checkpoint SOURCE with its
# first non-square matrix's shape reversed: a well-formed file, with the
# same bytes and metadata, that no trainer of the run's model takes.
with_transposed() {
  python3 - "$@" <<'PY'
import json, struct, sys
source, target = sys.argv[1:3]
raw = open(source, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
name = next(k for k, v in header.items() if k != "__metadata__" and len(v["shape"]) == 2 and v["shape"][0] != v["shape"][1])
header[name]["shape"].reverse()
text = json.dumps(header).encode()
open(target, "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
PY
}

echo "== help"
for sub in "" train eval plot devices sample "train --model gpt"; do
  if expect_rc 0 "tandem $sub --help" "$tandem" $sub --help && ! grep -q "usage" out; then
    fail "tandem $sub --help prints no usage"
  fi
done

echo "== version"
for v in version --version; do
  if expect_rc 0 "tandem $v" "$tandem" $v && ! grep -qE '^tandem [0-9]+\.[0-9]+\.[0-9]+$' out; then
    fail "tandem $v prints no version: $(cat out)"
  fi
done
# Uneven shards exist: the batch need not be a multiple of the devices.
"$tandem" train --help | grep -q "multiple of the device" && fail "train --help: the batch as a multiple of the devices"

echo "== the demos' command lines"
if [ -n "$linreg" ]; then
  if expect_rc 0 "linreg --help" "$linreg" --help && ! grep -q "usage" out; then
    fail "linreg --help prints no usage: $(cat out)"
  fi
  expect_usage_error "--bogus" "linreg --bogus" "$linreg" --bogus
  # Four simulated devices are four instances of cpu:0: each line names its own.
  if expect_rc 0 "linreg cpu:2" "$linreg" --devices cpu:2; then
    grep -q "\[0\] cpu:0#1 " out && grep -q "\[1\] cpu:0#2 " out || fail "linreg's device labels: $(head -3 out)"
  fi
fi
if [ -n "$mnist_mlp" ] && expect_rc 0 "mnist_mlp --help" "$mnist_mlp" --help; then
  cat err >>out # its usage goes to stderr
  grep -qi "convolution" out && ! grep -qi "mlp's hidden" out && fail "mnist_mlp --help speaks of convolutions only"
fi

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
expect_usage_error "--steps" "epochs and steps" "$tandem" train --model linreg --epochs 2 --steps 10
expect_usage_error "--accumulate 2" "steps not a multiple of accumulate" "$tandem" train --model mlp --steps 3 --accumulate 2
expect_usage_error "--heads 3" "gpt heads not dividing width" "$tandem" train --model gpt --heads 3
expect_usage_error "'0'" "gpt layers 0" "$tandem" train --model gpt --layers 0
expect_usage_error "'x'" "gpt steps not a number" "$tandem" train --model gpt --steps x
expect_usage_error "--epochs" "an mlp flag for the gpt" "$tandem" train --model gpt --epochs 2
expect_usage_error "--checkpoint" "sample without a checkpoint" "$tandem" sample
expect_usage_error "'-1'" "sample temperature -1" "$tandem" sample --checkpoint x --temperature -1
expect_usage_error "'a,b'" "sample ids not numbers" "$tandem" sample --checkpoint x --prompt-ids a,b
# A spec naming no device is a bad value (exit 2, as the README says); a
# backend that is there but refuses would be a failure (1).
expect_usage_error "nodevice" "unknown device" "$tandem" train --model linreg --devices nodevice:0
expect_usage_error "gpu:0" "gpu:0 is no backend" "$tandem" train --model linreg --devices gpu:0
expect_usage_error "cpu:0" "zero devices" "$tandem" train --model linreg --devices cpu:0
if expect_rc 1 "unwritable trace" "$tandem" train --model linreg --devices cpu:1 --epochs 1 --trace /nonexistent-dir/t.json &&
  ! grep -q "/nonexistent-dir/t.json" err; then
  fail "an unwritable --trace path is not named: $(cat err)"
fi

# write_idx_split DIR SPLIT N H W: an MNIST-layout split of N images of H x W
# (plain IDX files), labels 0..9 in turn.
write_idx_split() {
  python3 - "$@" <<'PY'
import os, struct, sys
folder, split, n, h, w = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
os.makedirs(folder, exist_ok=True)
with open(f"{folder}/{split}-images-idx3-ubyte", "wb") as f:
    f.write(struct.pack(">IIII", 0x803, n, h, w) + bytes(i % 251 for i in range(n * h * w)))
with open(f"{folder}/{split}-labels-idx1-ubyte", "wb") as f:
    f.write(struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n)))
PY
}

# Datasets are checked when they are read, not an epoch later: test images
# of another size than the training images, and an empty training split.
write_idx_split odd-idx train 8 6 6
write_idx_split odd-idx t10k 4 5 5
if expect_rc 1 "test images of another size" "$tandem" train --model mlp --data odd-idx --devices cpu:1 --epochs 1 --batch 4; then
  grep -q "test images (t10k) are 5 x 5, expected the training images' 6 x 6" err || fail "the size mismatch is not named: $(cat err)"
fi
write_idx_split empty-idx train 0 6 6
write_idx_split empty-idx t10k 4 6 6
if expect_rc 1 "an empty training split" "$tandem" train --model mlp --data empty-idx --devices cpu:1 --epochs 1 --batch 4; then
  grep -q "holds 0 images" err || fail "an empty training split is not named: $(cat err)"
fi

# --timeout bounds every wait: an injected hang fails the step within about
# 4 x the timeout, not the default 60 s's 240 s.
started=$SECONDS
if expect_rc 1 "a hang under --timeout 0.5" timeout 60 "$tandem" train --model linreg --devices "cpu:2@hang=3" --epochs 1 \
    --timeout 0.5; then
  grep -q "TD_ERR_TIMEOUT.*within 2000 ms" err || fail "a hang under --timeout 0.5 is not a 2 s timeout: $(cat err)"
  [ $((SECONDS - started)) -lt 30 ] || fail "a hang under --timeout 0.5 took $((SECONDS - started)) s"
fi
expect_usage_error "--timeout" "timeout 0" "$tandem" train --timeout 0
expect_usage_error "--timeout" "eval timeout 0" "$tandem" eval --checkpoint x --timeout 0

# A metrics file that cannot be written says why, naming it.
if [ -w /dev/full ] && expect_rc 1 "metrics to a full device" "$tandem" train --model linreg --devices cpu:1 --epochs 1 \
    --metrics /dev/full; then
  grep -q "writing --metrics '/dev/full': No space left on device" err || fail "a failed --metrics write gives no reason: $(cat err)"
fi

# A diverging run stops at the first non-finite loss, saying where, and
# writes no checkpoint of that state; its metrics lines stay valid JSON.
if expect_rc 1 "a diverging run" "$tandem" train --model linreg --devices cpu:1 --epochs 1 --lr 1000 \
    --checkpoint div --metrics div.jsonl; then
  grep -q "the training loss is inf" err || fail "a diverged run does not say so: $(cat err)"
  python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' div.jsonl ||
    fail "the diverged run's metrics are not JSON: $(tail -c 300 div.jsonl)"
  [ -z "$(ls div)" ] || fail "the diverged run saved a checkpoint: $(ls div)"
fi

# A seed above 2^63 (--seed takes any uint64) resumes: the checkpoint's
# metadata is read back as a uint64.
expect_rc 0 "train with seed 2^64-1" "$tandem" train --model linreg --devices cpu:1 --epochs 1 \
  --seed 18446744073709551615 --checkpoint seed-ck
expect_rc 0 "resume with seed 2^64-1" "$tandem" train --model linreg --devices cpu:1 --epochs 2 --checkpoint seed-ck \
  --resume

echo "== eval of one checkpoint file; a corrupt newest checkpoint is skipped, and said"
if expect_rc 0 "eval of a file" "$tandem" eval --checkpoint seed-ck/ckpt-00000032.safetensors --devices cpu:1; then
  grep -q '"checkpoint":"seed-ck/ckpt-00000032.safetensors"' out || fail "eval of a file evaluated another: $(tail -1 out)"
fi
mkdir torn && cp seed-ck/ckpt-00000032.safetensors seed-ck/ckpt-00000064.safetensors torn/
head -c 200 seed-ck/ckpt-00000064.safetensors >torn/ckpt-00000064.safetensors
if expect_rc 0 "eval past a torn checkpoint" "$tandem" eval --checkpoint torn --devices cpu:1; then
  grep -q "warning: .*torn/ckpt-00000064.safetensors" err || fail "the torn checkpoint was skipped silently: $(cat err)"
  grep -q '"checkpoint":"torn/ckpt-00000032.safetensors"' out || fail "eval did not fall back: $(tail -1 out)"
fi

echo "== --resume with no checkpoint yet starts a new run"
if expect_rc 0 "resume into an empty directory" "$tandem" train --model linreg --devices cpu:1 --epochs 1 \
  --checkpoint fresh --resume; then
  grep -q "no checkpoint in 'fresh' yet; starting a new run" err || fail "the new start is not said: $(cat err)"
  [ -f fresh/ckpt-00000032.safetensors ] || fail "the fresh run wrote no checkpoint: $(ls fresh)"
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

echo "== learning rates per optimizer"
# --optimizer alone takes that optimizer's rate, not linreg's SGD rate.
if expect_rc 0 "linreg with adam" "$tandem" train --model linreg --devices cpu:1 --epochs 1 --optimizer adam; then
  grep -q "adam lr 0.001 " out || fail "linreg --optimizer adam does not default to 1e-3: $(head -1 out)"
fi
if expect_rc 0 "linreg with sgd" "$tandem" train --model linreg --devices cpu:1 --epochs 1; then
  grep -q "sgd lr 0.05 " out || fail "linreg's sgd rate changed: $(head -1 out)"
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

echo "== evaluation: --eval-limit, --eval-every, its time and its progress"
ev=(--model mlp --data generated --limit 256 --batch 64 --devices cpu:2 --seed 4)
if expect_rc 0 "--eval-every 2 of 3 epochs, --eval-limit 100" "$tandem" train "${ev[@]}" --epochs 3 --eval-every 2 \
  --eval-limit 100 --metrics ev.jsonl; then
  [ "$(json_field out test_examples)" = 100 ] || fail "--eval-limit 100: $(tail -1 out)"
  grep -q "^epoch 1/3: .*not evaluated (--eval-every 2)" out && grep -q "^epoch 3/3: .*test loss .*(evaluation " out ||
    fail "--eval-every 2 of 3 epochs: $(cat out)"
  python3 - ev.jsonl <<'PY' || fail "--eval-every metrics: $(grep epoch ev.jsonl)"
import json, sys
epochs = [r for r in map(json.loads, open(sys.argv[1])) if r["kind"] == "epoch"]
assert [e["test_loss"] is None for e in epochs] == [True, False, False], epochs
for e in epochs:  # the epoch's seconds hold its evaluation's
    assert (e["eval_seconds"] == 0) if e["test_loss"] is None else (0 < e["eval_seconds"] < e["seconds"]), e
PY
fi
# On a terminal (script(1) gives the run one) the evaluation shows its batches.
if command -v script >/dev/null 2>&1; then
  script -qec "$tandem train ${ev[*]} --epochs 1" /dev/null >tty.out 2>&1 || fail "train on a terminal: $(cat tty.out)"
  grep -aq "evaluating, batch 16/16" tty.out || fail "no evaluation progress on a terminal: $(tr '\r' '\n' <tty.out)"
fi

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
expect_usage_error "weight 1 '1e-46' is 0 as a float" "a weight that is 0 as a float" "$tandem" train --balance 1e-46,1
expect_rc 1 "a weight per device" "$tandem" train --model linreg --devices cpu:3 --epochs 1 --balance 1,2 || true
grep -q "expected 3 (one per mesh device)" err || fail "a wrong weight count is not named: $(cat err)"

echo "== mlp on generated data, checkpoints and metrics"
# A constant rate: the resume checks below compare runs of different
# lengths, over which the mlp's default cosine decay would differ.
mlp=(--model mlp --data generated --limit 300 --batch 64 --seed 3 --schedule constant)
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
    # cpu:2: the direct all-reduce (one "direct reduce" phase, not the ring's two)
    assert {"step", "evaluate", "upload host->device", "matmul", "all-reduce", "direct reduce",
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

  # A hostile batch is refused by the flag's own range, not allocated (2^40
  # examples would ask for terabytes).
  mkdir bigbatch
  with_metadata ck/ckpt-00000010.safetensors bigbatch/ckpt-00000010.safetensors batch 1099511627776
  if expect_rc 1 "eval with batch 2^40" "$tandem" eval --checkpoint bigbatch --devices cpu:2 &&
    ! grep -q "'batch' is 1099511627776, expected 1 to 1048576" err; then
    fail "a checkpoint's batch of 2^40 is not refused by name: $(cat err)"
  fi

  echo "== resume"
  expect_usage_error "already holds" "a new run in a used directory" "$tandem" train "${mlp[@]}" --devices cpu:2 --checkpoint ck
  expect_usage_error "--model" "resume with another model" "$tandem" train --model cnn --checkpoint ck --resume
  if expect_rc 0 "one epoch" "$tandem" train "${mlp[@]}" --devices cpu:2 --epochs 1 --checkpoint half &&
     expect_rc 0 "resume to two" "$tandem" train --devices cpu:2 --epochs 2 --checkpoint half --resume; then
    cmp -s ck/ckpt-00000010.safetensors half/ckpt-00000010.safetensors ||
      fail "1 + 1 epochs resumed does not write the 2-epoch run's checkpoint bitwise"
    # Newer files that do not restore -- three torn, one of another shape
    # -- are skipped, each named, for the newest that does, and the run
    # goes on from that file's place, bitwise.
    mkdir fb && cp half/ckpt-00000005.safetensors fb/
    for n in 96 97 98; do echo torn >"fb/ckpt-000000$n.safetensors"; done
    with_transposed ck/ckpt-00000010.safetensors fb/ckpt-00000099.safetensors
    if expect_rc 0 "resume past unloadable files" "$tandem" train --devices cpu:2 --epochs 2 --checkpoint fb --resume; then
      for n in 96 97 98 99; do
        grep -q "skipping fb/ckpt-000000$n.safetensors" err || fail "skipped ckpt-000000$n not named: $(cat err)"
      done
      cmp -s ck/ckpt-00000010.safetensors fb/ckpt-00000010.safetensors ||
        fail "the run resumed past unloadable files does not write the 2-epoch run's checkpoint bitwise"
      [ -f fb/ckpt-00000005.safetensors ] || fail "a valid checkpoint was removed because of unloadable ones: $(ls fb)"
    fi
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

echo "== --deterministic: the same checkpoint bits at any thread count, whatever GEMM is asked"
# In deterministic mode cpu devices run tandem's own fixed-order GEMM even
# where OpenBLAS is built in: the run without the flag but with the own
# GEMM asked for (TD_CPU_GEMM=own) gives the same bits too.
det=(--model mlp --data generated --limit 300 --batch 64 --seed 3 --devices cpu:2 --epochs 1)
if expect_rc 0 "deterministic, 1 thread" "$tandem" train "${det[@]}" --deterministic --cpu-threads 1 --checkpoint det1 &&
  expect_rc 0 "deterministic, 3 threads" "$tandem" train "${det[@]}" --deterministic --cpu-threads 3 --checkpoint det3 &&
  TD_CPU_GEMM=own expect_rc 0 "the own GEMM asked for" "$tandem" train "${det[@]}" --checkpoint det_own; then
  cmp -s det1/ckpt-00000005.safetensors det3/ckpt-00000005.safetensors ||
    fail "--deterministic at 1 and 3 threads: the checkpoints differ"
  cmp -s det1/ckpt-00000005.safetensors det_own/ckpt-00000005.safetensors ||
    fail "--deterministic and TD_CPU_GEMM=own: the checkpoints differ"
  expect_rc 0 "eval --deterministic" "$tandem" eval --checkpoint det1 --devices cpu:2 --deterministic
fi

echo "== --precision bf16: another training than fp32's, the same bits at any thread count"
prec=(--model cnn --data generated --limit 128 --batch 32 --seed 3 --devices cpu:1 --epochs 1 --eval-limit 64)
if expect_rc 0 "bf16, 1 thread" "$tandem" train "${prec[@]}" --precision bf16 --cpu-threads 1 --checkpoint bf1 &&
  expect_rc 0 "bf16, 3 threads" "$tandem" train "${prec[@]}" --precision bf16 --cpu-threads 3 --checkpoint bf3 &&
  expect_rc 0 "fp32" "$tandem" train "${prec[@]}" --precision fp32 --checkpoint fp; then
  cmp -s bf1/ckpt-00000004.safetensors bf3/ckpt-00000004.safetensors ||
    fail "--precision bf16 at 1 and 3 threads: the checkpoints differ"
  cmp -s bf1/ckpt-00000004.safetensors fp/ckpt-00000004.safetensors &&
    fail "--precision bf16 trained fp32's bits"
  expect_rc 0 "eval --precision bf16" "$tandem" eval --checkpoint bf1 --devices cpu:1 --precision bf16
fi
expect_usage_error "--precision" "an unknown precision" "$tandem" train --precision fp16

echo "== --wire bf16: gradients rounded between devices, replicas identical, other bits than fp32's"
wire=(--model cnn --data generated --limit 128 --batch 32 --seed 3 --devices cpu:2 --epochs 1 --eval-limit 64)
if expect_rc 0 "wire bf16" "$tandem" train "${wire[@]}" --wire bf16 --checkpoint wb &&
  { [ "$(json_field out replicas_bitwise_identical)" = True ] || fail "--wire bf16: replicas differ: $(tail -1 out)"; } &&
  expect_rc 0 "wire fp32" "$tandem" train "${wire[@]}" --wire fp32 --checkpoint wf; then
  cmp -s wb/ckpt-00000004.safetensors wf/ckpt-00000004.safetensors && fail "--wire bf16 trained fp32's bits"
fi
expect_usage_error "--wire" "an unknown wire" "$tandem" train --wire bf8
grep -qF "got 'bf8'" err || fail "--wire bf8: the message does not name the value: $(cat err)"
expect_usage_error "--wire" "an unknown wire for the GPT" "$tandem" train --model gpt --wire fp16

echo "== SIGTERM"
long=(--model mlp --data generated --limit 4096 --batch 32 --seed 5 --devices cpu:2 --schedule constant)
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

echo "== --steps for the classifiers: the last epoch cut short, resumed bitwise"
steps=(--model mlp --data generated --limit 300 --batch 64 --devices cpu:2 --schedule constant)
if expect_rc 0 "mlp --steps 7" "$tandem" train "${steps[@]}" --steps 7 --checkpoint st7; then
  [ "$(json_field out updates)/$(json_field out epochs)" = "7/2" ] || fail "--steps 7 of 5 per epoch: $(tail -1 out)"
  grep -q "epoch 2/2 (2 of 5 steps" out || fail "the cut epoch is not said: $(cat out)"
  if expect_rc 0 "mlp --steps 3" "$tandem" train "${steps[@]}" --steps 3 --checkpoint st3 &&
    expect_rc 0 "resume to --steps 7" "$tandem" train --devices cpu:2 --checkpoint st3 --resume --steps 7; then
    cmp -s st7/ckpt-00000007.safetensors st3/ckpt-00000007.safetensors ||
      fail "3 + 4 steps resumed do not write the 7-step run's checkpoint bitwise"
  fi
fi

echo "== gpt: a small text, train, resume, eval, sample"
python3 - <<'PY'
import random
r = random.Random(7)
words = "the quick brown fox jumps over the lazy dog while a cat sleeps in the sun".split()
open("text.txt", "w").write("".join(" ".join(r.choice(words) for _ in range(r.randint(3, 9))) + "\n" for _ in range(800)))
PY
tiny=(--model gpt --data text.txt --layers 1 --width 32 --heads 2 --context 16 --batch 4 --devices cpu:2 --seed 1)
if expect_rc 0 "gpt train" "$tandem" train "${tiny[@]}" --steps 20 --eval-every 10 --checkpoint gck --metrics g.jsonl; then
  cp out gpt.out
  [ -f gck/ckpt-00000010.safetensors ] && [ -f gck/ckpt-00000020.safetensors ] ||
    fail "gpt checkpoints at steps 10 and 20: $(ls gck)"
  grep -q "^step 20/20: train loss .* val loss .* bits/byte" gpt.out || fail "no validation line: $(cat gpt.out)"
  python3 - gpt.out g.jsonl <<'PY' || fail "gpt final line or metrics: $(tail -1 gpt.out)"
import json, math, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
rows = [json.loads(l) for l in open(sys.argv[2])]
evals = [x for x in rows if x["kind"] == "eval"]
steps = [x for x in rows if x["kind"] == "step"]
assert [e["step"] for e in evals] == [0, 10, 20], evals
assert len(steps) == 20 and all(x["tokens_per_second"] > 0 and len(x["devices"]) == 2 for x in steps)
# The loss falls: from about ln 256 at step 0 to well below.
assert evals[0]["val_loss"] > 5.0 and r["val_loss"] < evals[0]["val_loss"] - 0.5, (evals[0], r["val_loss"])
assert r["val_loss"] == float("%.6g" % evals[-1]["val_loss"])
assert abs(r["val_bits_per_byte"] - r["val_loss"] / math.log(2)) < 1e-4
assert r["model"] == "gpt" and r["updates"] == 20 and r["tokens_per_second"] > 0 and r["replicas_bitwise_identical"]
assert len(r["memory"]) == 2
for d in r["memory"]:
    for k in ("parameters", "gradients", "activations", "optimizer_state", "accumulators"):
        assert k in d, k
    assert d["parameters"] == 4 * r["parameters"] and d["activations"] > 0
PY
  echo "== gpt: resume goes on bitwise"
  expect_usage_error "--width" "resume with another width" "$tandem" train "${tiny[@]}" --width 64 --checkpoint gck --resume
  if expect_rc 0 "gpt 10 steps" "$tandem" train "${tiny[@]}" --steps 10 --eval-every 0 --checkpoint ghalf &&
    expect_rc 0 "gpt resume to 20" "$tandem" train --checkpoint ghalf --resume --steps 20 --devices cpu:2 --eval-every 0; then
    grep -q "resumed from ghalf/ckpt-00000010.safetensors at step 10" out || fail "resume not said: $(head -3 out)"
    cmp -s gck/ckpt-00000020.safetensors ghalf/ckpt-00000020.safetensors ||
      fail "10 + 10 gpt steps resumed do not write the 20-step run's checkpoint bitwise"
  fi
  if expect_rc 0 "gpt with sgd" "$tandem" train "${tiny[@]}" --steps 1 --eval-every 0 --optimizer sgd; then
    grep -q "sgd lr 0.01 " out || fail "gpt --optimizer sgd keeps adamw's rate: $(head -1 out)"
  fi
  if expect_rc 0 "gpt --resume with no checkpoint yet" "$tandem" train "${tiny[@]}" --steps 2 --eval-every 0 \
    --checkpoint gfresh --resume; then
    grep -q "no checkpoint in 'gfresh' yet; starting a new run" err || fail "gpt: the new start is not said: $(cat err)"
    [ -f gfresh/ckpt-00000002.safetensors ] || fail "gpt: the fresh run wrote no checkpoint: $(ls gfresh)"
  fi
  echo "== gpt: eval"
  if expect_rc 0 "gpt eval" "$tandem" eval --checkpoint gck --devices cpu:2; then
    [ "$(json_field out val_loss)" = "$(json_field gpt.out val_loss)" ] ||
      fail "eval gives val loss $(json_field out val_loss), training's last validation $(json_field gpt.out val_loss)"
    grep -q "bits/byte" out || fail "eval of a byte model gives no bits per byte: $(cat out)"
  fi
  expect_rc 0 "gpt eval of one file on cpu:4" "$tandem" eval --checkpoint gck/ckpt-00000010.safetensors --devices cpu:4 \
    --eval-batches 3 && [ "$(json_field out windows)" = 12 ] || fail "--eval-batches 3 of 4: $(tail -1 out)"
  # 4 sequences over 3 devices: shares of 2, 1, 1, weighted by their rows.
  if expect_rc 0 "gpt eval on cpu:3" "$tandem" eval --checkpoint gck --devices cpu:3; then
    python3 -c 'import sys; a, b = map(float, sys.argv[1:]); sys.exit(0 if abs(a - b) <= 1e-5 * abs(b) else 1)' \
      "$(json_field out val_loss)" "$(json_field gpt.out val_loss)" ||
      fail "eval on cpu:3 (uneven shares) gives val loss $(json_field out val_loss), training $(json_field gpt.out val_loss)"
  fi
  if expect_rc 0 "gpt --balance 1,2,3" "$tandem" train "${tiny[@]}" --devices cpu:3 --batch 6 --balance 1,2,3 --steps 2 \
    --eval-every 0; then
    [ "$(json_field out split)" = "[1, 2, 3]" ] || fail "gpt --balance 1,2,3 split: $(tail -1 out)"
  fi
  expect_usage_error "--eval-batches" "eval-batches of an mlp" "$tandem" eval --checkpoint st7 --eval-batches 2
  echo "== gpt: sample"
  sample=(--checkpoint gck --prompt "the " --tokens 40)
  if expect_rc 0 "sample" "$tandem" sample "${sample[@]}" --seed 5; then
    cp out s1
    [ "$(wc -c <s1)" -eq 45 ] || fail "sample: 4 prompt bytes + 40 + a new line expected, got $(wc -c <s1): $(cat s1)"
    head -c 4 s1 | grep -q "the " || fail "sample does not start with its prompt: $(cat s1)"
    grep -q "40 tokens" err || fail "sample's summary: $(cat err)"
    expect_rc 0 "sample again" "$tandem" sample "${sample[@]}" --seed 5 && { cmp -s s1 out || fail "sample is not deterministic for a seed"; }
    if expect_rc 0 "sample, another seed" "$tandem" sample "${sample[@]}" --seed 6 && cmp -s s1 out; then
      fail "seeds 5 and 6 sample the same"
    fi
  fi
  if expect_rc 0 "greedy" "$tandem" sample "${sample[@]}" --temperature 0 --seed 1; then
    cp out g1
    expect_rc 0 "greedy from the newest file" "$tandem" sample --checkpoint gck/ckpt-00000020.safetensors --prompt "the " \
      --tokens 40 --temperature 0 --seed 1 && { cmp -s g1 out || fail "sample of the newest file differs from its directory's"; }
    expect_rc 0 "greedy, another seed, cpu:2" "$tandem" sample "${sample[@]}" --temperature 0 --seed 2 --devices cpu:2 &&
      { cmp -s g1 out || fail "greedy sampling depends on the seed or the mesh"; }
  fi
  expect_usage_error "--tokenizer" "a tokenizer for a byte model" "$tandem" sample "${sample[@]}" --tokenizer x.bin
  expect_usage_error "below the vocabulary's 256" "an id past the vocabulary" "$tandem" sample --checkpoint gck --prompt-ids 1,256
  expect_usage_error "not a gpt" "sample an mlp" "$tandem" sample --checkpoint st7
  echo "== gpt: SIGTERM, then a resume that lands on an uninterrupted run's bits"
  "$tandem" train "${tiny[@]}" --steps 100000 --eval-every 0 --checkpoint gint --metrics gint.jsonl >gint.out 2>gint.err &
  pid=$!
  for _ in $(seq 1 500); do
    [ -s gint.jsonl ] && break
    sleep 0.02
  done
  kill -TERM "$pid"
  rc=0
  wait "$pid" || rc=$?
  if [ "$rc" -ne 143 ]; then
    fail "gpt SIGTERM: exit $rc, expected 143; $(cat gint.out gint.err)"
  elif ! grep -q "interrupted at step .*: checkpoint" gint.out; then
    fail "gpt SIGTERM: no checkpoint reported: $(cat gint.out)"
  else
    at=$(sed -n 's/^interrupted at step \([0-9]*\)\/.*/\1/p' gint.out)
    if expect_rc 0 "resume after SIGTERM" "$tandem" train --checkpoint gint --resume --steps $((at + 3)) --devices cpu:2 \
      --eval-every 0 && expect_rc 0 "uninterrupted" "$tandem" train "${tiny[@]}" --steps $((at + 3)) --eval-every 0 --checkpoint gref; then
      cmp -s "gint/ckpt-$(printf %08d $((at + 3))).safetensors" "gref/ckpt-$(printf %08d $((at + 3))).safetensors" ||
        fail "the gpt run stopped by SIGTERM at step $at and resumed does not match the uninterrupted one bitwise"
    fi
  fi
fi

echo "== gpt: --init from GPT-2 weights (llm.c's layout), --recompute"
python3 - <<'PY'
import random, struct
T, V, L, H, C = 32, 256, 1, 2, 16  # llm.c's header: positions, vocab, layers, heads, channels
r = random.Random(5)
g = lambda n, s=0.1: [r.gauss(0, s) for _ in range(n)]
parts = [g(V * C), g(T * C), [1.0] * (L * C), g(L * C), g(L * 3 * C * C), g(L * 3 * C), g(L * C * C), g(L * C),
         [1.0] * (L * C), g(L * C), g(L * 4 * C * C), g(L * 4 * C), g(L * C * 4 * C), g(L * C), [1.0] * C, g(C)]
with open("init.bin", "wb") as f:
    f.write(struct.pack("<256i", 20240326, 3, T, V, L, H, C, V, *[0] * 248))
    for p in parts:
        f.write(struct.pack("<%df" % len(p), *p))
PY
init=(--init init.bin --data text.txt --context 16 --batch 4 --devices cpu:2)
if expect_rc 0 "eval --init" "$tandem" eval "${init[@]}" && cp out einit.out &&
  expect_rc 0 "train --init" "$tandem" train --model gpt "${init[@]}" --steps 4 --eval-every 2 --checkpoint ick; then
  [ "$(json_field out layers)/$(json_field out width)/$(json_field out context)/$(json_field out sequence)" = 1/16/32/16 ] ||
    fail "train --init does not take the file's sizes: $(tail -1 out)"
  grep -q "^step 0/4: val loss $(printf %.4f "$(json_field einit.out val_loss)") " out ||
    fail "train --init does not start where eval --init says ($(json_field einit.out val_loss)): $(grep '^step 0' out)"
  # A tandem checkpoint is GPT-2 weights too: the same parameters either way.
  if expect_rc 0 "sample --checkpoint" "$tandem" sample --checkpoint ick --tokens 20 --temperature 0 && cp out sck &&
    expect_rc 0 "sample --init of a checkpoint" "$tandem" sample --init ick/ckpt-00000004.safetensors --tokens 20 --temperature 0; then
    cmp -s sck out || fail "sample --init of a tandem checkpoint differs from sample --checkpoint"
  fi
fi
expect_usage_error "--layers 3" "--init with other sizes" "$tandem" train --model gpt "${init[@]}" --layers 3
expect_usage_error "32 positions" "--init with a longer context" "$tandem" train --model gpt --init init.bin --data text.txt --context 64
expect_usage_error "--init" "--init and --resume" "$tandem" train --model gpt --init init.bin --checkpoint ick --resume
if expect_rc 1 "--init of a text file" "$tandem" sample --init text.txt && ! grep -q "text.txt" err; then
  fail "--init of a file that is no weights is not named: $(cat err)"
fi
recompute=(--model gpt --data text.txt --layers 2 --width 32 --heads 2 --context 16 --batch 4 --devices cpu:2 --steps 4 --eval-every 0)
if expect_rc 0 "without --recompute" "$tandem" train "${recompute[@]}" --checkpoint rc0 && cp out rc0.out &&
  expect_rc 0 "with --recompute" "$tandem" train "${recompute[@]}" --checkpoint rc1 --recompute; then
  cmp -s rc0/ckpt-00000004.safetensors rc1/ckpt-00000004.safetensors || fail "--recompute changes the training"
  python3 -c 'import json,sys; a, b = (json.loads(open(f).read().strip().splitlines()[-1])["memory"][0]["activations"] for f in sys.argv[1:]); sys.exit(0 if b < a else 1)' rc0.out out ||
    fail "--recompute does not lower the activations' memory"
fi

echo "== gpt: GPT-2 tokens (llm.c's shards and tokenizer file)"
python3 - <<'PY'
import random, struct
r = random.Random(3)
def shard(name, n):
    ids = []
    while len(ids) < n:
        ids += [50256] + [r.choice([464, 2068, 7586, 21831, 18045]) for _ in range(r.randint(3, 8))]
    open(name, "wb").write(struct.pack("<256i", 20240520, 1, n, *[0] * 253) + struct.pack("<%dH" % n, *ids[:n]))
import os
os.mkdir("shards")
shard("shards/t_train.bin", 3000)
shard("shards/t_val.bin", 400)
body = b"".join(bytes([len(t)]) + t for t in (b"<|endoftext|>" if i == 50256 else b" w%d" % i for i in range(50257)))
open("tok.bin", "wb").write(struct.pack("<256I", 20240328, 2, 50257, 50256, *[0] * 252) + body)
PY
if expect_rc 0 "gpt on GPT-2 tokens" "$tandem" train --model gpt --data shards --layers 1 --width 16 --heads 2 --context 8 \
  --batch 2 --devices cpu:2 --steps 3 --eval-every 0 --eval-batches 2 --checkpoint g2; then
  [ "$(json_field out vocab)" = 50257 ] || fail "GPT-2 shards: vocabulary $(json_field out vocab)"
  expect_usage_error "--prompt-ids" "a text prompt for GPT-2 tokens" "$tandem" sample --checkpoint g2 --prompt hello
  if expect_rc 0 "sample ids" "$tandem" sample --checkpoint g2 --prompt-ids 464,2068 --tokens 5 --temperature 0; then
    grep -qE '^464 2068( [0-9]+)*$' out || fail "GPT-2 sample without a tokenizer prints ids: $(cat out)"
  fi
  if expect_rc 0 "sample decoded" "$tandem" sample --checkpoint g2 --prompt-ids 464 --tokens 5 --temperature 0 --tokenizer tok.bin; then
    grep -q "^ w464" out || fail "GPT-2 sample with a tokenizer prints text: $(cat out)"
  fi
fi

echo "== plot"
if command -v gnuplot >/dev/null 2>&1; then
  if [ -f m.jsonl ] && expect_rc 0 "plot" "$tandem" plot m.jsonl -o curves.png; then
    [ "$(head -c 4 curves.png | od -An -c | tr -d ' ')" = "211PNG" ] || fail "plot did not write a PNG"
  fi
  # The format is the extension's; an unknown one is named, not drawn as PNG.
  if [ -f m.jsonl ] && expect_rc 0 "plot to SVG" "$tandem" plot m.jsonl -o curves.svg; then
    grep -q "<svg" curves.svg || fail "plot -o curves.svg did not write SVG: $(head -c 8 curves.svg | od -An -c)"
  fi
  if [ -f m.jsonl ] && expect_rc 0 "plot to PDF" "$tandem" plot m.jsonl -o curves.pdf; then
    [ "$(head -c 4 curves.pdf)" = "%PDF" ] || fail "plot -o curves.pdf did not write PDF"
  fi
  expect_usage_error "'.gif'" "plot to an unknown format" "$tandem" plot m.jsonl -o curves.gif
  # A run whose every loss is null (it diverged): tandem says so, not gnuplot.
  if [ -f m.jsonl ]; then
    sed -E 's/"(loss|train_loss|test_loss)":[-+0-9.eE]+/"\1":null/g' m.jsonl >nulls.jsonl
    if expect_rc 1 "plot of null losses" "$tandem" plot nulls.jsonl -o nulls.png; then
      grep -q "^tandem plot: 'nulls.jsonl': every loss .* is null" err && [ "$(wc -l <err)" -eq 1 ] ||
        fail "null losses: not one tandem message: $(cat err)"
    fi
  fi
  if [ -f g.jsonl ] && expect_rc 0 "plot a gpt run" "$tandem" plot g.jsonl -o gpt.png; then
    grep -q "3 validations" out || fail "plot of a gpt run: $(cat out)"
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
