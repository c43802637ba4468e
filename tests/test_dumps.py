"""XLA-style dumps (``TFXLA_FLAGS=--dump_to=DIR``, ``--dump_passes``): file names and contents."""

from __future__ import annotations

import re

import pytest
import tensorflow as tf
from google.protobuf import text_format

import hlo
import tfxla_plugin
from tfxla_plugin.cluster_compiler import source_header

MODULE = re.compile(r"^module_(\d{4})\.(cluster_\d+)\.(.+)$")


def by_module(directory) -> dict[tuple[str, str], dict[str, str]]:
    """(NNNN, cluster) -> {suffix: file name} for every module_* dump file."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    for p in directory.iterdir():
        m = MODULE.match(p.name)
        if m:
            out.setdefault((m.group(1), m.group(2)), {})[m.group(3)] = p.name
    return out


def softmax_mlp(x, w):
    return tf.nn.softmax(tf.nn.relu(tf.matmul(x, w)) * 2.0 + 1.0)


def test_each_module_dumps_xla_named_files_that_match_the_compilation(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TFXLA_FLAGS", f"--dump_to={tmp_path}")
    f = tfxla_plugin.function(softmax_mlp)
    cg = f.compiled_graph(tf.ones([2, 3]), tf.ones([3, 4]))
    modules = by_module(tmp_path)
    assert [cluster for _, cluster in modules] == ["cluster_0"]
    files = next(iter(modules.values()))
    assert set(files) == {"before_optimizations.txt", "after_optimizations.txt", "buffer-assignment.txt", "c",
                          "fusion_decisions.txt"}
    c = cg.clusters[0]
    before = hlo.parse_module((tmp_path / files["before_optimizations.txt"]).read_text())
    after = hlo.parse_module((tmp_path / files["after_optimizations.txt"]).read_text())
    assert before == c.hlo and after == c.optimized
    # the source as compiled, after a header (a comment) that maps the kernel's inputs to HLO parameters
    assert (tmp_path / files["c"]).read_text() == source_header("cluster_0", c.optimized) + c.c_source
    assert "input 1: %w f32[3,4]" in source_header("cluster_0", c.optimized)
    assert (tmp_path / files["buffer-assignment.txt"]).read_text() == c.buffer_assignment
    assert "fused" in (tmp_path / files["fusion_decisions.txt"]).read_text()
    graphs = list(tmp_path.glob("*.clustered_graph.pbtxt"))
    assert len(graphs) == 1
    gd = text_format.Parse(graphs[0].read_text(), tf.compat.v1.GraphDef())
    marked = {n.name for n in gd.node if n.attr["_XlaCluster"].s == b"cluster_0"}
    assert marked == set(cg.analysis.clusters[0].node_names)


def test_dump_passes_writes_each_changed_pass_in_order(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TFXLA_FLAGS", f"--dump_to={tmp_path} --dump_passes")
    f = tfxla_plugin.function(softmax_mlp)
    cg = f.compiled_graph(tf.ones([2, 5]), tf.ones([5, 4]))
    files = next(iter(by_module(tmp_path).values()))
    steps = sorted((k, v) for k, v in files.items() if re.match(r"^\d{4}\.after_", k))
    assert steps, files
    numbers = [int(k[:4]) for k, _ in steps]
    assert numbers == list(range(1, len(steps) + 1))
    passes = [re.match(r"^\d{4}\.after_(.+)\.txt$", k).group(1) for k, _ in steps]
    assert "fusion" in passes
    modules = [hlo.parse_module((tmp_path / name).read_text()) for _, name in steps]
    assert modules[-1] == cg.clusters[0].optimized  # the last pass that changed it gave the final module
    def has_fusion(m) -> bool:
        return any(i.opcode.text == "fusion" for i in m.entry.instructions)

    k = passes.index("fusion")
    assert not any(has_fusion(m) for m in modules[:k]) and has_fusion(modules[k])


def test_without_dump_passes_there_are_no_per_pass_files(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TFXLA_FLAGS", f"--dump_to={tmp_path}")
    f = tfxla_plugin.function(softmax_mlp)
    f(tf.ones([1, 6]), tf.ones([6, 2]))
    assert not [p for p in tmp_path.iterdir() if ".after_" in p.name and "optimizations" not in p.name]


def test_every_module_gets_its_own_number(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TFXLA_FLAGS", f"--dump_to={tmp_path} --min_cluster_size=2")

    def two_clusters(x):
        h = tf.tanh(x * 2.0 + 1.0)
        n = tf.strings.to_number(tf.strings.as_string(h))  # stays in TensorFlow
        return tf.exp(n * 3.0 - 1.0)

    tfxla_plugin.function(two_clusters, jit_compile="auto")(tf.ones([3]))
    modules = by_module(tmp_path)
    assert sorted(cluster for _, cluster in modules) == ["cluster_0", "cluster_1"]
    assert len({number for number, _ in modules}) == 2
    for files in modules.values():
        for suffix in ("before_optimizations.txt", "after_optimizations.txt"):
            hlo.parse_module((tmp_path / files[suffix]).read_text())


def test_dump_dir_that_is_a_file_is_an_error(tmp_path, monkeypatch) -> None:
    target = tmp_path / "not_a_dir"
    target.write_text("x")
    monkeypatch.setenv("TFXLA_FLAGS", f"--dump_to={target}")
    f = tfxla_plugin.function(lambda x: x * 2.0 + 1.0)
    with pytest.raises(OSError, match="not_a_dir"):
        f(tf.ones([2]))
