"""Tar shards (WebDataset) and .csv tables as sources through sluice.Loader: the same batches as the
folder or the .jsonl table they were made from; written with Python's tarfile and csv."""
import csv
import io
import json
import os
import tarfile

import numpy as np
import pytest

import sluice


def _files(root):
    """(relative path, label) of an ImageFolder tree, in the loader's index order."""
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    return [(f"{c}/{f}", k) for k, c in enumerate(classes) for f in sorted(os.listdir(os.path.join(root, c)))]


def _shards(root, out, per_shard, keys=("jpg", "cls")):
    files = _files(root)
    os.makedirs(out, exist_ok=True)
    for s in range(0, len(files), per_shard):
        with tarfile.open(os.path.join(out, f"train-{s // per_shard:06d}.tar"), "w", format=tarfile.PAX_FORMAT) as tf:
            for i, (rel, label) in enumerate(files[s:s + per_shard], start=s):
                for key, data in ((keys[0], open(os.path.join(root, rel), "rb").read()), (keys[1], str(label).encode())):
                    ti = tarfile.TarInfo(f"s/{i:06d}.{key}")
                    ti.size = len(data)
                    tf.addfile(ti, io.BytesIO(data))
    return len(files), (len(files) + per_shard - 1) // per_shard


def _sums(source, workers, **kw):
    with sluice.Loader(source, batch_size=6, size=32, budget="64M", workers=workers, checksum=True, seed=4, **kw) as ld:
        sums = [b.checksum for b in ld]
        return sums, ld.dataset_size


@pytest.mark.parametrize("preset", ["train", "val"])
def test_shards_equal_the_folder(dataset, tmp_path, preset):
    n, shards = _shards(dataset, str(tmp_path / "sh"), per_shard=20)
    want, _ = _sums(dataset, 2, preset=preset)
    pattern = str(tmp_path / "sh" / f"train-{{000000..{shards - 1:06d}}}.tar")
    for source, workers in ((pattern, 1), (pattern, 8), (str(tmp_path / "sh"), 3)):
        got, size = _sums(source, workers, preset=preset)
        assert got == want and size == n


def test_shard_paths_and_schema_keys(dataset, tmp_path):
    n, shards = _shards(dataset, str(tmp_path / "sh"), per_shard=64, keys=("img.JPG", "label.txt"))
    source = str(tmp_path / "sh" / "train-000000.tar")
    fields = {"img": {"kind": "image", "size": 16, "preset": "val"}, "label": {"kind": "label"}}
    with sluice.Loader(source, batch_size=8, budget="32M", workers=2, shuffle=False, fields=fields) as ld:
        labels = np.concatenate([np.array(b["label"]) for b in ld])
        assert ld.sample_path(5).endswith("train-000000.tar:s/000005")
    assert labels.tolist() == [lab for _, lab in _files(dataset)]
    with pytest.raises(FileNotFoundError):
        sluice.Loader(str(tmp_path / "sh" / "none-{0..3}.tar"))


def test_csv_table_equals_jsonl_table(dataset, tmp_path):
    files = _files(dataset)
    with open(os.path.join(dataset, "t.jsonl"), "w") as f:
        for k, (rel, label) in enumerate(files):
            f.write(json.dumps({"image": rel, "y": label, "w": [k * 0.5]}) + "\n")
    with open(os.path.join(dataset, "t.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["w", "image", "y"])
        for k, (rel, label) in enumerate(files):
            w.writerow([k * 0.5, rel, label])
    fields = {"image": {"kind": "image", "size": 24}, "y": {"kind": "label"}, "w": {"kind": "target", "length": 1}}
    a, _ = _sums(os.path.join(dataset, "t.jsonl"), 2, fields=fields)
    b, _ = _sums(os.path.join(dataset, "t.csv"), 3, fields=fields)
    assert a == b


def test_row_grammar_errors_name_line_and_key(dataset, tmp_path):
    rel = _files(dataset)[0][0]
    path = os.path.join(dataset, "bad.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps({"image": rel, "label": 1}) + "\n")
        f.write(json.dumps({"image": rel, "label": 1, "meta": {"w": 1}}) + "\n")
    with pytest.raises(ValueError, match=r'bad.jsonl: line 2: "meta": an object inside a row'):
        sluice.Loader(path, fields={"image": {"kind": "image"}, "label": {"kind": "label"}})


def test_error_path_of_a_4096_byte_member_name(dataset, tmp_path):
    """A member name of the longest length allowed (4,096 bytes) that fails: errors() and sample_path give its
    whole path (they gave None: the binding's buffer was 4,096 bytes)."""
    prefix = "p" * 100 + "/" + "q" * (4096 - 101 - 4)
    good = open(os.path.join(dataset, _files(dataset)[0][0]), "rb").read()
    source = str(tmp_path / "x.tar")
    with tarfile.open(source, "w", format=tarfile.GNU_FORMAT) as tf:
        for name, data in (("a.jpg", good), ("a.cls", b"0"), (prefix + ".jpg", b"not an image"), (prefix + ".cls", b"1")):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    with sluice.Loader(source, batch_size=2, size=16, budget="32M", workers=1, shuffle=False) as ld:
        assert sum(len(b["label"]) for b in ld) == 1
        errs = ld.errors()
        assert len(errs) == 1 and errs[0]["index"] == 1
        assert errs[0]["path"] == source + ":" + prefix
        assert ld.sample_path(1) == source + ":" + prefix
