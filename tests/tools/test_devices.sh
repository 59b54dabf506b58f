#!/usr/bin/env bash
# `tandem devices` on a machine without the GPU runtimes, simulated by
# pointing TD_OPENCL_LIBRARY / TD_VULKAN_LIBRARY at files that do not exist:
# it must still run, list the CPU device, and say for each GPU backend built
# in which library it looked for and why it is unavailable (text and
# --json). Then, with the real libraries, each available GPU backend names
# the library it opened.
# Usage: test_devices.sh PATH/TO/tandem
set -euo pipefail

tandem=$(realpath "$1")
# In a cross build meson runs this script with the program that runs the
# host's binaries (the cross file's exe_wrapper, wine64 for Windows) in
# MESON_EXE_WRAPPER; natively it is empty and tandem runs directly.
read -ra exe_wrapper <<<"${MESON_EXE_WRAPPER:-}"
run_tandem() { "${exe_wrapper[@]}" "$tandem" "$@"; }
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-devices-test-XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

missing_opencl=/nonexistent-tandem-test/libOpenCL.so.1
missing_vulkan=/nonexistent-tandem-test/libvulkan.so.1
export POCL_CACHE_DIR="$work/pocl-cache"

if ! TD_OPENCL_LIBRARY=$missing_opencl TD_VULKAN_LIBRARY=$missing_vulkan run_tandem devices >text 2>err; then
  fail "devices without GPU runtimes: exit $?: $(cat err)"
fi
grep -q '^cpu *0 ' text || fail "devices without GPU runtimes lists no cpu device: $(cat text)"
if ! TD_OPENCL_LIBRARY=$missing_opencl TD_VULKAN_LIBRARY=$missing_vulkan run_tandem devices --json >json 2>err; then
  fail "devices --json without GPU runtimes: exit $?: $(cat err)"
fi

# Every GPU backend in the listing is unavailable and names its library,
# in the text and in the JSON; the JSON gives every entry a runtime.
python3 - json text "$missing_opencl" "$missing_vulkan" <<'PY' || fail "devices --json without GPU runtimes"
import json, sys
entries = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read()
missing = {"opencl": sys.argv[3], "vulkan": sys.argv[4]}
bad = []
if not any(e["backend"] == "cpu" and e["available"] for e in entries):
    bad.append("no available cpu entry")
for e in entries:
    if "runtime" not in e:
        bad.append("%s entry without runtime" % e["backend"])
    if e["backend"] in missing:
        path = missing[e["backend"]]
        if e["available"] or e["runtime"] != "" or path not in e.get("reason", ""):
            bad.append("%s: %r" % (e["backend"], e))
        if path not in text:
            bad.append("%s: the text listing does not name %s" % (e["backend"], path))
for b in bad:
    print(b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY

# With the system's libraries: an available GPU backend says what it opened.
run_tandem devices --json >json_real 2>err || fail "devices --json: exit $?: $(cat err)"
python3 - json_real <<'PY' || fail "devices --json: an available GPU backend without its runtime"
import json, sys
bad = [e for e in json.load(open(sys.argv[1]))
       if e["backend"] != "cpu" and e["available"] and not e["runtime"]]
# The cpu backend names its GEMM engine instead (backends/cpu/cpu_gemm.c).
bad += [e for e in json.load(open(sys.argv[1]))
        if e["backend"] == "cpu" and e["runtime"].split(" ")[:2] not in
        (["GEMM", "own-fma"], ["GEMM", "cblas"], ["GEMM", "own"])]
for e in bad:
    print("no runtime: %r" % e, file=sys.stderr)
sys.exit(1 if bad else 0)
PY

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "devices: ok"
