"""The sluice command's messages and outputs, run as a user runs it: help for
every command, checks on every value of `decode` and `show`, sizes by one rule,
the pictures written (PNG/PPM) against the library's own decode."""
import json
import os
import subprocess

import numpy as np
import pytest

import sluice
from conftest import SLUICE

pytestmark = pytest.mark.skipif(not os.access(SLUICE, os.X_OK), reason="build/sluice not built")


def run(*args):
    p = subprocess.run([SLUICE, *map(str, args)], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


@pytest.fixture(scope="module")
def jpeg(dataset):
    return os.path.join(dataset, "cat", "cat_003.jpg")


# ---- help ----------------------------------------------------------------------
@pytest.mark.parametrize("cmd", ["bench", "show", "decode", "plan", "top"])
def test_every_command_has_help(cmd):
    rc, out, err = run(cmd, "--help")
    assert rc == 0 and out.startswith(f"usage: sluice {cmd}") and err == ""
    assert (rc, out) == run("help", cmd)[:2]


def test_help_lists_the_commands():
    rc, out, _ = run("help")
    assert rc == 0
    for cmd in ("bench", "show", "decode", "plan", "top", "help", "version"):
        assert f"\n  {cmd} " in out
    assert run("--help")[:2] == (0, out)


def test_help_of_an_unknown_command():
    rc, out, err = run("help", "nope")
    assert rc == 2 and "unknown command 'nope'" in err and out == ""


def test_no_command_is_usage_on_stderr():
    rc, out, err = run()
    assert rc == 2 and out == "" and err.startswith("usage: sluice COMMAND")


def test_version_names_the_build():
    rc, out, _ = run("--version")
    assert rc == 0 and out.startswith(f"sluice {sluice.__version__}")
    assert "build: version=" in out and ";jpeg=libjpeg" in out


def test_top_help_prints_a_percent_sign():
    _, out, _ = run("top", "--help")
    assert "PCT% of" in out and "%%" not in out


# ---- decode: checks -------------------------------------------------------------
@pytest.mark.parametrize("flag", ["--seed", "--index", "--epoch"])
def test_decode_refuses_negative_numbers(jpeg, tmp_path, flag):
    out = tmp_path / "x.png"
    rc, _, err = run("decode", jpeg, "-o", out, flag, "-1")
    assert rc == 2 and f"{flag} takes a whole number from 0 to" in err and "not '-1'" in err
    assert not out.exists()


@pytest.mark.parametrize("flag,value", [("--size", "0"), ("--size", "70000"), ("--max-pixels", "0"),
                                        ("--seed", "12x"), ("--index", "18446744073709551616")])
def test_decode_refuses_numbers_out_of_range(jpeg, tmp_path, flag, value):
    rc, _, err = run("decode", jpeg, "-o", tmp_path / "x.png", flag, value)
    # --size is a recipe flag (N or H,W), the others whole numbers
    want = f"{flag} takes N or H,W" if flag == "--size" else f"{flag} takes a whole number"
    assert rc == 2 and want in err and f"not '{value}'" in err


def test_decode_refuses_an_unknown_extension(jpeg, tmp_path):
    out = tmp_path / "x.jpg"
    rc, _, err = run("decode", jpeg, "-o", out, "--preset", "val")
    assert rc == 2 and "cannot tell the format of" in err and "write .png or .ppm" in err
    assert not out.exists()


@pytest.mark.parametrize("flag", [["--preset", "train"], ["--size", "64"], ["--seed", "3"], ["--exif"]])
def test_decode_transform_without_output_is_refused(jpeg, flag):
    rc, out, err = run("decode", jpeg, *flag)
    assert rc == 2 and f"{flag[0]} only matters when writing" in err and "add -o OUT.png" in err and out == ""


def test_decode_without_output_prints_the_header(jpeg):
    rc, out, _ = run("decode", jpeg)
    assert rc == 0 and out.startswith(f"{jpeg}: JPEG ") and "3 channels" in out


def test_decode_command_line_mistakes(jpeg):
    assert run("decode", jpeg, "--bogus")[0] == 2
    rc, _, err = run("decode", jpeg, jpeg)
    assert rc == 2 and "one FILE only" in err
    rc, _, err = run("decode", jpeg, "-o")
    assert rc == 2 and "-o needs a value" in err
    rc, _, err = run("decode")
    assert rc == 2 and "no FILE" in err
    rc, _, err = run("decode", jpeg, "-o", "x.png", "--preset", "big")
    assert rc == 2 and "--preset is none, train or val, not 'big'" in err


def test_decode_refuses_a_file_over_max_bytes_before_reading(jpeg, tmp_path):
    rc, _, err = run("decode", jpeg, "-o", tmp_path / "x.png", "--max-bytes", "1K")
    size = os.path.getsize(jpeg)
    assert size > 1024
    assert rc == 1 and f"is {size} bytes, over the limit of 1024 (--max-bytes)" in err


def test_decode_unreadable_and_corrupt_files(tmp_path):
    rc, _, err = run("decode", tmp_path / "missing.jpg")
    assert rc == 1 and "cannot open" in err and "No such file" in err
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not an image")
    rc, _, err = run("decode", bad, "-o", tmp_path / "x.png")
    assert rc == 1 and "unsupported file format" in err


# ---- decode: the pictures ----------------------------------------------------------
def _read_picture(path):
    from PIL import Image

    with Image.open(path) as im:
        assert im.mode == "RGB"
        return np.asarray(im)


@pytest.mark.parametrize("ext", ["png", "PNG", "ppm"])
@pytest.mark.parametrize("preset", ["train", "val", "none"])
def test_decode_writes_what_the_library_decodes(jpeg, tmp_path, ext, preset):
    out = tmp_path / f"seen.{ext}"
    rc, _, err = run("decode", jpeg, "-o", out, "--preset", preset, "--size", 40, "--seed", 7, "--index", 5)
    assert rc == 0, err
    with open(jpeg, "rb") as f:
        data = f.read()
    want = sluice.decode_image(data, preset=None if preset == "none" else preset, size=40, seed=7, index=5)
    if preset != "none":
        want = want.transpose(1, 2, 0)  # CHW -> HWC
    assert np.array_equal(_read_picture(out), want)
    with open(out, "rb") as f:
        magic = f.read(8)
    assert magic == b"\x89PNG\r\n\x1a\n" if ext.lower() == "png" else magic.startswith(b"P6\n")


def test_png_writer_across_stored_block_boundaries(tmp_path):
    # 200 x 150 RGB: rows of 601 bytes, 90150 bytes of scanlines: two deflate
    # blocks, a row split across them. Pillow checks every CRC and the Adler-32.
    from PIL import Image

    rng = np.random.default_rng(3)
    src = rng.integers(0, 256, (150, 200, 3), dtype=np.uint8)
    jpg = tmp_path / "noise.png"
    Image.fromarray(src).save(jpg)  # sluice reads PNG too (lossless)
    if sluice.build_info()["png"] is None:
        pytest.skip("built without libspng")
    out = tmp_path / "copy.png"
    rc, _, err = run("decode", jpg, "-o", out, "--preset", "none")
    assert rc == 0, err
    assert np.array_equal(_read_picture(out), src)


# ---- sizes: one rule --------------------------------------------------------------
@pytest.mark.parametrize("cmd", ["bench", "plan", "show"])
def test_decimal_size_units_are_refused(dataset, tmp_path, cmd):
    extra = ["-o", tmp_path / "g.png"] if cmd == "show" else []
    rc, _, err = run(cmd, dataset, "--budget", "2GB", *extra)
    assert rc == 2 and "did you mean 2G (GiB, powers of 1024)?" in err


def test_binary_size_units_are_taken(dataset):
    rc, out, err = run("bench", dataset, "--budget", "64MiB", "--batch", 8, "--size", 32, "--batches", 1, "--json")
    assert rc == 0, err
    assert '"budget_bytes": 67108864' in out


def test_python_sizes_follow_the_same_rule(dataset):
    assert sluice.parse_size("1.5GiB") == 3 << 29
    with pytest.raises(ValueError, match=r"did you mean 2G \(GiB, powers of 1024\)\?"):
        sluice.parse_size("2GB")
    with pytest.raises(ValueError, match=r"budget: size '512MB': did you mean 512M"):
        sluice.Loader(dataset, budget="512MB")


def test_budget_messages_name_the_front_ends_option(dataset):
    rc, _, err = run("bench", dataset, "--budget", "1M", "--batch", 64)
    assert rc == 1 and "raise the budget to at least" in err and "--budget" in err
    with pytest.raises(sluice.BudgetError) as ei:
        sluice.Loader(dataset, batch_size=64, budget="1M")
    msg = str(ei.value)
    assert "raise the budget to at least" in msg and "budget=" in msg and "--budget" not in msg


# ---- show ------------------------------------------------------------------------
def test_show_draws_the_first_batch_with_labels(dataset, tmp_path):
    out = tmp_path / "grid.png"
    rc, stdout, err = run("show", dataset, "--batch", 6, "--size", 32, "--seed", 4, "-o", out)
    assert rc == 0, err
    assert f"wrote {out}: 6 samples" in stdout and "3x2 tiles" in stdout
    grid = _read_picture(out)
    gap, line_h, side = 4, 8 + 2, 32
    tile_h = side + 2 + 2 * line_h  # picture, then caption lines: label (class), #index
    assert grid.shape == (2 * (tile_h + gap) + gap, 3 * (side + gap) + gap, 3)
    with sluice.Loader(dataset, batch_size=6, size=32, seed=4, workers=1) as ld:
        batch = ld.next_batch()
        images = np.asarray(batch["image"]).transpose(0, 2, 3, 1)
        for i in range(6):
            y, x = gap + (i // 3) * (tile_h + gap), gap + (i % 3) * (side + gap)
            assert np.array_equal(grid[y:y + side, x:x + side], images[i]), i
            caption = grid[y + side:y + tile_h, x:x + side]
            assert (caption == 255).all(axis=-1).sum() > 20  # white text drawn under each tile
        del batch, images


def test_show_ppm_and_columns(dataset, tmp_path):
    out = tmp_path / "grid.ppm"
    rc, stdout, err = run("show", dataset, "--batch", 5, "--size", 16, "--cols", 5, "--preset", "val", "-o", out)
    assert rc == 0, err
    assert "5x1 tiles" in stdout
    assert _read_picture(out).shape[1] == 5 * (16 + 4) + 4


@pytest.mark.parametrize("args,message", [
    ([], "no -o GRID.png to write"),
    (["-o", "grid.gif"], "cannot tell the format of 'grid.gif'"),
    (["-o", "g.png", "--batch", "0"], "--batch takes a whole number from 1 to 1024, not '0'"),
    (["-o", "g.png", "--seed", "-3"], "--seed takes a whole number from 0 to"),
    (["-o", "g.png", "--preset", "none"], "--preset is train or val, not 'none'"),
    (["-o", "g.png", "--frobnicate", "1"], "unknown option --frobnicate"),
    (["-o", "g.png", "--batch"], "--batch needs a value"),
])
def test_show_command_line_mistakes(dataset, args, message):
    rc, _, err = run("show", dataset, *args)
    assert rc == 2 and message in err


def test_show_missing_source(tmp_path):
    rc, _, err = run("show", tmp_path / "nowhere", "-o", tmp_path / "g.png")
    assert rc == 1 and "no such file" in err
    assert not (tmp_path / "g.png").exists()


def test_show_budget_below_minimum(dataset, tmp_path):
    rc, _, err = run("show", dataset, "--budget", "1M", "-o", tmp_path / "g.png")
    assert rc == 1 and "raise the budget to at least" in err and "--budget" in err


# ---- unknown options: the one meant ------------------------------------------------
@pytest.mark.parametrize("args,message", [
    (["bench", "DATA", "--batchsize", "4"], "unknown option --batchsize: did you mean --batch?"),
    (["bench", "DATA", "--batch-size", "4"], "unknown option --batch-size: did you mean --batch?"),
    (["bench", "DATA", "--shuffle"], "unknown option --shuffle: sluice shuffles by default"),
    (["bench", "DATA", "--num_workers", "2"], "unknown option --num_workers: did you mean --workers?"),
    (["bench", "DATA", "--budjet", "1G"], "unknown option --budjet: did you mean --budget?"),
    (["bench", "DATA", "--interpolaton", "bicubic"], "unknown option --interpolaton: did you mean --interpolation?"),
    (["bench", "DATA", "--max-err", "0.5"], "unknown option --max-err: did you mean --max-error-rate?"),
    (["show", "DATA", "-o", "g.png", "--shuffle"], "unknown option --shuffle: sluice shuffles by default"),
    (["show", "DATA", "-o", "g.png", "--batch_size", "2"], "unknown option --batch_size: did you mean --batch?"),
    (["decode", "x.jpg", "--sede", "1"], "unknown option --sede: did you mean --seed?"),
    (["decode", "x.jpg", "--crop-groop", "xy"], "unknown option --crop-groop: did you mean --crop-group?"),
    (["plan", "DATA", "--budjet", "1G"], "unknown option --budjet: did you mean --budget?"),
    (["plan", "DATA", "--shuffle", "1"], "unknown option --shuffle\n"),  # plan has no order to keep
    (["top", "--onse"], "unknown option --onse: did you mean --once?"),
    (["pack", "DATA", "OUT", "--prefetch-factor", "2"], "unknown option --prefetch-factor\n"),
    (["pack", "DATA", "OUT", "--samples-per-shrd", "2"], "did you mean --samples-per-shard?"),
    (["pack", "DATA", "OUT", "--nworkers", "2"], "unknown option --nworkers: did you mean --workers?"),
])
def test_unknown_option_names_the_one_meant(dataset, tmp_path, args, message):
    args = [dataset if a == "DATA" else str(tmp_path / "out") if a == "OUT" else a for a in args]
    rc, out, err = run(*args)
    assert rc == 2 and message in err, err
    assert err.count("unknown option") == 1 and not os.path.exists(tmp_path / "out")


def test_unknown_command_names_the_one_meant():
    rc, _, err = run("bnech")
    assert rc == 2 and "unknown command 'bnech': did you mean bench?" in err
    rc, _, err = run("frobnicate")
    assert rc == 2 and "unknown command 'frobnicate'\n" in err


# ---- a reason said once --------------------------------------------------------------
@pytest.mark.parametrize("cmd", ["bench", "show", "plan", "pack"])
def test_missing_source_reason_said_once(cmd, tmp_path):
    missing = str(tmp_path / "nowhere")
    args = {"bench": [missing], "show": [missing, "-o", tmp_path / "g.png"], "plan": [missing, "--no-python"],
            "pack": [missing, tmp_path / "shards"]}[cmd]
    rc, _, err = run(cmd, *args)
    assert rc == 1
    assert err == f"sluice {cmd}: {missing}: no such file or folder\n", err


def test_empty_folder_says_the_code_then_why(tmp_path):
    (tmp_path / "empty" / "a").mkdir(parents=True)
    rc, _, err = run("bench", tmp_path / "empty")
    assert rc == 1 and err.startswith(f"sluice bench: dataset is empty: {tmp_path / 'empty'}: no image files")


# ---- pack: joined paths --------------------------------------------------------------
@pytest.mark.parametrize("slashes", ["/", "//"])
def test_pack_output_folder_with_trailing_slashes(dataset, tmp_path, slashes):
    out = str(tmp_path / "shards") + slashes
    rc, stdout, err = run("pack", dataset, out, "--workers", "1")
    assert rc == 0, err
    pattern = str(tmp_path / "shards") + "/shard-{000000..000000}.tar"
    assert pattern in stdout and "//" not in stdout, stdout
    rc, stdout, err = run("pack", dataset, out, "--workers", "1", "--json")
    assert rc == 0 and json.loads(stdout)["pattern"] == pattern
    rc, stdout, _ = run("bench", pattern, "--batch", "4", "--json")
    assert rc == 0 and json.loads(stdout)["samples"] > 0


# ---- plan: schemas and refused budgets -------------------------------------------------
@pytest.fixture(scope="module")
def arrays_schema(tmp_path_factory):
    d = tmp_path_factory.mktemp("plan_arrays")
    rng = np.random.default_rng(0)
    with open(d / "rows.jsonl", "w") as f:
        for i in range(6):
            np.save(d / f"x{i}.npy", rng.standard_normal((12, 10, 3)).astype(np.float32))
            np.save(d / f"y{i}.npy", rng.integers(0, 9, (5,)).astype(np.int16))
            f.write(json.dumps({"x": f"x{i}.npy", "y": f"y{i}.npy", "t": [0.5, 1.5], "label": i % 2}) + "\n")
    schema = {"x": {"kind": "array", "layout": "HWC", "crop": [8, 8]}, "y": {"kind": "array"},
              "t": {"kind": "target", "length": 2}, "label": {"kind": "label"}}
    (d / "schema.json").write_text(json.dumps(schema))
    return str(d / "rows.jsonl"), str(d / "schema.json"), d


def test_plan_fields_prints_what_applies(arrays_schema):
    rows, schema, d = arrays_schema
    rc, out, err = run("plan", rows, "--fields", schema, "--no-python", "--batch", "2", "--sample", "6")
    assert rc == 0, err
    assert "preset" not in out and "encoded" not in out and "decoded" not in out, out
    assert "schema of 5 outputs, batch 2" in out
    files = sum(os.path.getsize(d / f"{k}{i}.npy") for k in "xy" for i in range(6)) / 6
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("  ")}
    assert lines["x"][1:4] == ["array", "float32", "[8,"] and "3]" in lines["x"]
    assert lines["y"][1:4] == ["array", "int16", "[5]"] and lines["y"][4:] == ["10", "B"]
    assert lines["t"][1:4] == ["target", "float32", "[2]"]
    assert lines["label"][1:4] == ["label", "int64", "[]"]
    assert "index" in lines
    rc, out, _ = run("plan", rows, "--fields", schema, "--no-python", "--batch", "2", "--sample", "6", "--json")
    j = json.loads(out)
    assert "preset" not in j and "encoded_bytes_mean" not in j
    assert j["file_bytes_mean"] == round(files)
    f = {x["name"]: x for x in j["fields"]}
    assert f["x"] == {"name": "x", "kind": "array", "dtype": "float32", "shape": [8, 8, 3], "bytes": 768}
    assert f["y"]["shape"] == [5] and f["y"]["bytes"] == 10
    assert f["label"]["shape"] == [] and j["sample_bytes"] == sum(x["bytes"] for x in j["fields"])


def test_plan_refused_budget_exits_1(dataset, arrays_schema):
    rc, out, err = run("plan", dataset, "--no-python", "--sample", "4", "--budget", "1K")
    assert rc == 1 and "sluice refuses this budget" in out
    assert "sluice plan: exit 1: a loader would refuse --budget 1.0 KiB" in err
    rows, schema, _ = arrays_schema
    rc, out, err = run("plan", rows, "--fields", schema, "--no-python", "--sample", "4", "--budget", "1K", "--json")
    assert rc == 1 and "error" in json.loads(out)["choice"] and "exit 1" in err
    assert run("plan", dataset, "--no-python", "--sample", "4", "--budget", "1G")[0] == 0


@pytest.mark.parametrize("cmd", ["bench", "show", "decode", "plan", "top", "pack"])
def test_every_flag_in_the_usage_is_known(cmd, tmp_path):
    """The lists "did you mean" draws from hold every flag a command's usage
    names: each one alone (no value, no dataset; top's with a word and
    --once after it, so that it stops) is a usage error of another kind or
    a run, never "unknown option"."""
    import re

    rc, out, _ = run(cmd, "--help")
    # the flags of the synopsis ("[--size 224]", "[A | --flag]") and of option lines, not prose
    flags = sorted(set(re.findall(r"(?:\[|\| |^ *)(--[a-z][a-z-]*)", out, re.M)) - {"--help"})
    assert len(flags) >= 5, out
    for flag in flags:
        p = subprocess.run([os.path.abspath(SLUICE), cmd, flag] + (["x", "--once"] if cmd == "top" else []), capture_output=True,
                           text=True, timeout=120, cwd=tmp_path)
        assert "unknown option" not in p.stderr, (flag, p.stderr)
