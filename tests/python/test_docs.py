"""The README's Python snippet runs as written (DATA: a small dataset; CPU
tensors where there is no CUDA; a few batches instead of 90 epochs)."""
import os
import re
import warnings

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_readme_python_snippet_runs(dataset):
    pytest.importorskip("torch")
    with open(os.path.join(ROOT, "README.md")) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert blocks, "README.md has no Python snippet"
    code = blocks[0].replace('"DATA"', repr(dataset)).replace("epochs = 90", "epochs = 2")
    code = code.replace('budget="4G"', 'budget="256M"').replace("batch_size=256", "batch_size=16")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no CUDA here: CPU tensors, with a warning
        scope = {}
        exec(compile(code, "README.md", "exec"), scope)
    assert scope["state"]["epoch"] == 2
    scope["loader"].close()
