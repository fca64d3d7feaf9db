#!/usr/bin/env python3
"""Prints the expected dequantized values that tests/io/gguf_test.cc checks on the real model.

For each tensor type present in the model, takes the first tensor of that type (file order),
dequantizes its row 0 (the first dims[0] elements) with the `gguf` Python package (an independent
implementation of the GGML block formats) and prints the tensor name, a few elements and the
row sum in the C++ initializer form the test embeds.

    /tmp/probe-venv/bin/python tools/gguf_dequant_expectations.py models/gemma-3-270m-q4_k_m.gguf
"""
import sys

import numpy as np
import gguf

INDICES = [0, 1, 2, 31, 32, 100, 255, 256, 639]


def main(path):
    reader = gguf.GGUFReader(path)
    seen = set()
    for t in reader.tensors:
        qtype = gguf.GGMLQuantizationType(t.tensor_type)
        if qtype in seen:
            continue
        seen.add(qtype)
        ne0 = int(t.shape[0])
        row = gguf.quants.dequantize(np.asarray(t.data).reshape(-1)[: t.data.nbytes], qtype)
        row = np.asarray(row, dtype=np.float32).reshape(-1)[:ne0]
        idx = [i for i in INDICES if i < ne0]
        vals = ", ".join("{%d, %sf}" % (i, np.format_float_positional(row[i], unique=True))
                         if abs(row[i]) >= 1e-4 or row[i] == 0 else
                         "{%d, %sf}" % (i, np.format_float_scientific(row[i], unique=True))
                         for i in idx)
        print('  {"%s", DType::k%s, %d, {%s}, %.9g},' % (
            t.name, qtype.name, ne0, vals, float(np.sum(row.astype(np.float64)))))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "models/gemma-3-270m-q4_k_m.gguf")
