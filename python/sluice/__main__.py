"""The sluice command: `python -m sluice ARGS`, and the `sluice` console
script of an installed package. Both run the command-line tool shipped in
the package (sluice/bin/sluice: built by `pip install .`, or copied there by
`make` in the source tree), replacing this Python process with it, so exit
codes, signals (Ctrl-C in `sluice top`) and output are the tool's own."""
import os
import sys


def cli_path():
    """Path of the sluice executable of this package."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "sluice")


def main(argv=None):
    """Exec the CLI with argv (default: this process's arguments). Returns 2
    only when the executable is missing; otherwise never returns."""
    exe = cli_path()
    if not os.access(exe, os.X_OK):
        sys.stderr.write(f"sluice: the command-line tool is not in this installation ({exe}); "
                         "reinstall the package (pip install .), or run `make` in the source tree\n")
        return 2
    args = sys.argv[1:] if argv is None else list(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, ["sluice", *args])


if __name__ == "__main__":
    sys.exit(main())
