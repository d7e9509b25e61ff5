"""fields=: batches as dicts of every schema field, from .jsonl tables; the torch layer."""
import json
import os

import numpy as np
import pytest

import sluice
from conftest import make_dataset


def _table(tmp_path):
    root = str(tmp_path / "data")
    make_dataset(root, per_class=4)
    files = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)
    with open(os.path.join(root, "m.jsonl"), "w") as f:
        for k, p in enumerate(files):
            f.write(json.dumps({"image": p, "label": k % 4, "box": [k, -k, 0.25],
                                "views": [p, files[(k + 1) % len(files)]]}) + "\n")
    return os.path.join(root, "m.jsonl"), len(files)


FIELDS = {"image": {"kind": "image", "size": 32},
          "label": {"kind": "label"},
          "box": {"kind": "target", "length": 3},
          "views": {"kind": "sequence", "of": {"kind": "image", "size": 16, "preset": "val"}}}


def test_dict_batches(tmp_path):
    path, n = _table(tmp_path)
    seen = []
    with sluice.Loader(path, batch_size=4, budget="64M", workers=2, fields=FIELDS, shuffle=False) as ld:
        for b in ld:
            assert list(b) == ["image", "label", "box", "views", "index"]
            assert b["image"].shape == (b.size, 3, 32, 32) and b["image"].kind == "image"
            assert b["views"].shape == (b.size, 2, 3, 16, 16) and b["views"].kind == "sequence"
            box = np.asarray(b["box"])
            idx = np.asarray(b["index"])
            assert box.dtype == np.float32
            np.testing.assert_array_equal(box[:, 0], idx)
            np.testing.assert_array_equal(box[:, 2], 0.25)
            np.testing.assert_array_equal(np.asarray(b["label"]), idx % 4)
            seen += idx.tolist()
    assert seen == list(range(n))


def test_fields_from_a_json_file(tmp_path):
    """fields= takes the path of a JSON file, as the CLI's --fields: the same
    batches as the dict; a file that is missing, not a regular file, or over
    1 MiB is refused before anything is loaded (a FIFO is never waited on)."""
    import pathlib

    path, _ = _table(tmp_path)
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(FIELDS, indent=2))
    sums = []
    for f in (FIELDS, str(schema), pathlib.Path(schema), os.fsencode(str(schema))):
        with sluice.Loader(path, batch_size=5, budget="64M", workers=2, fields=f, checksum=True) as ld:
            sums.append([(list(b), b.checksum) for b in ld])
    assert sums[1] == sums[0] and sums[2] == sums[0] and sums[3] == sums[0]
    with pytest.raises(FileNotFoundError, match="fields: .*nowhere.json.*no such file"):
        sluice.Loader(path, fields=str(tmp_path / "nowhere.json"))
    with pytest.raises(ValueError, match="not a regular file"):
        sluice.Loader(path, fields=str(tmp_path))
    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(ValueError, match="not a regular file"):
        sluice.Loader(path, fields=str(tmp_path / "fifo.json"))
    big = tmp_path / "big.json"
    big.write_text(json.dumps(FIELDS) + " " * (1 << 20))
    with pytest.raises(ValueError, match="larger than 1 MiB"):
        sluice.Loader(path, fields=big)
    bad = tmp_path / "bad.json"
    bad.write_text("{\"image\": ")
    with pytest.raises(ValueError, match="not valid JSON"):
        sluice.Loader(path, fields=bad)


