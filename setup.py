"""Build the sluice Python package the ordinary way: `pip install .`

The extension sluice._sluice is compiled from every C file of the library
(src/**/*.c) plus python/sluice/_sluice.c and _budget.c, so the wheel needs no separate
libsluice. libjpeg(-turbo) is required; libspng is used when found (then PNG
support is built in, SL_HAVE_SPNG=1). Both are looked up with pkg-config,
then in the usual folders (and JPEG_ROOT / SPNG_ROOT, unpacked packages).
Offline: `pip install --no-build-isolation .` (uses the installed setuptools).
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def _pkg_config(name):
    """(include_dirs, library_dirs, libraries) from pkg-config, or None."""
    if not shutil.which("pkg-config"):
        return None
    try:
        out = subprocess.run(["pkg-config", "--cflags", "--libs", name], check=True,
                             capture_output=True, text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return None
    inc = [a[2:] for a in out if a.startswith("-I")]
    libdirs = [a[2:] for a in out if a.startswith("-L")]
    libs = [a[2:] for a in out if a.startswith("-l")]
    return inc, libdirs, libs


def _search(header, lib, root_env):
    """Find header and lib<lib>.so/.a under root_env or the usual prefixes."""
    roots = []
    if os.environ.get(root_env):
        r = os.environ[root_env]
        roots += [os.path.join(r, "usr"), r]
    roots += [sys.prefix, "/usr/local", "/usr", "/opt/homebrew"]
    multiarch = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"
    for root in roots:
        inc = os.path.join(root, "include")
        if not os.path.exists(os.path.join(inc, header)):
            continue
        for libdir in (os.path.join(root, "lib", multiarch), os.path.join(root, "lib64"),
                       os.path.join(root, "lib")):
            if glob.glob(os.path.join(libdir, f"lib{lib}.so*")) or \
               os.path.exists(os.path.join(libdir, f"lib{lib}.a")):
                return [inc], [libdir], [lib]
    return None


def _find(pc_names, header, lib, root_env):
    if not os.environ.get(root_env):
        for n in pc_names:
            found = _pkg_config(n)
            if found:
                return found
    return _search(header, lib, root_env)


def _version():
    with open(os.path.join(HERE, "include", "sluice.h")) as f:
        m = re.search(r'#define SL_VERSION_STRING "([^"]+)"', f.read())
    return m.group(1) if m else "0.0.0"


def _extension():
    jpeg = _find(["libjpeg", "libturbojpeg"], "jpeglib.h", "jpeg", "JPEG_ROOT")
    if jpeg is None:
        sys.exit("sluice: libjpeg headers (jpeglib.h) and library not found. Install "
                 "libjpeg-turbo's development package (Debian: libjpeg62-turbo-dev, Fedora: "
                 "libjpeg-turbo-devel, conda: libjpeg-turbo) or set JPEG_ROOT.")
    if jpeg[2] == ["turbojpeg"]:  # the TurboJPEG API package: the libjpeg API lives beside it
        jpeg = (jpeg[0], jpeg[1], ["jpeg"])
    spng = _find(["spng"], "spng.h", "spng", "SPNG_ROOT")
    include_dirs = ["include", "src"] + jpeg[0]
    library_dirs = list(jpeg[1])
    libraries = list(jpeg[2])
    macros = [("_GNU_SOURCE", "1")]  # as CMake: CPU_COUNT, pthread_setname_np, ...
    if spng:
        include_dirs += spng[0]
        library_dirs += spng[1]
        libraries += spng[2]
        macros.append(("SL_HAVE_SPNG", "1"))
        print("sluice: PNG support through libspng", file=sys.stderr)
    else:
        print("sluice: libspng not found: PNG samples will be error records", file=sys.stderr)
    libraries += ["pthread", "m", "dl"]
    sources = sorted(glob.glob("src/**/*.c", recursive=True)) + ["python/sluice/_sluice.c", "python/sluice/_budget.c"]
    return Extension(
        "sluice._sluice",
        sources=sources,
        include_dirs=include_dirs,
        library_dirs=library_dirs,
        runtime_library_dirs=[d for d in library_dirs if not d.startswith("/usr/lib")],
        libraries=libraries,
        define_macros=macros,
        extra_compile_args=["-std=gnu11", "-O2", "-fvisibility=hidden", "-Wno-unused-parameter"],
    )


os.chdir(HERE)  # source paths are relative to the project root
setup(
    name="sluice",
    version=_version(),
    description="A budgeted, deterministic data loader for deep-learning training",
    long_description=open("docs/python.md").read() if os.path.exists("docs/python.md") else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.8",
    package_dir={"": "python"},
    packages=["sluice"],
    ext_modules=[_extension()],
    install_requires=["numpy"],
    extras_require={"torch": ["torch"]},
    # keep setuptools' intermediate files out of CMake's build/ folder
    options={"build": {"build_base": "build-py"}},
    zip_safe=False,
)
