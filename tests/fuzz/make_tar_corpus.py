#!/usr/bin/env python3
"""Write the seed corpus of the tar fuzzer (tests/fuzz/corpus/tar/).

Small WebDataset-like shards in every header dialect the scanner reads:
ustar, pax (long and non-ASCII names, a pax size record, a global header),
GNU (long names 'L', long link names 'K', base-256 sizes), v7 (no magic),
with directories, symlinks and hard links mixed in; made with Python's
tarfile, with GNU tar's CLI where it is installed, and by hand for what
neither writes (base-256, a pax size, v7). Plus a few hostile ones (bad
checksum, truncated member, '..' names, a sparse member).

Every regular member's data starts with its normalised name and a newline
("000001.jpg\\n", then dots): tests/c/test_tar.c checks each reported
offset by reading it back, and compares the listing with tarfile's.
Deterministic (fixed mtimes, owners), every file under 16 KiB.

    python3 tests/fuzz/make_tar_corpus.py [OUT_DIR]
"""
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

MTIME = 1_700_000_000


def body(name, extra):
    return (name + "\n").encode() + b"." * extra


def add(tf, name, extra=7, stored=None):
    """Regular member `stored` (the name in the archive) whose data names `name`."""
    data = body(name, extra)
    ti = tarfile.TarInfo(stored or name)
    ti.size, ti.mtime, ti.mode, ti.uname, ti.gname = len(data), MTIME, 0o644, "u", "g"
    tf.addfile(ti, io.BytesIO(data))


def special(tf, name, kind, target=""):
    ti = tarfile.TarInfo(name)
    ti.type, ti.mtime, ti.linkname = kind, MTIME, target
    ti.mode = 0o755 if kind == tarfile.DIRTYPE else 0o777
    tf.addfile(ti)


def shard(fmt, samples, **kw):
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=fmt, **kw) as tf:
        for k, keys in samples:
            for key in keys:
                add(tf, f"{k}.{key}", extra=len(k) % 5 * 3)
    return b.getvalue()


# ---- hand-made headers --------------------------------------------------

def header(name, size, type_=b"0", magic=b"ustar\x0000", size_field=None, prefix=b""):
    h = bytearray(512)
    h[0:len(name)] = name
    h[100:108] = b"0000644\x00"
    h[108:116] = b"0000000\x00"
    h[116:124] = b"0000000\x00"
    h[124:136] = size_field if size_field is not None else b"%011o\x00" % size
    h[136:148] = b"%011o\x00" % MTIME
    h[156:157] = type_
    h[257:265] = magic
    if prefix:
        h[345:345 + len(prefix)] = prefix
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\x00 " % sum(h)
    return bytes(h)


def pad(b):
    return b + b"\x00" * (-len(b) % 512)


def member(name, data, **kw):
    return header(name, len(data), **kw) + pad(data)


def pax(records, type_=b"x"):
    payload = b""
    for k, v in records:
        rec = b" %s=%s\n" % (k, v)
        n = len(rec) + 1
        while len(str(n)) + len(rec) != n:
            n += 1
        payload += str(n).encode() + rec
    return member(b"././@PaxHeader", payload, type_=type_)


END = b"\x00" * 1024


def base256(n):
    return bytes([0x80]) + n.to_bytes(11, "big")


