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
# reference im2col / col2im / pooling (tandem's input gradient of a conv is
# its GEMM and col2im, timed together). Output: JSON lines under
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
    "$root/kernels/cpu/td_reference_pool_tiled.c" \
    "$build/engine/core/libtd_core.a" "$build/engine/platform/libtd_platform.a" \
    -L"$lib" -Wl,-rpath,"$lib" -ldnnl -lopenblas -ldl -lm -lpthread

blis=$lib/blis-pthread/libblis.so.4
bench=$out/blas_compare
rm -f "$out"/round-*.jsonl # the tables are of this run's rounds only
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

python3 - "$out" <<'PY'
# Medians over the rounds, as Markdown tables (bench/RESULTS.md, "GEMM engines").
import collections, glob, json, statistics, sys
out = sys.argv[1]
gemm = collections.defaultdict(list)   # (shape label, m, n, k) -> {column: [GFLOP/s]}
conv = collections.defaultdict(list)   # (kind, shape, direction) -> {column: [ms]}
impl = {}
shape_dims = {}
for path in sorted(glob.glob(out + "/round-*.jsonl")):
    tag = path.rsplit("/", 1)[1].split("-", 2)[2].split(".")[0]  # t1-env, t1-avx512, t2-avx512, t2-tandem
    for line in open(path):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if "engine" not in e:  # bench/gemm through the host pool, 2 threads
            name = {"cpu/cblas": "pool: cblas (Haswell)", "cpu/own": "pool: own",
                    "cpu/own-fma": "pool: own-fma"}.get(e["backend"])
            if name:
                gemm[("pool %dx%dx%d" % (e["m"], e["n"], e["k"]), name)].append(e["gflops"])
            continue
        engine = e["engine"].replace("openblas", "OpenBLAS Haswell" if tag == "t1-env" else "OpenBLAS own choice")
        if e["threads"] == 2:
            engine += " x2"
        if e["kind"] == "gemm":
            gemm[(e["shape"], engine)].append(e["gflops"])
        else:
            direction = e["note"].split(",")[0].split(";")[0]
            conv[(e["kind"], e["shape"], direction, engine)].append(e["seconds"] * 1e3)
            if "," in e["note"]:
                impl["%s, %s" % (engine, direction)] = e["note"].split(", ", 1)[1]
med = lambda v: statistics.median(v) if v else float("nan")
def table(rows, cols, cells, fmt):
    print("| | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for r in rows:
        print("| %s | " % r + " | ".join(fmt(cells.get((r, c), []), c) for c in cols) + " |")
    print()
shapes = []
for (sh, _e) in gemm:
    if sh not in shapes and not sh.startswith("pool "):
        shapes.append(sh)
one = ["OpenBLAS Haswell", "OpenBLAS own choice", "blis (generic)", "blis (skx)", "dnnl_sgemm", "dnnl_matmul",
       "own", "own-fma", "own-fma avx2"]
rounds = len(glob.glob(out + "/round-*-t1-env.jsonl"))
print("GEMM, one core, GFLOP/s (median of %d rounds)\n" % rounds)
table(shapes, one, gemm, lambda v, c: "%.1f" % med(v) if v else "")
two = ["OpenBLAS own choice x2", "blis (skx) x2", "dnnl_sgemm x2", "dnnl_matmul x2"]
print("GEMM, both cores (the libraries' own threads), GFLOP/s\n")
table(shapes, two, gemm, lambda v, c: "%.1f" % med(v) if v else "")
pool_rows = sorted({sh for (sh, e) in gemm if sh.startswith("pool ")},
                   key=lambda s: [int(x) for x in s.split(" ")[1].split("x")])
print("GEMM, both cores through the host pool (bench/gemm --cpu-threads 2), GFLOP/s\n")
table(pool_rows, ["pool: cblas (Haswell)", "pool: own", "pool: own-fma"], gemm,
      lambda v, c: "%.1f" % med(v) if v else "")
keys = []
for (kind, sh, d, e) in conv:
    if (kind, sh, d) not in keys:
        keys.append((kind, sh, d))
cols = []
for (kind, sh, d, e) in conv:
    if e not in cols:
        cols.append(e)
cells = {("%s: %s" % (k1, k2), e): v for (k0, k1, k2, e), v in conv.items()}
for kind, title in (("conv", "Convolution"), ("pool", "Max pooling 2x2")):
    print("%s, batch 128, ms (median)\n" % title)
    table(["%s: %s" % (k[1], k[2]) for k in keys if k[0] == kind],
          [e for e in cols if any(k[0] == kind and k[3] == e for k in conv)], cells,
          lambda v, c: "%.3f" % med(v) if v else "")
for e, i in sorted(impl.items()):
    print("- %s: %s" % (e, i))
PY
