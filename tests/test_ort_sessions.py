"""ONNX Runtime sessions from this machine's optimized copy of a graph (``as2d_onnxruntime.sessions``).

The copy is a cache of ONNX Runtime's own work, so it must never change a result: the same bits as the graph it
comes from, a new copy when the graph is converted again, the graph as it is where no copy can be written, and
two processes making it at once both running. A small graph with its weights beside it, built here, stands for the
installed ones (``test_whisper_target`` compares whisper-base's own graphs).
"""
from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx builds the test's graph (pip install onnx)")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from as2d_onnxruntime.sessions import (  # noqa: E402
    OPTIMIZED_DIR,
    WEIGHTS_FILE,
    _blocks,
    machine_tag,
    optimized_copy,
    ort_session,
)


def write_graph(folder: Path, seed: int, name: str = "graph.onnx") -> Path:
    """``y = relu(x @ W1) @ W2`` with 64x64 weights (packed by ONNX Runtime's MatMul) in ``graph.onnx.data``."""
    rng = np.random.default_rng(seed)
    weights = [numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), f"w{i}") for i in (1, 2)]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 64])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / name
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=f"{name}.data", size_threshold=0)
    return path


def plain_result(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


X = np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32)


def test_sessions_run_the_optimized_copy_and_compute_the_same_bits(tmp_path):
    path = write_graph(tmp_path, seed=0)
    copy = optimized_copy(path)
    assert copy is not None and copy.is_relative_to(tmp_path / OPTIMIZED_DIR / machine_tag())
    assert copy.with_name(WEIGHTS_FILE).is_file()  # the packed weights beside it
    for threads in (1, 2):
        session, note = ort_session(path, "cpu", threads)
        assert "CPUExecutionProvider" in note
        assert np.array_equal(session.run(None, {"x": X})[0], plain_result(path, X))
    assert optimized_copy(path) == copy  # made once
    assert not list(copy.parent.parent.glob(".making-*"))


def _blocks_read(copy: Path) -> list[tuple[str, int, int]]:
    graph = onnx.load(str(copy), load_external_data=False).graph
    return sorted((tensor.name, *block) for tensor in graph.initializer for block in _blocks(tensor) or [])


def test_graphs_of_a_folder_that_hold_the_same_weights_read_them_from_one_place(tmp_path):
    """The copies of a folder's graphs keep their weights in one file, each distinct block once: two graphs with
    the same weights (whisper's decoder and its beams graph) map the same pages, a third with its own weights
    adds its own blocks, and each computes the bits of the graph it comes from."""
    paths = [write_graph(tmp_path, 0), write_graph(tmp_path, 0, "same.onnx"), write_graph(tmp_path, 1, "other.onnx")]
    copies = [optimized_copy(path) for path in paths]
    assert None not in copies and len({copy.parent for copy in copies}) == 1
    graph, same, other = (_blocks_read(copy) for copy in copies)
    assert len(graph) == 4  # each weight and its packed copy
    assert same == graph and not set(other) & set(graph)
    assert {p.name for p in copies[0].parent.iterdir()} == {"graph.onnx", "same.onnx", "other.onnx", WEIGHTS_FILE}
    for path in paths:
        assert np.array_equal(ort_session(path, "cpu", 1)[0].run(None, {"x": X})[0], plain_result(path, X))


def test_a_graph_onnxruntime_cannot_load_leaves_the_others_their_copies(tmp_path):
    path = write_graph(tmp_path, 0)
    (tmp_path / "broken.onnx").write_bytes(b"not a graph")
    assert optimized_copy(path) is not None and optimized_copy(tmp_path / "broken.onnx") is None
    assert np.array_equal(ort_session(path, "cpu", 1)[0].run(None, {"x": X})[0], plain_result(path, X))


def test_a_graph_converted_again_gets_a_new_copy(tmp_path):
    path = write_graph(tmp_path, seed=0)
    first = optimized_copy(path)
    before = ort_session(path, "cpu", 1)[0].run(None, {"x": X})[0]
    path = write_graph(tmp_path, seed=1)  # other weights, written where the old ones were
    os.utime(path.with_name("graph.onnx.data"), ns=(1, 1))  # even at an unchanged size, another time
    second = optimized_copy(path)
    assert second != first and not first.exists()  # the stale copy is removed
    after = ort_session(path, "cpu", 1)[0].run(None, {"x": X})[0]
    assert np.array_equal(after, plain_result(path, X)) and not np.array_equal(after, before)


def test_copies_in_the_older_layout_and_a_dead_makers_work_are_removed(tmp_path):
    """Before one file held a folder's weights, each graph's copy had a folder of its own (``graph.onnx-ID``); a
    maker that died leaves ``.making-*`` behind: both go when the copies are made, a maker at work now stays."""
    path = write_graph(tmp_path, seed=0)
    home = tmp_path / OPTIMIZED_DIR / machine_tag()
    old_layout, dead, working = home / "graph.onnx-0123456789abcdef", home / ".making-dead", home / ".making-now"
    for folder in (old_layout, dead, working):
        folder.mkdir(parents=True)
    os.utime(dead, (0, 0))
    assert optimized_copy(path) is not None
    assert not old_layout.exists() and not dead.exists() and working.exists()


def test_another_onnxruntimes_copies_are_removed_and_another_processors_kept(tmp_path):
    path = write_graph(tmp_path, seed=0)
    older = tmp_path / OPTIMIZED_DIR / "ort1.0.0-x86_64-0123456789abcdef" / "graph.onnx-0123456789abcdef"
    other_cpu = tmp_path / OPTIMIZED_DIR / f"{machine_tag()[:-16]}fedcba9876543210" / "graph.onnx-0123456789abcdef"
    for folder in (older, other_cpu):
        folder.mkdir(parents=True)
        (folder / "graph.onnx").write_bytes(b"")
    assert optimized_copy(path) is not None
    assert not older.exists() and other_cpu.exists()


def test_a_folder_that_takes_no_copy_runs_the_graph_as_it_is(tmp_path):
    path = write_graph(tmp_path, seed=0)
    (tmp_path / OPTIMIZED_DIR).write_text("not a folder")  # as a read-only folder would, the copy cannot be made
    assert optimized_copy(path) is None
    session, _ = ort_session(path, "cpu", 2)
    assert np.array_equal(session.run(None, {"x": X})[0], plain_result(path, X))


def test_a_copy_onnxruntime_cannot_write_leaves_the_graph_as_it_is(tmp_path, monkeypatch):
    import tempfile

    path = write_graph(tmp_path, seed=0)
    monkeypatch.setattr(tempfile, "mkdtemp", lambda **_: str(tmp_path / "gone" / "work"))  # nowhere to write
    assert optimized_copy(path) is None
    assert np.array_equal(ort_session(path, "cpu", 1)[0].run(None, {"x": X})[0], plain_result(path, X))


def _make_and_run(path: str, queue) -> None:
    copy = optimized_copy(Path(path))
    queue.put((str(copy), ort_session(Path(path), "cpu", 1)[0].run(None, {"x": X})[0]))


def test_two_processes_making_the_copy_at_once_both_run(tmp_path):
    path = write_graph(tmp_path, seed=0)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=_make_and_run, args=(str(path), queue)) for _ in range(2)]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    expected = plain_result(path, X)
    assert len({copy for copy, _ in results}) == 1 and all(np.array_equal(y, expected) for _, y in results)
    home = tmp_path / OPTIMIZED_DIR / machine_tag()
    assert [p.name for p in home.iterdir()] == [Path(results[0][0]).parent.name]  # no half-made copy left
