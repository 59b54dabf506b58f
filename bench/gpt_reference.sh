#!/usr/bin/env bash
# tandem's GPT beside llm.c's CPU reference trainer (karpathy/llm.c,
# train_gpt2.c), in one run: the same GPT-2-layout weights (drawn by
# tandem, written in llm.c's checkpoint format), the same batch, the same
# AdamW steps (lr 1e-4, weight decay 0.01, as llm.c's test). Prints each
# trainer's losses, the relative difference of the step-0 and final losses,
# and tokens/s.
#
# llm.c is not part of tandem: name a checkout of it (git clone
# https://github.com/karpathy/llm.c) in LLMC_DIR. Its trainer is built here
# with llm.c's own flags (-Ofast -fopenmp -march=native) and uses every core.
#
#   LLMC_DIR=/path/to/llm.c bench/gpt_reference.sh [BUILD_DIR] [-- gpt_reference flags]
#   (default: GPT-2 124M's shape: 12 layers, 12 heads, width 768, vocab
#   50257, context 1024; B 4, T 64; tandem on cpu:1, cpu:2 and cpu:4)
#   DEVICES="cpu:1;opencl:0,vulkan:0,cpu:1" picks tandem's meshes.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-$here/../build}"
shift || true
[[ "${1:-}" == "--" ]] && shift
: "${LLMC_DIR:?name a checkout of karpathy/llm.c in LLMC_DIR}"
shape=("$@")
[[ ${#shape[@]} -eq 0 ]] && shape=(--layers 12 --heads 12 --width 768 --vocab 50257 --context 1024 --batch 4 --seq 64)
steps="${STEPS:-10}"
IFS=';' read -r -a meshes <<< "${DEVICES:-cpu:1;cpu:2;cpu:4}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cc -Ofast -march=native -fopenmp -w -I"$LLMC_DIR" -o "$work/llmc_driver" "$here/llmc/llmc_driver.c" -lm
"$build/bench/gpt_reference" --write "$work" "${shape[@]}"

echo "== llm.c train_gpt2.c (OpenMP, $(nproc) threads)"
OMP_NUM_THREADS="$(nproc)" "$work/llmc_driver" "$work/model.bin" "$work/tokens.bin" "$steps" 1e-4 0.01 | tee "$work/llmc.txt"
for mesh in "${meshes[@]}"; do
  echo "== tandem $mesh"
  "$build/bench/gpt_reference" --model "$work/model.bin" --tokens "$work/tokens.bin" --devices "$mesh" \
    --steps "$steps" --lr 1e-4 --weight-decay 0.01 | tee "$work/tandem.txt"
  python3 - "$work/llmc.txt" "$work/tandem.txt" "$mesh" <<'PY'
import sys, statistics
def read(p):
    rows = [l.split() for l in open(p)]
    steps = {int(r[1]): (float(r[3]), float(r[5])) for r in rows if r[0] == 'step'}
    final = [float(r[2]) for r in rows if r[0] == 'final'][0]
    return steps, final
(ls, lf), (ts, tf) = read(sys.argv[1]), read(sys.argv[2])
rel0 = abs(ts[0][0] - ls[0][0]) / abs(ls[0][0])
relf = abs(tf - lf) / abs(lf)
lm = statistics.median(v[1] for k, v in ls.items() if k > 0)
tm = statistics.median(v[1] for k, v in ts.items() if k > 0)
print(f"compare mesh {sys.argv[3]} loss0 llmc {ls[0][0]:.7f} tandem {ts[0][0]:.7f} rel {rel0:.2e} "
      f"final llmc {lf:.7f} tandem {tf:.7f} rel {relf:.2e} ms llmc {lm:.1f} tandem {tm:.1f} speed_ratio {lm/tm:.2f}")
PY
done
