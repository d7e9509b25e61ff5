"""tools/include_graph.py check, the measure behind ctest layers.no_circle,
on a small tree of its own: it fails on a header that declares the
functions of several modules (io/io.h before its split) and on a circle,
and passes once each module has its own header and the uses run one way."""
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tree(tmp_path, files):
    """A copy of the tool over src/<files> (it reads the tree beside it)."""
    os.makedirs(tmp_path / "tools")
    os.makedirs(tmp_path / "include")
    shutil.copy(os.path.join(ROOT, "tools", "include_graph.py"), tmp_path / "tools")
    for name, text in files.items():
        p = tmp_path / "src" / name
        os.makedirs(p.parent, exist_ok=True)
        p.write_text(text)
    return tmp_path


def check(root, folder):
    r = subprocess.run([sys.executable, str(root / "tools" / "include_graph.py"), "check", folder],
                       capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout


def test_shared_header_fails_and_one_header_a_module_passes(tmp_path):
    shared = tree(tmp_path / "shared", {
        "io/io.h": "int sl__url_scheme(const char *p);\nint sl__obj_stat(const char *n);\n",
        "io/url.c": '#include "io/io.h"\nint sl__url_scheme(const char *p) { return p[0]; }\n',
        "io/object.c": '#include "io/io.h"\nint sl__obj_stat(const char *n) { return sl__url_scheme(n); }\n',
    })
    rc, out = check(shared, "io")
    assert rc == 1, out
    assert "SHARED HEADER io.h declares functions of 2 modules: object(1), url(1)" in out, out

    split = tree(tmp_path / "split", {
        "io/url.h": "int sl__url_scheme(const char *p);\n",
        "io/object.h": "int sl__obj_stat(const char *n);\n",
        "io/url.c": '#include "io/url.h"\nint sl__url_scheme(const char *p) { return p[0]; }\n',
        "io/object.c": ('#include "io/object.h"\n#include "io/url.h"\n'
                        "int sl__obj_stat(const char *n) { return sl__url_scheme(n); }\n"),
    })
    rc, out = check(split, "io")
    assert rc == 0, out
    assert "object:     url" in out and "no circle among the modules of src/io" in out, out


def test_circle_fails(tmp_path):
    root = tree(tmp_path, {
        "io/url.h": "int sl__url_scheme(const char *p);\n",
        "io/object.h": "int sl__obj_stat(const char *n);\n",
        "io/url.c": ('#include "io/object.h"\n#include "io/url.h"\n'
                     "int sl__url_scheme(const char *p) { return p[0] ? sl__obj_stat(p + 1) : 0; }\n"),
        "io/object.c": ('#include "io/object.h"\n#include "io/url.h"\n'
                        "int sl__obj_stat(const char *n) { return sl__url_scheme(n); }\n"),
    })
    rc, out = check(root, "io")
    assert rc == 1, out
    assert "CIRCLE (2 modules): object url" in out, out
