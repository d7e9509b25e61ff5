"""kind "array" through a loader, against numpy: .npy dtypes, orders and versions, raw files,
paired crops, points, determinism and resume, hostile files as error records."""
import json
import os

import numpy as np
import pytest

import sluice

DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32",
          "float64"]


def _values(dt, shape, seed):
    rng = np.random.default_rng(seed)
    d = np.dtype(dt)
    if d.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if d.kind in "iu":
        info = np.iinfo(d)
        return rng.integers(info.min, info.max, shape, dtype=d, endpoint=True)
    return (rng.standard_normal(shape) * 100).astype(d)


def _write_npy(path, a, version):
    with open(path, "wb") as f:
        np.lib.format.write_array(f, a, version=version, allow_pickle=False)


def _manifest(root, rows, name="m.jsonl"):
    path = os.path.join(root, name)
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return path


def _all(ld):
    """Every batch of one epoch as {field: array} rows, in index order."""
    out = {}
    for b in ld:
        idx = np.asarray(b["index"])
        for k, v in b.items():
            v = np.asarray(v)
            for j, i in enumerate(idx):
                out.setdefault(int(i), {})[k] = v[j].copy()
    return out


@pytest.mark.parametrize("dt", DTYPES)
def test_npy_dtypes_orders_versions_equal_numpy(tmp_path, dt):
    rows, want = [], []
    k = 0
    for order in ("C", "F"):
        for bo in ("<", ">"):
            for version in ((1, 0), (2, 0), (3, 0)):
                a = _values(dt, (5, 6, 3), k)
                a = a.astype(a.dtype.newbyteorder(bo)) if dt != "bool" else a
                a = np.asfortranarray(a) if order == "F" else a
                name = f"a{k}.npy"
                _write_npy(tmp_path / name, a, version)
                rows.append({"a": name})
                want.append(np.ascontiguousarray(a).astype(np.dtype(dt)))
                k += 1
    path = _manifest(str(tmp_path), rows)
    with sluice.Loader(path, batch_size=4, budget="32M", workers=2, shuffle=False,
                       fields={"a": {"kind": "array"}}) as ld:
        got = _all(ld)
        assert ld.stats()["errors"] == 0
    for i, w in enumerate(want):
        g = got[i]["a"]
        assert g.dtype == np.dtype(dt) and g.shape == (5, 6, 3)
        np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8))  # bit for bit (NaN included)


def test_cast_is_numpy_astype(tmp_path):
    a = _values("int16", (4, 7), 3)
    np.save(tmp_path / "x.npy", a)
    path = _manifest(str(tmp_path), [{"x": "x.npy"}])
    for dt in ("float32", "uint8", "float16", "int64"):
        with sluice.Loader(path, batch_size=1, budget="16M", workers=1,
                           fields={"x": {"kind": "array", "dtype": dt}}) as ld:
            g = _all(ld)[0]["x"]
        np.testing.assert_array_equal(g, a.astype(dt))


def test_raw_equals_numpy(tmp_path):
    rows, want = [], []
    for i in range(5):
        a = _values("float32", (100 + 7 * i, 4), i)
        a.astype(">f4").tofile(tmp_path / f"s{i}.bin")
        rows.append({"scan": f"s{i}.bin"})
        want.append(a)
    path = _manifest(str(tmp_path), rows)
    fields = {"scan": {"kind": "array", "format": "raw", "dtype": "float32", "byte_order": "big", "shape": [-1, 4],
                       "pad": [200, 4]}}
    with sluice.Loader(path, batch_size=2, budget="16M", workers=2, fields=fields) as ld:
        got = _all(ld)
    for i, w in enumerate(want):
        g = got[i]["scan"]
        np.testing.assert_array_equal(g[:len(w)], w)
        assert not g[len(w):].any()


def _pairs(tmp_path, n=12):
    rows = []
    for i in range(n):
        blur = _values("float32", (40 + i, 50, 3), i)
        np.save(tmp_path / f"{i}_blur.npy", blur)
        np.save(tmp_path / f"{i}_sharp.npy", blur + np.float32(1))
        np.save(tmp_path / f"{i}_vox.npy", np.ascontiguousarray(np.transpose(blur, (2, 0, 1))))
        rows.append({"blur": f"{i}_blur.npy", "sharp": f"{i}_sharp.npy", "vox": f"{i}_vox.npy"})
    return _manifest(str(tmp_path), rows)


