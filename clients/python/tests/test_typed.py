"""The installed package's types hold under mypy --strict (the wheel ships py.typed)."""

import os
import subprocess
import sys
import tempfile

import fenced_lock


def test_typed_strict():
    assert os.path.exists(os.path.join(os.path.dirname(fenced_lock.__file__), "py.typed"))
    with tempfile.TemporaryDirectory() as cwd:
        result = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                                 "-p", "fenced_lock"], capture_output=True, text=True, cwd=cwd)
    assert result.returncode == 0, result.stdout + result.stderr
