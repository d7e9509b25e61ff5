#!/usr/bin/env python3
"""Arrays written by numpy, and what reading them must give: for test_array.c.

    gen_arrays.py OUT_DIR

Writes into OUT_DIR:
  <dtype>_<C|F>_<le|be>_v<1|2|3>.npy   every numeric dtype x order x byte
                                       order x format version, shape (3, 5, 4)
  <dtype>.bin                          the same array, native order, C order
  shape_<k>.npy / shape_<k>.bin        0-d, (0,), (7,), (2, 0, 3), 8-d arrays
  cast_<from>_<to>.bin                 <from>_C_le_v1.npy cast to <to> by the
                                       rules of src/ops/array.h (numpy's astype,
                                       saturating where numpy is undefined)
  raw_rows_f32.bin, raw_i16_be.bin     raw files (np.tofile)
  pair_blur.npy, pair_sharp.npy        float32 HWC 40x50x3, sharp = blur + 1
  voxel_chw.npy                        float32 CHW 4x40x50
  cases.txt                            one line per .npy file:
                                       name dtype_code fortran swap ndim dims... expected
"""
import os
import sys

import numpy as np

# SL_DTYPE_* codes (include/sluice.h)
CODES = {"uint8": 1, "int64": 2, "float32": 3, "int8": 4, "int16": 5, "uint16": 6, "int32": 7,
         "uint32": 8, "uint64": 9, "float16": 10, "float64": 11, "bool": 12}


def values(dt, shape, seed):
    """Deterministic values of dtype dt: the full range for integers, special
    values (NaN, inf, -0.0, subnormals, huge) mixed into floats."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    d = np.dtype(dt)
    if d.kind == "b":
        v = rng.integers(0, 2, n).astype(bool)
    elif d.kind in "iu":
        info = np.iinfo(d)
        v = rng.integers(info.min, info.max, n, dtype=d, endpoint=True)
    else:
        v = (rng.standard_normal(n) * 300).astype(d)
        special = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-40, 5e-8, 70000.0, -1e30, 2.5, -2.5, 255.9, 1e20],
                           dtype=np.float64)
        with np.errstate(over="ignore"):
            v[: min(n, len(special))] = special[: min(n, len(special))].astype(d)
    return v.reshape(shape)


def cast(a, to):
    """a.astype(to) with the rules of src/ops/array.h."""
    to = np.dtype(to)
    if a.dtype.kind == "f" and to.kind in "iu":
        info = np.iinfo(to)
        x = a.astype(np.float64)
        out = np.zeros(x.shape, dtype=to)
        ok = ~np.isnan(x)
        t = np.trunc(np.where(ok, x, 0))
        lo, hi = t <= info.min, t >= info.max
        mid = ok & ~lo & ~hi
        out[mid] = t[mid].astype(to)
        out[ok & lo] = info.min
        out[ok & hi] = info.max
        return out
    with np.errstate(over="ignore", invalid="ignore"):
        return a.astype(to)


def save(path, a, version):
    with open(path, "wb") as f:
        np.lib.format.write_array(f, a, version=(version, 0), allow_pickle=False)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    lines = []
    for dt, code in CODES.items():
        a = values(dt, (3, 5, 4), code)
        np.ascontiguousarray(a).tofile(os.path.join(out, f"{dt}.bin"))
        for order in "CF":
            for bo in ("le", "be"):
                stored = a.astype(np.dtype(dt).newbyteorder("<" if bo == "le" else ">"))
                stored = np.asfortranarray(stored) if order == "F" else np.ascontiguousarray(stored)
                for v in (1, 2, 3):
                    name = f"{dt}_{order}_{bo}_v{v}.npy"
                    save(os.path.join(out, name), stored, v)
                    swap = int(bo == "be" and stored.dtype.itemsize > 1)
                    lines.append(f"{name} {code} {int(order == 'F')} {swap} 3 3 5 4 {dt}.bin")
        for to in CODES:
            cast(a, to).tofile(os.path.join(out, f"cast_{dt}_{to}.bin"))
    shapes = [(), (0,), (7,), (2, 0, 3), (1, 2, 1, 2, 1, 2, 1, 2)]
    for k, s in enumerate(shapes):
        a = values("float64", s, 100 + k)
        save(os.path.join(out, f"shape_{k}.npy"), a, 1)
        a.tofile(os.path.join(out, f"shape_{k}.bin"))
        lines.append(f"shape_{k}.npy {CODES['float64']} 0 0 {len(s)} {' '.join(map(str, s))} shape_{k}.bin".replace("  ", " "))
    rows = np.arange(1000 * 4, dtype=np.float32).reshape(1000, 4)  # row i holds 4i .. 4i+3
    rows.tofile(os.path.join(out, "raw_rows_f32.bin"))
    values("int16", (6, 7), 9).astype(">i2").tofile(os.path.join(out, "raw_i16_be.bin"))
    values("int16", (6, 7), 9).tofile(os.path.join(out, "raw_i16_native.bin"))
    blur = values("float32", (40, 50, 3), 7)
    blur[~np.isfinite(blur)] = 0
    blur = np.clip(blur, -1e6, 1e6)
    save(os.path.join(out, "pair_blur.npy"), blur, 1)
    save(os.path.join(out, "pair_sharp.npy"), blur + np.float32(1), 1)
    save(os.path.join(out, "voxel_chw.npy"), values("float32", (4, 40, 50), 8), 1)
    with open(os.path.join(out, "cases.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
