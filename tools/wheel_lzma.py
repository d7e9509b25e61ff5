#!/usr/bin/env python3
"""Recompress a wheel with LZMA: the same members and RECORD, smaller (pip reads both).

    tools/wheel_lzma.py [--stored] [--drop GLOB]... IN.whl OUT.whl

For the bundles carried to the GPU host (tools/host_deps.sh, tools/host_ray_wheels.sh,
tools/host_gpu_peers.sh), where a call carries 64 MiB at most. --drop leaves out the members
whose path matches GLOB (fnmatch: `*` crosses `/`) and their RECORD lines, so pip installs the
rest as a whole wheel (what the host does not need: other Pythons' extensions, tests).
--stored writes the members uncompressed, for a bundle that is compressed as a whole (xz over
stored members packs far tighter than LZMA member by member). Writes OUT.tmp, then renames it.
"""
import argparse
import fnmatch
import os
import zipfile


def main():
    p = argparse.ArgumentParser(usage=__doc__.split("\n\n")[1].strip())
    p.add_argument("--stored", action="store_true")
    p.add_argument("--drop", action="append", default=[])
    p.add_argument("src")
    p.add_argument("dst")
    a = p.parse_args()
    method = zipfile.ZIP_STORED if a.stored else zipfile.ZIP_LZMA
    dropped = lambda name: any(fnmatch.fnmatch(name, g) for g in a.drop)
    with zipfile.ZipFile(a.src) as zi, zipfile.ZipFile(a.dst + ".tmp", "w", method) as zo:
        for info in zi.infolist():
            if dropped(info.filename):
                continue
            data = zi.read(info)
            if a.drop and info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(l for l in lines if not dropped(l.split(",", 1)[0])).encode()
            zo.writestr(info, data, compress_type=method)
    os.replace(a.dst + ".tmp", a.dst)


if __name__ == "__main__":
    main()