def test_decode_image_redoes_a_field_of_any_name_or_group(tmp_path):
    """decode_image(crop_group=) gives a loader's sample for an image field
    named other than "image" (no group: its name) and for one in a group,
    with the field's own recipe; train_crop takes it too."""
    path, _ = _table(tmp_path)
    root = os.path.dirname(path)
    rows = [json.loads(line) for line in open(path)]
    fields = {"photo": {"kind": "image", "size": 24, "key": "image"},
              "left": {"kind": "image", "size": 20, "key": "image", "crop_group": "pair", "interpolation": "bicubic"},
              "right": {"kind": "image", "size": 20, "key": "image", "crop_group": "pair"},
              "label": {"kind": "label"}}
    with sluice.Loader(path, batch_size=6, budget="64M", workers=2, fields=fields, seed=21) as ld:
        ld.set_epoch(2)
        b = next(iter(ld))
        photo, left, right = (np.asarray(b[k]) for k in ("photo", "left", "right"))
        differs = 0
        for k, i in enumerate(np.asarray(b["index"]).tolist()):
            data = open(os.path.join(root, rows[i]["image"]), "rb").read()
            args = dict(preset="train", seed=21, epoch=2, index=i)
            np.testing.assert_array_equal(photo[k], sluice.decode_image(data, size=24, crop_group="photo", **args))
            np.testing.assert_array_equal(left[k], sluice.decode_image(data, size=20, crop_group="pair",
                                                                        interpolation="bicubic", **args))
            np.testing.assert_array_equal(right[k], sluice.decode_image(data, size=20, crop_group="pair", **args))
            differs += not np.array_equal(photo[k], sluice.decode_image(data, size=24, **args))
            w, h = sluice.probe_image(data)["width"], sluice.probe_image(data)["height"]
            assert sluice.train_crop(w, h, 21, 2, i, crop_group="pair") == \
                sluice.train_crop(w, h, 21, 2, i, crop_group="pair", scale=(0.08, 1.0))
        assert differs > 0  # without crop_group: the group "image", other crops
    with pytest.raises(TypeError, match="crop_group"):
        sluice.decode_image(data, preset="train", crop_group=3)


def test_schema_errors_are_valueerrors(tmp_path):
    path, _ = _table(tmp_path)
    with pytest.raises(ValueError, match='field "box": unknown option "lenght"'):
        sluice.Loader(path, fields={"box": {"kind": "target", "lenght": 3}})
    with pytest.raises(TypeError, match="fields"):
        sluice.Loader(path, fields=["image"])


def test_same_bytes_any_workers(tmp_path):
    path, _ = _table(tmp_path)
    sums = []
    for w in (1, 3):
        with sluice.Loader(path, batch_size=5, budget="64M", workers=w, fields=FIELDS, checksum=True) as ld:
            sums.append([b.checksum for b in ld])
    assert sums[0] == sums[1]


def test_torch_dict(tmp_path):
    torch = pytest.importorskip("torch")
    import sluice.torch as st

    path, _ = _table(tmp_path)
    with st.Loader(path, batch_size=4, budget="64M", workers=2, fields=FIELDS, device="cpu",
                   dtype=torch.float32) as ld:
        out = next(iter(ld))
    assert isinstance(out, dict)
    assert out["image"].dtype == torch.float32 and out["image"].shape == (4, 3, 32, 32)
    assert out["views"].dtype == torch.float32 and out["views"].shape == (4, 2, 3, 16, 16)
    assert out["box"].dtype == torch.float32 and out["label"].dtype == torch.int64
    # normalized over the channel axis: a view's pixels map back to 0..255
    mean = torch.tensor(st.IMAGENET_MEAN).view(-1, 1, 1)
    std = torch.tensor(st.IMAGENET_STD).view(-1, 1, 1)
    back = (out["views"] * std + mean) * 255
    assert float(back.min()) > -0.5 and float(back.max()) < 255.5


def test_image_field_recipe_equals_loader_options(dataset):
    """A schema's image options are the loader's recipe options, byte for byte."""
    opts = dict(size=(24, 32), interpolation="bicubic", scale=(0.5, 1.0), ratio=(0.9, 1.1), hflip=0.0)
    fields = {"image": {"kind": "image", "size": [24, 32], "interpolation": "bicubic", "scale": [0.5, 1.0],
                        "ratio": [0.9, 1.1], "hflip": 0},
              "label": {"kind": "label"}}
    kw = dict(batch_size=8, budget="64M", workers=2, checksum=True, seed=3)
    with sluice.Loader(dataset, **kw, **opts) as a, sluice.Loader(dataset, **kw, fields=fields) as b:
        sa = [(x.checksum, x["image"].shape) for x in a]
        sb = [(x.checksum, x["image"].shape) for x in b]
    assert sa == sb and sa[0][1] == (8, 3, 24, 32)
