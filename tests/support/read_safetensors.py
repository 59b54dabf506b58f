#!/usr/bin/env python3
"""Reads a safetensors file with nothing of tandem: struct for the length
prefix, json for the header, numpy for the values -- what a PyTorch, JAX or
numpy user's loader does. The checkpoint test runs it on a file tandem
wrote and compares what it prints with the trainer's own values.

Usage: read_safetensors.py FILE

Prints one line per metadata pair, "meta<TAB>key<TAB>value", then one line
per tensor in name order, "tensor<TAB>name<TAB>d0,d1,...<TAB>v0 v1 ...",
each value as float.hex() of the float32 (exact, so the test compares bits).
Exits 1 with a message on stderr when the layout breaks the format's rules.
"""
import json
import struct
import sys

import numpy as np


def fail(message):
    print(f"read_safetensors: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    if len(sys.argv) != 2:
        fail("usage: read_safetensors.py FILE")
    with open(sys.argv[1], "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        fail("shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        fail(f"header length {n} runs past the file")
    header = json.loads(raw[8 : 8 + n].decode("utf-8"))
    data = raw[8 + n :]
    metadata = header.pop("__metadata__", {})
    for key in sorted(metadata):
        if not isinstance(metadata[key], str):
            fail(f"metadata {key} is not a string")
        print(f"meta\t{key}\t{metadata[key]}")
    # The entries must tile the data area, as the reference loader demands.
    spans = sorted((info["data_offsets"][0], info["data_offsets"][1], name) for name, info in header.items())
    at = 0
    for begin, end, name in spans:
        if begin != at:
            fail(f"tensor {name} begins at {begin}, expected {at}")
        at = end
    if at != len(data):
        fail(f"tensors cover {at} of {len(data)} data bytes")
    for name in sorted(header):
        info = header[name]
        if info["dtype"] != "F32":
            fail(f"tensor {name} has dtype {info['dtype']}")
        begin, end = info["data_offsets"]
        shape = tuple(info["shape"])
        values = np.frombuffer(data[begin:end], dtype="<f4").reshape(shape)
        dims = ",".join(str(d) for d in shape)
        text = " ".join(float(v).hex() for v in values.reshape(-1))
        print(f"tensor\t{name}\t{dims}\t{text}")


if __name__ == "__main__":
    main()
