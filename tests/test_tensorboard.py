"""TensorBoard export: runs written by ``tfxla_plugin.tensorboard.write``, read back with TensorBoard's reader."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import hlo
import tfxla_plugin
import tfxla_plugin.tensorboard as tb
from tfxla_plugin.tensorboard.graphs import ATTR_LIMIT, shorten_attrs, truncate

W = np.linspace(-1.0, 1.0, 8 * 64, dtype=np.float32).reshape(8, 64)  # a 2 KiB constant: its attr must shrink


def two_clusters(x):
    """Two clusters split by string ops that stay in TensorFlow."""
    h = tf.tanh(tf.matmul(x, tf.constant(W)) + 0.5) * 2.0
    s = tf.strings.as_string(h)
    n = tf.strings.to_number(s)
    return tf.reduce_sum(tf.exp(n * 3.0 - 1.0), axis=1), s


def read_run(path: str):
    """(GraphDef or None, {tag: text}) of one run directory, through TensorBoard's event reader."""
    acc = EventAccumulator(path, size_guidance={"tensors": 0})
    acc.Reload()
    graph = acc.Graph() if acc.Tags()["graph"] else None
    texts = {tag: acc.Tensors(tag)[-1].tensor_proto.string_val[0].decode() for tag in acc.Tags()["tensors"]}
    return graph, texts


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    f = tfxla_plugin.function(two_clusters, jit_compile="auto")
    x = tf.constant(np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32))
    logdir = tmp_path_factory.mktemp("tb")
    result = tb.write(f, x, logdir=logdir)
    runs = {name: read_run(path) for name, path in result.runs.items()}
    return f.compiled_graph(x), result, runs


def test_one_run_per_graph_named_after_the_function_and_clusters(written) -> None:
    cg, result, runs = written
    assert [c.name for c in cg.clusters] == ["cluster_0", "cluster_1"]
    assert set(result.runs) == {"two_clusters/original", "two_clusters/rewritten",
                                "two_clusters/hlo/cluster_0", "two_clusters/hlo/cluster_1"}
    assert all(graph is not None for graph, _ in runs.values())


def test_original_graph_carries_the_clusters_and_the_reasons(written) -> None:
    cg, _, runs = written
    graph, texts = runs["two_clusters/original"]
    analysis = cg.analysis
    assert [n.name for n in graph.node] == [n.name for n in analysis.graph_def.node]
    marked = {n.name: n.attr["_XlaCluster"].s.decode() for n in graph.node if "_XlaCluster" in n.attr}
    expected = {node: spec.name for spec in analysis.clusters for node in spec.node_names}
    assert marked == expected
    reasons = {n.name: n.attr["tfxla_left_out"].s.decode() for n in graph.node if "tfxla_left_out" in n.attr}
    assert reasons == analysis.excluded
    assert "string tensors stay in TensorFlow" in reasons["AsString"]
    assert "cluster_0" in texts["clustering"] and "| AsString | AsString |" in texts["clustering"]
    assert texts["explanation"].startswith("```") and "Clustering summary: 2 cluster(s)" in texts["explanation"]


def test_rewritten_graph_has_launch_nodes_with_short_attrs(written) -> None:
    cg, _, runs = written
    graph, _ = runs["two_clusters/rewritten"]
    assert len(graph.node) == len(cg.rewritten.graph_def.node)
    launches = {n.attr["cluster"].s.decode(): n for n in graph.node if n.op == "TfxlaLaunch"}
    assert set(launches) == {"cluster_0", "cluster_1"}
    specs = {s.name: s for s in cg.analysis.clusters}
    for c in cg.clusters:
        attrs = launches[c.name].attr
        assert "cluster_graph" not in attrs and "cluster_io" not in attrs
        assert attrs["kernel_hash"].s.decode() == c.kernel_hash
        assert attrs["op_count"].i == len(specs[c.name].node_names)
        assert attrs["hlo_op_count"].i == sum(1 for _ in c.optimized.instructions())
        assert attrs["backend"].s == b"cpu" and attrs["_XlaCluster"].s.decode() == c.name


def test_no_attribute_reaches_one_kib(written) -> None:
    _, _, runs = written
    sizes = [(run, n.name, k, v.ByteSize()) for run, (g, _) in runs.items() for n in g.node for k, v in n.attr.items()]
    assert max(s for *_, s in sizes) < ATTR_LIMIT, max(sizes, key=lambda t: t[-1])
    # the 2 KiB weight constant was described, not dropped
    graph = runs["two_clusters/original"][0]
    consts = [n for n in graph.node if n.op == "Const" and "[8, 64]" in n.attr["value"].s.decode()]
    assert consts and "float32 tensor [8, 64]" in consts[0].attr["value"].s.decode()


def test_shorten_attrs_truncates_long_strings_with_an_ellipsis() -> None:
    gd = tf.compat.v1.GraphDef()
    node = gd.node.add(name="n", op="Foo")
    node.attr["long"].s = ("é" * 3000).encode()
    node.attr["short"].s = b"kept"
    shorten_attrs(gd)
    text = node.attr["long"].s.decode()  # still valid UTF-8: cut on a character boundary
    assert text.endswith("…") and node.attr["long"].ByteSize() < ATTR_LIMIT
    assert node.attr["short"].s == b"kept"
    assert truncate("abc") == "abc"


