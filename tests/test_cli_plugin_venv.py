"""A throwaway plugin distribution, installed into a fresh virtual environment, shows up and runs.

The environment is built offline: ``venv --without-pip``, the core's few
dependencies made visible through a ``.pth`` folder of links (nothing else from
the development environment leaks in), and this environment's pip driving the
installs with ``--python``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
import wave
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
DEPENDENCIES = ("click", "pluggy", "attr", "attrs", "numpy", "numpy.libs", "tqdm", "av", "av.libs", "soxr",
                "setuptools", "pkg_resources", "_distutils_hack")

TOY_PYPROJECT = """
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "as2d-toy"
version = "0.0.1"
dependencies = ["as2d"]

[project.entry-points.as2d]
toy = "as2d_toy"

[tool.setuptools]
py-modules = ["as2d_toy"]
"""

TOY_PLUGIN = '''
"""A toy target and drafter: the target's greedy answer is fixed, the drafter knows it."""
from as2d_core.contracts import DraftPiece
from as2d_core.setup.hookspecs import hookimpl

ANSWER = [5, 6, 7, 8, 9, 10, 11]
EOS = 0


class Session:
    eos_token = EOS
    max_new_tokens = 32

    def __init__(self, language):
        self.language = language or "en"
        self.cache_length = 0

    def first_token(self):
        return ANSWER[0]

    def _next(self, position):
        return ANSWER[position + 1] if position + 1 < len(ANSWER) else EOS

    def verify(self, root, candidates):
        start = self.cache_length
        self.cache_length += 1 + len(candidates)
        return [self._next(start + i) for i in range(len(candidates) + 1)]

    def truncate(self, cache_length):
        self.cache_length = cache_length

    def use_threads(self, threads):
        pass

    def decode_text(self, tokens):
        return " ".join(str(t) for t in tokens)

    def encode_text(self, text):
        return [int(t) for t in text.split()]

    def close(self):
        pass


class Target:
    name = "toy-target"
    vocabulary = "toy"
    device_in_use = ["cpu"]

    def prepare(self, request, threads):
        return Session(request.language)


class Job:
    ended_with_eos = True

    def pieces(self):
        for token in ANSWER + [EOS]:
            yield DraftPiece((token,))

    def close(self):
        pass


class Source:
    name = "toy-drafter"
    vocabulary = "toy"
    languages = None
    eos_token = EOS

    def decode_text(self, tokens):
        return " ".join(str(t) for t in tokens)

    def prepare(self, request, language, threads):
        return Job()


@hookimpl
def register_targets(register):
    register("toy-target", lambda options: Target(), tasks=("asr",), vocabulary="toy", description="toy target")


@hookimpl
def register_sources(register):
    register("toy-drafter", lambda options: Source(), tasks=("asr",), vocabulary="toy", description="toy drafter")
    register("toy-ids", lambda options: Source(), tasks=("asr",), vocabulary="toy-ids", decodes_text=False,
             description="a drafter whose ids cannot become text")
'''

TOY_CONFIG = """
task = "asr"
language = "en"
budget = 3

[target]
model = "toy-target"

[source]
name = "toy-drafter"
publication_size = 2
"""


def _write_wav(path: Path) -> None:
    samples = (np.sin(np.arange(8000) / 10.0) * 3000).astype(np.int16)
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(16000)
        f.writeframes(samples.tobytes())


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("venv")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    here = Path(sysconfig.get_paths()["purelib"])
    deps = root / "deps"
    deps.mkdir()
    for name in DEPENDENCIES:  # from whichever site folder this environment has it in
        found = next((Path(p) / name for p in [here, *sys.path] if p and (Path(p) / name).exists()), None)
        if found is not None:
            (deps / name).symlink_to(found)
    for info in here.glob("setuptools-*.dist-info"):
        (deps / info.name).symlink_to(info)
    (site / "deps.pth").write_text(f"{deps}\n")
    if (here / "distutils-precedence.pth").exists():  # so setuptools, not the stdlib distutils, builds
        (site / "distutils-precedence.pth").write_text((here / "distutils-precedence.pth").read_text())
    env = {**os.environ, "AS2D_MODELS_DIR": str(root / "models")}
    env.pop("AS2D_PLUGINS", None)
    env.pop("VIRTUAL_ENV", None)

    def pip(*args):
        subprocess.run([sys.executable, "-m", "pip", "--python", str(python), *args, "--no-deps",
                        "--no-build-isolation", "--no-index", "-q"], check=True, env=env, cwd=root)

    def as2d(*args):
        return subprocess.run([str(venv / "bin" / "as2d"), *args], capture_output=True, text=True, env=env, cwd=root)

    pip("install", "-e", str(REPO))
    toy = root / "as2d-toy"
    toy.mkdir()
    (toy / "pyproject.toml").write_text(textwrap.dedent(TOY_PYPROJECT))
    (toy / "as2d_toy.py").write_text(TOY_PLUGIN)
    return {"root": root, "pip": pip, "as2d": as2d, "toy": toy}


def _names(result) -> set[str]:
    assert result.returncode == 0, result.stderr
    return {row["name"] for row in json.loads(result.stdout)}


def test_installing_and_uninstalling_a_plugin_changes_the_listings(fresh_venv):
    as2d, pip = fresh_venv["as2d"], fresh_venv["pip"]
    assert "toy-drafter" not in _names(as2d("sources", "list", "--json"))
    assert "whisper-tiny.en" in _names(as2d("sources", "list", "--json"))  # catalog, not installed here

    pip("install", str(fresh_venv["toy"]))
    result = as2d("sources", "list", "--json")
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    toy = rows["toy-drafter"]
    assert toy["kind"] == "source" and toy["plugin"] == "toy" and toy["installed"] and toy["available"]
    assert toy["reason"] is None
    whisper = rows["whisper-tiny.en"]
    assert not whisper["installed"] and "pip install ./plugins/whisper" in whisper["reason"]
    plugins = {row["name"]: row for row in json.loads(as2d("plugins", "list", "--json").stdout)}
    assert plugins["toy"]["distribution"] == "as2d-toy" and "source:toy-drafter" in plugins["toy"]["parts"]

    config = fresh_venv["root"] / "toy.toml"
    config.write_text(TOY_CONFIG)
    check = as2d("config", "check", "--here", str(config))
    assert check.returncode == 0, check.stdout + check.stderr
    audio = fresh_venv["root"] / "a.wav"
    _write_wav(audio)
    run = as2d("run", str(audio), "--config", str(config), "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["tokens"] == [5, 6, 7, 8, 9, 10, 11] and out["source"] == "toy-drafter" and out["budget"] == 3

    bad = fresh_venv["root"] / "bad.toml"
    bad.write_text(TOY_CONFIG.replace('"toy-drafter"', '"toy-ids"'))
    check = as2d("config", "check", str(bad))
    assert check.returncode != 0
    assert "different tokenizers and no installed bridge connects them" in check.stdout

    pip_uninstall = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(fresh_venv["root"] / "venv" / "bin" / "python"),
         "uninstall", "-y", "-q", "as2d-toy"], capture_output=True, text=True)
    assert pip_uninstall.returncode == 0, pip_uninstall.stderr
    assert "toy-drafter" not in _names(as2d("sources", "list", "--json"))
    check = as2d("config", "check", str(config))
    assert check.returncode != 0 and "unknown target 'toy-target'" in check.stdout