PAIRS = {"blur": {"kind": "array", "layout": "HWC", "crop": [16, 24], "crop_group": "xy"},
         "sharp": {"kind": "array", "layout": "HWC", "crop": [16, 24], "crop_group": "xy"},
         "vox": {"kind": "array", "layout": "CHW", "crop": [16, 24], "crop_group": "xy"}}


def test_paired_crops_stay_aligned(tmp_path):
    path = _pairs(tmp_path)
    with sluice.Loader(path, batch_size=5, budget="32M", workers=3, fields=PAIRS, seed=7) as ld:
        for epoch in range(2):
            got = _all(ld)
            assert len(got) == 12
            for i, r in got.items():
                assert np.array_equal(r["sharp"], r["blur"] + np.float32(1))  # exactly +1 in every crop
                np.testing.assert_array_equal(r["vox"], np.transpose(r["blur"], (2, 0, 1)))
                full = np.load(tmp_path / f"{i}_blur.npy")
                hits = [(y, x) for y in range(full.shape[0] - 15) for x in range(27)
                        if np.array_equal(full[y:y + 16, x:x + 24], r["blur"])]
                assert hits, f"sample {i}: the crop is no window of the array"


def test_points_are_rows_of_the_scan_and_len(tmp_path):
    rows, scans = [], []
    for i in range(6):
        n = 30 + 10 * i  # 30 .. 80 rows; points 50: subsets and padded scans
        a = np.arange(n * 4, dtype=np.float32).reshape(n, 4) + 1000 * i
        a.tofile(tmp_path / f"p{i}.bin")
        scans.append(a)
    for i in range(0, 5):
        rows.append({"lidar": [f"p{i}.bin", f"p{i + 1}.bin"]})
    path = _manifest(str(tmp_path), rows)
    fields = {"lidar": {"kind": "sequence", "of": {"kind": "array", "format": "raw", "dtype": "float32",
                                                   "shape": [-1, 4], "points": 50}}}
    with sluice.Loader(path, batch_size=2, budget="16M", workers=2, fields=fields) as ld:
        got = _all(ld)
    for i, r in got.items():
        assert r["lidar"].shape == (2, 50, 4) and r["lidar_len"].shape == (2,)
        for k in range(2):
            scan, out, n = scans[i + k], r["lidar"][k], int(r["lidar_len"][k])
            assert n == min(len(scan), 50)
            assert not out[n:].any()
            pos = [int(row[0] - scan[0, 0]) // 4 for row in out[:n]]
            assert pos == sorted(set(pos)), "rows are distinct and kept in the file's order"
            np.testing.assert_array_equal(out[:n], scan[pos])


def test_same_bytes_workers_1_and_8_and_resume(tmp_path):
    path = _pairs(tmp_path, n=20)
    sums = []
    for w in (1, 8):
        with sluice.Loader(path, batch_size=3, budget="64M", workers=w, fields=PAIRS, checksum=True, seed=3) as ld:
            sums.append([b.checksum for b in ld] + [b.checksum for b in ld])
    assert sums[0] == sums[1] and len(set(sums[0])) == len(sums[0])
    with sluice.Loader(path, batch_size=3, budget="32M", workers=2, fields=PAIRS, checksum=True, seed=3) as ld:
        it = iter(ld)
        first = [next(it).checksum for _ in range(3)]
        state = ld.state_dict()
    assert first == sums[0][:3]
    with sluice.Loader(path, batch_size=3, budget="32M", workers=4, fields=PAIRS, checksum=True, seed=3) as ld:
        ld.load_state_dict(state)
        rest = [b.checksum for b in ld]
    assert rest == sums[0][3:7]


def test_hostile_files_are_error_records(tmp_path):
    good = _values("float32", (8, 4), 0)
    np.save(tmp_path / "good.npy", good)
    raw = open(tmp_path / "good.npy", "rb").read()
    hdr_len = int.from_bytes(raw[8:10], "little")
    header = raw[10:10 + hdr_len].decode("latin1")
    bad = {
        "truncated.npy": raw[:-5],
        "huge.npy": raw[:10] + header.replace("(8, 4)", "(1099511627776, 4)").encode("latin1") + raw[10 + hdr_len:],
        "unterminated.npy": raw[:10] + header.replace("}", " ").encode("latin1") + raw[10 + hdr_len:],
        "complex.npy": raw[:10] + header.replace("'<f4'", "'<c8'").encode("latin1") + raw[10 + hdr_len:],
        "notnpy.npy": b"hello, world" * 10,
        "shape.npy": raw[:10] + header.replace("(8, 4)", "(4, 8)").encode("latin1") + raw[10 + hdr_len:],
        "empty.npy": b"",
    }
    rows = [{"a": "good.npy"}]
    for name, data in bad.items():
        (tmp_path / name).write_bytes(data)
        rows.append({"a": name})
    rows.append({"a": "missing.npy"})
    path = _manifest(str(tmp_path), rows)
    with sluice.Loader(path, batch_size=4, budget="16M", workers=2, shuffle=False,
                       fields={"a": {"kind": "array"}}) as ld:
        n = sum(b.size for b in ld)
        errs = ld.errors()
    assert n == 1
    why = {os.path.basename(e["path"]): e["reason"] for e in errs}
    assert sorted(why) == sorted(list(bad) + ["missing.npy"])
    assert "holds 123 (truncated)" in why["truncated.npy"]
    assert "4398046511104 elements" in why["huge.npy"]  # refused from the header, nothing allocated
    assert "not closed" in why["unterminated.npy"]
    assert "complex" in why["complex.npy"]
    assert "magic" in why["notnpy.npy"] and "magic" in why["empty.npy"]
    assert "does not fit the field's (8, 4)" in why["shape.npy"]
    assert "no such file" in why["missing.npy"]


def test_center_cropped_arrays_cached_decoded(tmp_path):
    """An array whose output depends on the file alone (a centre crop) is cached as that output
    (cache_what="decoded"): the same bytes as without the cache, served from it from epoch 2."""
    path = _pairs(tmp_path, n=16)
    fields = {"blur": {"kind": "array", "layout": "HWC", "center_crop": [16, 24]},
              "sharp": {"kind": "array", "layout": "HWC", "crop": [16, 24]}}  # random window: file bytes
    runs = []
    for cache in (None, "4M"):
        with sluice.Loader(path, batch_size=4, budget="64M", workers=2, fields=fields, checksum=True, seed=2,
                           cache=cache, cache_what="decoded") as ld:
            sums = [b.checksum for b in ld] + [b.checksum for b in ld]
            runs.append((sums, ld.stats()))
    assert runs[0][0] == runs[1][0]
    st = runs[1][1]
    assert st["cache_hits"] >= 16 and st["cache_entries"] >= 16


def test_show_draws_arrays_as_heat_maps(tmp_path, sluice_exe):
    """`sluice show --fields`: a panel per array, each a heat map of its own range (its least value in
    the ramp's first colour, its greatest in the last), the label and index under them."""
    import subprocess

    from PIL import Image

    path = _pairs(tmp_path, n=4)
    schema = tmp_path / "pairs.fields.json"
    schema.write_text(json.dumps(PAIRS))
    out = tmp_path / "grid.png"
    p = subprocess.run([sluice_exe, "show", path, "--fields", str(schema), "--batch", "2", "--cols", "2", "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "2x1 tiles of blur (heat map), sharp (heat map), vox (heat map)" in p.stdout
    grid = np.asarray(Image.open(out))
    side = 16 * (96 // 24)  # a 16x24 crop drawn 4 times larger: 64 x 96
    assert grid.shape[1] == 4 + 2 * (3 * (96 + 4) - 4 + 4)
    panel = grid[4:4 + side, 4:4 + 96]
    colours = {tuple(c) for c in panel.reshape(-1, 3)}
    assert (68, 1, 84) in colours and (253, 231, 37) in colours