def hand_made():
    out = {}
    n1, n2 = "000010.jpg", "000010.cls"
    out["base256_size.tar"] = (header(n1.encode(), 0, size_field=base256(len(body(n1, 5)))) + pad(body(n1, 5))
                               + member(n2.encode(), body(n2, 1)) + END)
    # a pax size record overriding a wrong header size
    n = "000011.npy"
    out["pax_size.tar"] = pax([(b"size", str(len(body(n, 40))).encode())]) + \
        header(n.encode(), 3) + pad(body(n, 40)) + END
    # v7: no magic; ustar prefix field
    n = "000012.txt"
    out["v7.tar"] = member(n.encode(), body(n, 2), magic=b"\x00" * 8) + END
    n = "deep/dir/000013.jpg"
    out["ustar_prefix.tar"] = member(b"000013.jpg", body(n, 4), prefix=b"deep/dir") + END
    # names to normalise, no end blocks (EOF on a block boundary)
    n = "a/b/000014.jpg"
    out["normalise_no_end.tar"] = member(b"./a//b/./000014.jpg", body(n, 0))
    # hostile
    out["bad_checksum.tar"] = bytearray(member(b"000015.jpg", body("000015.jpg", 1)) + END)
    out["bad_checksum.tar"][150] ^= 1
    out["bad_checksum.tar"] = bytes(out["bad_checksum.tar"])
    out["truncated_member.tar"] = (member(b"000016.jpg", body("000016.jpg", 1)) +
                                   header(b"000016.cls", 5000) + b"short")
    out["dotdot.tar"] = member(b"../000017.jpg", body("000017.jpg", 1)) + END
    out["absolute.tar"] = member(b"/etc/000018.jpg", body("000018.jpg", 1)) + END
    out["sparse.tar"] = member(b"000019.bin", b"x" * 10, type_=b"S") + END
    out["pax_sparse.tar"] = pax([(b"GNU.sparse.major", b"1"), (b"GNU.sparse.minor", b"0")]) + \
        member(b"000020.bin", b"y") + END
    out["negative_size.tar"] = header(b"000021.jpg", 0, size_field=b"\xff" * 12) + END
    out["pax_nul_path.tar"] = pax([(b"path", b"000022\x00.jpg")]) + member(b"x.jpg", b"x") + END
    out["huge_size.tar"] = header(b"000023.jpg", 0o77777777777) + END
    return out


def tar_cli(fmt, tmp):
    """The same tree through GNU tar (None where tar is missing)."""
    tar = shutil.which("tar")
    if not tar:
        return None
    root = os.path.join(tmp, fmt)
    long_dir = "d" * 60 + "/" + "e" * 60
    names = ["000030.jpg", "000030.cls", f"{long_dir}/000031.jpg", f"{long_dir}/000031.seg.png",
             "f" * 110 + ".jpg"]  # a file part over 100 bytes: 'L' (gnu) or a pax path (posix)
    for n in names:
        p = os.path.join(root, n)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(body(n, 3))
        os.utime(p, (MTIME, MTIME))
    os.symlink("000030.jpg", os.path.join(root, "000032.lnk"))
    out = os.path.join(tmp, fmt + ".tar")
    # --sort=name, fixed owner and times: the same bytes on every run
    pax_opt = ["--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime"] if fmt == "posix" else []
    subprocess.run([tar, f"--format={fmt}", "--sort=name", "--owner=0", "--group=0", "--numeric-owner",
                    f"--mtime=@{MTIME}"] + pax_opt + ["-cf", out, "-C", root] + names + ["000032.lnk"], check=True)
    with open(out, "rb") as f:
        data = f.read()
    return data.rstrip(b"\x00") and pad(data.rstrip(b"\x00")) + END  # drop the 10 KiB record padding


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus", "tar")
    os.makedirs(out, exist_ok=True)
    seeds = {}
    samples = [(f"{i:06d}", ["jpg", "cls"]) for i in range(3)] + [("000003", ["blur.npy", "sharp.npy", "JSON"])]
    seeds["ustar.tar"] = shard(tarfile.USTAR_FORMAT, samples)
    seeds["gnu.tar"] = shard(tarfile.GNU_FORMAT, samples)
    seeds["pax.tar"] = shard(tarfile.PAX_FORMAT, samples)
    long = "x" * 120
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=tarfile.GNU_FORMAT) as tf:
        special(tf, "shard", tarfile.DIRTYPE)
        add(tf, f"shard/{long}.jpg")                        # GNU 'L'
        special(tf, f"shard/{long}.lnk", tarfile.SYMTYPE, "t" * 150)  # 'L' and 'K'
        special(tf, "shard/hard.jpg", tarfile.LNKTYPE, f"shard/{long}.jpg")
        add(tf, "shard/000100.cls")
    seeds["gnu_long.tar"] = b.getvalue()
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=tarfile.PAX_FORMAT,
                      pax_headers={"comment": "global header"}) as tf:
        add(tf, f"{long}/000200.jpg")
        add(tf, "caf\u00e9/000201.jpg")                     # non-ASCII: a pax path
        add(tf, "000202")                                   # no key: skipped by grouping
        add(tf, "._000203.jpg")                             # no prefix: skipped
    seeds["pax_long_global.tar"] = b.getvalue()
    seeds.update(hand_made())
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in ("gnu", "posix"):
            d = tar_cli(fmt, tmp)
            if d:
                seeds[f"cli_{fmt}.tar"] = d
    for name, data in sorted(seeds.items()):
        assert len(data) < 16384, (name, len(data))
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"{len(seeds)} seeds in {out}")


if __name__ == "__main__":
    main()
