#!/usr/bin/env bash
# tools_gemm_own_has_no_fma: scan_fma.sh OBJDUMP LIBRARY...
# Disassembles each library (or object) and fails on any fused
# multiply-add (vfmadd / vfmsub / vfnmadd / vfnmsub) outside
# backends/cpu/cpu_gemm_own_fma.c, the FMA engine (its object is .c.o, or
# .c.obj in a mingw-w64 build), and also fails when that
# file, if present, has none (the engine would then not be fused).
set -u
objdump=$1
shift
fused=0
for lib in "$@"; do
    listing=$("$objdump" -d "$lib") || { echo "cannot disassemble $lib"; exit 1; }
    # awk exits 1 on an FMA outside the engine's file, 2 when only that file has them.
    awk '/file format/ { in_engine = $1 ~ /cpu_gemm_own_fma[.]c[.]o(bj)?:$/ }
         /vfn?m(add|sub)/ { if (in_engine) fused = 1; else { print; bad = 1 } }
         END { exit bad ? 1 : fused ? 2 : 0 }' <<<"$listing"
    case $? in
    0) ;;
    2) fused=1 ;;
    *) echo "FMA in $lib"; exit 1 ;;
    esac
done
if [ "$fused" != 1 ]; then
    echo "no FMA in cpu_gemm_own_fma.c's code: the FMA engine is not fused"
    exit 1
fi