def test_hlo_graph_has_a_node_per_instruction_and_fusion_scopes(written) -> None:
    cg, _, runs = written
    for c in cg.clusters:
        graph, _ = runs[f"two_clusters/hlo/{c.name}"]
        module = c.optimized
        fusions = [i for i in module.entry.instructions if i.opcode.text == "fusion"]
        assert fusions, "the optimized module has fusions"
        expected = {i.name for i in module.entry.instructions if i.opcode.text != "fusion"}
        for fusion in fusions:
            fused = module.computation(fusion.called_computations[0])
            expected |= {f"{fusion.name}/{i.name}" for i in fused.instructions}
        names = [n.name for n in graph.node]
        assert len(names) == len(set(names)) and set(names) == expected
        by_name = {n.name: n for n in graph.node}
        for n in graph.node:
            assert all(i in by_name for i in n.input), n  # every edge comes from a node of the graph
        root = by_name[module.entry.root_name]
        assert root.op == module.entry.root.opcode.text
        param = by_name[f"{fusions[0].name}/param_0"]  # fused parameters are fed by the fusion's operands
        assert param.op == "parameter" and len(param.input) == 1


def test_text_summaries_hold_the_hlo_code_and_reports(written) -> None:
    cg, _, runs = written
    for c in cg.clusters:
        _, texts = runs[f"two_clusters/hlo/{c.name}"]
        assert set(texts) == set(tb.CLUSTER_TEXT_TAGS)
        before = hlo.parse_module(tb.unfence(texts["hlo_before_optimizations"]))
        after = hlo.parse_module(tb.unfence(texts["hlo_after_optimizations"]))
        assert before == c.hlo and after == c.optimized
        assert tb.unfence(texts["c_source"]).rstrip() == c.c_source.rstrip()
        assert tb.unfence(texts["buffer_assignment"]).rstrip() == c.buffer_assignment.rstrip()
        assert "fusion" in texts["fusion_decisions"]


def test_write_rejects_what_it_cannot_show(tmp_path) -> None:
    with pytest.raises(TypeError, match="expected a tfxla_plugin.function, got function"):
        tb.write(two_clusters, tf.ones([1, 8]), logdir=tmp_path)
    plain = tfxla_plugin.function(two_clusters, jit_compile=False)
    with pytest.raises(ValueError, match="jit_compile=False"):
        tb.write(plain, tf.ones([1, 8]), logdir=tmp_path)
    (tmp_path / "file").write_text("x")
    f = tfxla_plugin.function(lambda x: tf.nn.relu(x) * 2.0 + 1.0)
    with pytest.raises(NotADirectoryError, match="is not a directory"):
        tb.write(f, tf.ones([3]), logdir=tmp_path / "file")


def test_rewriting_a_run_needs_overwrite(tmp_path) -> None:
    f = tfxla_plugin.function(lambda x: tf.nn.relu(x) * 2.0 + 1.0)
    x = tf.ones([3])
    first = tb.write(f, x, logdir=tmp_path, name="<lambda> #1")
    assert set(first.runs) == {"lambda_1/original", "lambda_1/rewritten", "lambda_1/hlo/cluster_0"}
    with pytest.raises(FileExistsError, match="already holds event files; pass overwrite=True"):
        tb.write(f, x, logdir=tmp_path, name="<lambda> #1")
    again = tb.write(f, x, logdir=tmp_path, name="<lambda> #1", overwrite=True)
    for path in again.runs.values():
        assert len(list((tmp_path / path).glob("events.out.tfevents.*"))) == 1


def test_hlo_graph_describes_large_constants_and_prints_small_ones() -> None:
    from tfxla_plugin.tensorboard.graphs import MAX_LITERAL_ELEMENTS, hlo_graph

    n = MAX_LITERAL_ELEMENTS + 1
    zeros = ", ".join(["0"] * n)
    module = hlo.parse_module(f"""HloModule m

ENTRY %m (p: f32[{n}]) -> f32[{n}] {{
  %p = f32[{n}] parameter(0)
  %big = f32[{n}] constant({{{zeros}}})
  %small = f32[] constant(2.5)
  %b = f32[{n}] broadcast(f32[] %small), dimensions={{}}
  %a = f32[{n}] add(f32[{n}] %p, f32[{n}] %big)
  ROOT %r = f32[{n}] multiply(f32[{n}] %a, f32[{n}] %b)
}}
""")
    nodes = {node.name: node for node in hlo_graph(module).node}
    assert set(nodes) == {"p", "big", "small", "b", "a", "r"}
    assert nodes["big"].attr["value"].s.decode() == f"<f32[{n}] constant, {n} elements, not shown>"
    assert nodes["small"].attr["value"].s == b"2.5"
    assert list(nodes["r"].input) == ["a", "b"] and nodes["r"].op == "multiply"
    assert nodes["b"].attr["dimensions"].s == b"{}"
