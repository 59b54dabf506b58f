#!/usr/bin/env bash
# GEMM, convolution and pooling libraries side by side (bench/blas_compare.c):
# OpenBLAS (the linked one, with the environment's OPENBLAS_CORETYPE and
# with it unset), BLIS 0.9.0 and oneDNN 2.6.3 from Debian, tandem's own
# GEMMs; then tandem's engines on both cores through the host pool
# (bench/gemm --cpu-threads 2) beside the libraries' own threads.
#
#   bench/blas_compare.sh [BUILD_DIR] [ROUNDS]     (defaults: build, 3)
#
# BLIS and oneDNN are not installed: their Debian packages are fetched
# with `apt-get download` and unpacked under .deps/ (git-ignored; BLIS's
# package would switch the system's libblas / cblas.h alternatives for
# everyone). The bench is compiled here against them with explicit
# -I / -L / rpath, and against tandem's sources for the own GEMMs and the
# reference im2col / col2im / pooling. Output: JSON lines under
# BUILD_DIR/blas_compare/round-R-*.jsonl, and a table of medians over the
# rounds on stdout. Needs a configured, built BUILD_DIR (bench/gemm).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
rounds=${2:-3}
case $build in /*) ;; *) build=$root/$build ;; esac
deps=$root/.deps
usr=$deps/root/usr
lib=$usr/lib/x86_64-linux-gnu
out=$build/blas_compare
mkdir -p "$out" "$deps/debs"

packages=(libblis-pthread-dev libblis4-pthread libdnnl-dev libdnnl2)
if [ ! -e "$lib/libdnnl.so.2" ] || [ ! -e "$lib/blis-pthread/libblis.so.4" ]; then
    (cd "$deps/debs" && apt-get download "${packages[@]}")
    for deb in "$deps"/debs/*.deb; do dpkg -x "$deb" "$deps/root"; done
fi

[ -e "$build/engine/platform/libtd_platform.a" ] || { echo "blas_compare.sh: build $build first" >&2; exit 1; }
cc=${CC:-cc}
"$cc" -O3 -std=c11 -D_DEFAULT_SOURCE -D_GNU_SOURCE -ffp-contract=off -Wall -Wextra -Werror \
    -I"$root/backends/cpu" -I"$root/engine/core" -I"$root/engine/platform" -I"$root/kernels/cpu" \
    -I"$root/kernels/common" -I"$root/include" -I"$build/include" -I"$build" -I"$usr/include" \
    -I/usr/include/x86_64-linux-gnu/openblas-pthread \
    -o "$out/blas_compare" "$root/bench/blas_compare.c" "$root/backends/cpu/cpu_gemm_own.c" \
    "$root/backends/cpu/cpu_gemm_own_fma.c" "$root/kernels/cpu/td_reference_conv.c" \
    "$build/engine/core/libtd_core.a" "$build/engine/platform/libtd_platform.a" \
    -L"$lib" -Wl,-rpath,"$lib" -ldnnl -lopenblas -ldl -lm -lpthread

blis=$lib/blis-pthread/libblis.so.4
bench=$out/blas_compare
uptime
for r in $(seq 1 "$rounds"); do
    # One core: the environment's OpenBLAS kernel and BLIS's own choice of
    # sub-configuration; then OpenBLAS's own choice of kernel and BLIS on
    # its skx (AVX-512) sub-configuration, id 0 in BLIS 0.9.0's list.
    "$bench" --json --threads 1 --blis "$blis" >"$out/round-$r-t1-env.jsonl"
    env -u OPENBLAS_CORETYPE BLIS_ARCH_TYPE=0 "$bench" --json --threads 1 --blis "$blis" --only gemm \
        >"$out/round-$r-t1-avx512.jsonl"
    # Both cores: the libraries' threads; tandem's engines through the host pool.
    env -u OPENBLAS_CORETYPE BLIS_ARCH_TYPE=0 "$bench" --json --threads 2 --blis "$blis" \
        >"$out/round-$r-t2-avx512.jsonl"
    "$build/bench/gemm" --json --cpu-threads 2 --reps 5 >"$out/round-$r-t2-tandem.jsonl"
    uptime
done

python3 - "$out" "$rounds" <<'PY'
import collections, glob, json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rates = collections.defaultdict(list)
notes = {}
for path in sorted(glob.glob(out + "/round-*.jsonl")):
    tag = path.rsplit("-", 1)[1].split(".")[0]  # env, avx512, tandem
    for line in open(path):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if "engine" in e:  # blas_compare
            engine = e["engine"]
            if engine == "openblas":
                engine += " (Haswell)" if tag == "env" else " (own choice)"
            key = (e["kind"], e["shape"], engine, e["threads"], e["note"].split(",")[0])
            rates[key].append(e["gflops"])
            notes[key] = e["note"]
        else:  # bench/gemm through the host pool
            key = ("gemm-pool", "%dx%dx%d" % (e["m"], e["n"], e["k"]), e["backend"], 2, e["shape"])
            rates[key].append(e["gflops"])
for key in sorted(rates):
    kind, shape, engine, threads, note = key
    v = rates[key]
    print("%-9s %-17s %-26s %d  %8.1f  (%d runs)  %s" % (kind, shape, engine, threads, statistics.median(v), len(v),
                                                    notes.get(key, note)))
PY
