"""Build the sluice Python package the ordinary way: `pip install .`

The package metadata is in pyproject.toml; this file builds the two
compiled parts:
  * the extension sluice._sluice, compiled from every C file of the library
    (src/**/*.c) plus python/sluice/_sluice.c and _budget.c, so the wheel needs no separate
    libsluice;
  * the command-line tool, linked from the same library objects plus
    cli/**/*.c into sluice/bin/sluice inside the package. The `sluice`
    console script and `python -m sluice` exec it (sluice/__main__.py), so
    the installed command is the very program `make` builds as build/sluice.
libjpeg(-turbo) is required; libspng is used when found (then PNG support is
built in, SL_HAVE_SPNG=1), FFmpeg, libwebp and libcurl (s3:// and http(s)://
sources) likewise. Both are looked up with pkg-config, then in the
usual folders (and JPEG_ROOT / SPNG_ROOT, unpacked packages).
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
from setuptools.command.build_ext import build_ext

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
    jansson = _find(["jansson"], "jansson.h", "jansson", "JANSSON_ROOT")
    if jansson is None:
        sys.exit("sluice: jansson (JSON, for schemas and manifests) not found. Install its "
                 "development package (Debian/Ubuntu: libjansson-dev, Fedora: jansson-devel, "
                 "conda: jansson) or set JANSSON_ROOT.")
    include_dirs = ["include", "src"] + jpeg[0] + jansson[0]
    library_dirs = list(jpeg[1]) + jansson[1]
    libraries = list(jpeg[2]) + jansson[2]
    macros = [("_GNU_SOURCE", "1")]  # as CMake: CPU_COUNT, pthread_setname_np, ...
    # the optional libraries: each found one adds its paths and macro, and says so
    ffmpeg = [_pkg_config(n) for n in ("libavformat", "libavcodec", "libswscale", "libavutil")]
    webp = _find(["libwebp"], "webp/decode.h", "webp", "WEBP_ROOT")
    curl = _pkg_config("libcurl")
    optional = [
        ([spng] if spng else None, "SL_HAVE_SPNG", "PNG support through libspng",
         "libspng not found: PNG samples will be error records"),
        (ffmpeg if all(ffmpeg) else None, "SL_HAVE_FFMPEG", "video clips through FFmpeg's libraries",
         "FFmpeg's libraries not found (pkg-config): video samples will be error records"),
        ([webp] if webp else None, "SL_HAVE_WEBP",
         "WebP support through libwebp", "libwebp not found: WebP samples will be error records"),
        ([curl] if curl else None, "SL_HAVE_CURL",
         "s3:// and http(s):// sources through libcurl",
         "libcurl not found (pkg-config): s3:// and http(s):// sources will be refused"),
    ]
    for found, macro, yes, no in optional:
        if not found:
            print("sluice: " + no, file=sys.stderr)
            continue
        for inc, libdirs, libs in found:
            include_dirs += inc
            library_dirs += libdirs
            libraries += libs
        macros.append((macro, "1"))
        print("sluice: " + yes, file=sys.stderr)
    libraries += ["pthread", "m", "dl"]
    # the library without src/monitor/ (sluice top's readers live in the CLI)
    sources = sorted(f for f in glob.glob("src/**/*.c", recursive=True)
                     if not f.startswith(os.path.join("src", "monitor")))
    ext = dict(
        include_dirs=include_dirs,
        library_dirs=library_dirs,
        runtime_library_dirs=[d for d in library_dirs if not d.startswith("/usr/lib")],
        libraries=libraries,
        define_macros=macros,
        extra_compile_args=["-std=gnu11", "-O2", "-fvisibility=hidden", "-Wno-unused-parameter"],
    )
    # sluice._gpu (the GPU decode engine; CUDA is loaded at run time, never linked)
    return [Extension("sluice._sluice", sources=sources + ["python/sluice/_sluice.c", "python/sluice/_budget.c"], **ext),
            Extension("sluice._gpu", sources=sources + ["python/sluice/_gpu.c"], **ext)]


class build_ext_and_cli(build_ext):
    """build_ext, then link the CLI from the library objects of sluice._sluice
    and the CLI's own sources (cli/, and src/monitor/: `sluice top` and
    `plan` read /proc, cgroups and NVML through it; the library does not)."""

    def build_extension(self, ext):
        super().build_extension(ext)
        if ext.name != "sluice._sluice":
            return
        library = [src for src in ext.sources if src.startswith("src" + os.sep) or src.startswith("src/")]
        lib_objects = self.compiler.object_filenames(library, output_dir=self.build_temp)
        # as CMake: the monitor sees src/, the CLI only the public headers
        # (include/ and the monitor's one, src/monitor/include/)
        monitor_include = os.path.join("src", "monitor", "include")
        cli_objects = []
        for sources, include_dirs in (
                (sorted(glob.glob("src/monitor/*.c")), ext.include_dirs + [monitor_include]),
                (sorted(glob.glob("cli/**/*.c", recursive=True)),
                 [d for d in ext.include_dirs if d != "src"] + ["cli", monitor_include])):
            cli_objects += self.compiler.compile(
                sources, output_dir=self.build_temp, macros=ext.define_macros, include_dirs=include_dirs,
                extra_postargs=ext.extra_compile_args, depends=ext.depends)
        bin_dir = os.path.join(os.path.dirname(self.get_ext_fullpath(ext.name)), "bin")
        self.compiler.link_executable(
            cli_objects + lib_objects, "sluice", output_dir=bin_dir, libraries=ext.libraries,
            library_dirs=ext.library_dirs, runtime_library_dirs=ext.runtime_library_dirs)


os.chdir(HERE)  # source paths are relative to the project root
setup(
    version=_version(),  # from include/sluice.h; the rest of the metadata: pyproject.toml
    ext_modules=_extension(),
    cmdclass={"build_ext": build_ext_and_cli},
    # keep setuptools' intermediate files out of CMake's build/ folder
    options={"build": {"build_base": "build-py"}},
)
