"""Native libraries' stdout chatter stays off commands that promise JSON."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from as2d_core.workers.native import native_stdout_to_stderr


def test_fd1_writes_go_to_stderr_inside_the_block():
    code = (
        "import os\n"
        "from as2d_core.workers.native import native_stdout_to_stderr\n"
        "with native_stdout_to_stderr():\n"
        "    os.write(1, b'banner from C\\n')\n"
        "print('{\"ok\": true}')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"ok": True}
    assert "banner from C" in done.stderr


def test_backends_list_json_is_only_json():
    done = subprocess.run([sys.executable, "-m", "as2d_core.cli.main", "backends", "list", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert {row["name"] for row in json.loads(done.stdout)} >= {"onnxruntime"}


def test_nested_redirections_restore_stdout():
    before = os.fstat(1)
    with native_stdout_to_stderr():
        with native_stdout_to_stderr():
            pass
    after = os.fstat(1)
    assert (before.st_dev, before.st_ino) == (after.st_dev, after.st_ino)
