"""Every Python snippet of docs/python.md runs as it stands (one process, the embedded model)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT


@pytest.mark.heavy  # a fresh process loading the model twice and decoding every example: minutes under make test's workers
def test_python_doc_snippets_run(tmp_path):
    text = (ROOT / "docs" / "python.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 4
    script = tmp_path / "snippets.py"
    script.write_text("\n".join(f"exec(compile({b!r}, 'snippet {i}', 'exec'), {{}})" for i, b in enumerate(blocks)))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "True" in done.stdout and "prefilled" in done.stdout
