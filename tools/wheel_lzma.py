#!/usr/bin/env python3
"""Recompress a wheel with LZMA: the same members and RECORD, smaller (pip reads both).

    tools/wheel_lzma.py IN.whl OUT.whl

For the bundles carried to the GPU host (tools/host_deps.sh, tools/host_ray_wheels.sh), where a
call carries 64 MiB at most. Writes OUT.tmp, then renames it to OUT.
"""
import os
import sys
import zipfile


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    with zipfile.ZipFile(src) as zi, zipfile.ZipFile(dst + ".tmp", "w", zipfile.ZIP_LZMA) as zo:
        for info in zi.infolist():
            zo.writestr(info, zi.read(info), compress_type=zipfile.ZIP_LZMA)
    os.replace(dst + ".tmp", dst)


if __name__ == "__main__":
    main()
