#!/usr/bin/env python3
"""Write the seed corpus of the .npy fuzzer (tests/fuzz/corpus/npy/).

Small arrays written by numpy: every numeric dtype, C and Fortran order,
both byte orders, format versions 1, 2 and 3, 0-d, empty and 8-d shapes,
a Python-2-style header ("3L"), and a few hostile headers (2^40 elements,
a negative dimension, an unterminated dict, a header length past the end,
truncated data). Deterministic; every file under 4 KiB.

    python3 tests/fuzz/make_npy_corpus.py [OUT_DIR]
"""
import io
import os
import sys

import numpy as np

DTYPES = ["b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8"]


def npy(a, version=(1, 0)):
    b = io.BytesIO()
    np.lib.format.write_array(b, a, version=version, allow_pickle=False)
    return b.getvalue()


def v1(dict_text, data=b""):
    h = dict_text.encode()
    hl = (10 + len(h) + 1 + 63) // 64 * 64 - 10
    h = h + b" " * (hl - len(h) - 1) + b"\n"
    return b"\x93NUMPY\x01\x00" + hl.to_bytes(2, "little") + h + data


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus", "npy")
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    seeds = {}
    for i, dt in enumerate(DTYPES):
        a = (rng.standard_normal((3, 4, 2)) * 50).astype(dt)
        for order in "CF":
            for bo in "<>":
                s = a.astype(np.dtype(dt).newbyteorder(bo))
                s = np.asfortranarray(s) if order == "F" else np.ascontiguousarray(s)
                ver = (1 + (i + (order == "F") + (bo == ">")) % 3, 0)
                seeds[f"{dt}_{order}_{'le' if bo == '<' else 'be'}_v{ver[0]}.npy"] = npy(s, ver)
    seeds["scalar.npy"] = npy(np.float32(3.5).reshape(()))
    seeds["empty.npy"] = npy(np.zeros((0, 5), np.int16))
    seeds["rows_f32.npy"] = npy(np.arange(64, dtype=np.float32).reshape(16, 4))
    seeds["dims8.npy"] = npy(np.arange(256, dtype=np.uint8).reshape((2,) * 8))
    seeds["py2_long.npy"] = v1("{'descr': '<i2', 'fortran_order': False, 'shape': (3L, 2L), }", b"\x01\x00" * 6)
    seeds["h_2pow40.npy"] = v1("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }", b"\0" * 16)
    seeds["h_negative.npy"] = v1("{'descr': '<f4', 'fortran_order': False, 'shape': (3, -2), }")
    seeds["h_unterminated.npy"] = v1("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), ")
    seeds["h_wrong_descr.npy"] = v1("{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", b"\0" * 24)
    seeds["h_structured.npy"] = v1("{'descr': [('x', '<f4')], 'fortran_order': False, 'shape': (1,), }", b"\0" * 4)
    seeds["h_truncated.npy"] = npy(np.zeros((4, 4), np.float64))[:-10]
    bad = bytearray(npy(np.zeros(3, np.float32)))
    bad[8:10] = (60000).to_bytes(2, "little")
    seeds["h_len_past_end.npy"] = bytes(bad)
    for name, data in sorted(seeds.items()):
        assert len(data) < 4096, (name, len(data))
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"{len(seeds)} seeds in {out}")


if __name__ == "__main__":
    main()
