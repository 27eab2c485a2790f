#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A GGUF's weights dequantized to f32 (gguf's own dequantization), every
key copied: the same model without ggml's quantized products, whose
8-bit rounding of each activation row the network amplifies. The host on
it must match the numpy reference closely, and its CPU and OpenCL
backends each other (tests/check_reference.py --f32).

Usage: dequantize.py IN.gguf OUT.gguf
"""
import os
import sys

import gguf
import numpy as np


def main(argv):
    if len(argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    r = gguf.GGUFReader(argv[1])
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(argv[2] + ".new", arch)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture",
                                              "general.file_type"):
            continue
        kind = f.types[0]
        sub = f.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, f.contents(), kind, sub_type=sub)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    for t in r.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type)
        w.add_tensor(t.name, np.ascontiguousarray(data, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(argv[2] + ".new", argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
