#!/usr/bin/env bash
# The character GPT recipe (nanoGPT's CPU run: 4 layers, 4 heads, width
# 128, context 64, batch 12, AdamW 1e-3, no dropout) on the default corpus,
# tandem on cpu:1, cpu:2 and cpu:4 beside JAX (bench/peer/char_gpt_jax.py,
# jit on one CPU device, which uses every core), alternating in one run.
# Prints each run's JSON line and a table: ms/step, tokens/s, the final
# validation loss (every window of T+1 at stride T of the held-out tenth)
# and tandem's loss minus JAX's.
#
#   PEER_PYTHON=/path/to/venv/bin/python bench/peer/char_gpt.sh [BUILD_DIR]
#   (the venv needs jax[cpu] and optax from PyPI; STEPS=2000, ROUNDS=1,
#   MESHES="cpu:1 cpu:2 cpu:4", CORPUS=/usr/share/games/fortunes)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-$here/../../build}"
python="${PEER_PYTHON:?name a python with jax and optax in PEER_PYTHON}"
steps="${STEPS:-2000}"
rounds="${ROUNDS:-1}"
corpus="${CORPUS:-/usr/share/games/fortunes}"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
for ((r = 0; r < rounds; r++)); do
  "$python" "$here/char_gpt_jax.py" "$corpus" --steps "$steps" --seed "$r" | tee -a "$out"
  for mesh in ${MESHES:-cpu:1 cpu:2 cpu:4}; do
    "$build/tools/tandem" train --model gpt --data "$corpus" --devices "$mesh" --steps "$steps" \
      --eval-every 0 --seed "$r" 2>/dev/null | tail -1 | tee -a "$out"
  done
done
python3 - "$out" <<'PY'
import json, sys, statistics
runs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
jax = [r for r in runs if r.get('peer') == 'jax']
jl = statistics.median(r['val_loss'] for r in jax)
jt = statistics.median(r['tokens_per_s'] for r in jax)
print(f"| run | ms/step | tokens/s | val loss | minus JAX's | tokens/s ÷ JAX's |")
print(f"|---|---|---|---|---|---|")
print(f"| JAX {jax[0]['jax']} | {statistics.median(r['median_ms'] for r in jax):.1f} | {jt:.0f} | {jl:.4f} | — | — |")
for mesh in sorted({r['devices'] for r in runs if r.get('command') == 'train'}):
    t = [r for r in runs if r.get('devices') == mesh]
    loss = statistics.median(r['val_loss'] for r in t)
    tps = statistics.median(r['tokens_per_second'] for r in t)
    ms = 1e3 * 12 * 64 / tps
    print(f"| tandem {mesh} | {ms:.1f} | {tps:.0f} | {loss:.4f} | {loss - jl:+.4f} | {tps / jt:.2f} |")
PY
