"""Explanations: ``f.explain(*args, format=...)`` and ``tfxla_plugin.explain.explain_text/explain_json``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

import tfxla_plugin
from graph_passes.pipeline import NON_COMPUTE_OPS
from tfxla_plugin.explain import MAX_REFUSED_FUSION_LINES, explain_json, explain_text


def mlp_with_string_op(x, w):
    """A dot with three users (its fusion is refused: "expensive (dot)") and an op that stays in TensorFlow."""
    y = tf.nn.relu(tf.matmul(x, w))
    s = tf.reduce_sum(y, axis=1, keepdims=True)
    return tf.nn.softmax(y / s) * tf.exp(y), tf.strings.as_string(s)


@pytest.fixture(scope="module")
def compiled():
    f = tfxla_plugin.function(mlp_with_string_op, jit_compile="auto")
    rng = np.random.default_rng(1)
    args = (tf.constant(rng.standard_normal((4, 8)).astype(np.float32)),
            tf.constant(rng.standard_normal((8, 8)).astype(np.float32)))
    return f, args, f.compiled_graph(*args)


def test_text_has_clusters_coverage_reasons_and_refused_fusions(compiled) -> None:
    f, args, cg = compiled
    text = f.explain(*args)
    assert text == explain_text(cg)
    assert text.startswith("Clustering summary: 1 cluster(s) built, ")
    # coverage counts compute nodes only (not Placeholder, Const, Identity, NoOp, ...): all but AsString compiled
    nodes = cg.analysis.graph_def.node
    compute = [n.name for n in nodes if n.op not in NON_COMPUTE_OPS]
    clustered = sum(n in compute for n in cg.analysis.clusters[0].node_names)
    assert (clustered, len(compute)) == (len(compute) - 1, len(compute))  # all but AsString
    assert (f"{clustered} of {len(compute)} compute nodes clustered ({100 * clustered / len(compute):.1f}%); "
            f"{len(nodes)} nodes in all, not counted: ") in text
    assert "    MatMul: 1" in text  # the op histogram
    assert "AsString: string tensor 'AsString:0': string tensors stay in TensorFlow" in text
    assert "HLO of cluster_0: " in text and "Refused fusions (" in text
    assert "is expensive (dot)" in text


def test_text_bounds_the_refused_fusions(compiled) -> None:
    _, _, cg = compiled
    refused = explain_json(cg)["clusters"][0]["refused_fusions"]
    assert len(refused) > 3
    text = explain_text(cg, max_refused=3)
    listed = [line for line in text.splitlines() if line.startswith("    producer-consumer:")
              or line.startswith("    multi-output:") or line.startswith("    sibling:")]
    assert len(listed) == 3
    assert f"... and {len(refused) - 3} more (explain_json lists them all)" in text
    assert MAX_REFUSED_FUSION_LINES >= 10


def test_json_lists_every_refused_fusion_with_its_reason(compiled) -> None:
    f, args, cg = compiled
    data = json.loads(f.explain(*args, format="json"))
    assert data == json.loads(json.dumps(explain_json(cg)))
    keys = {"clusters", "nodes_total", "nodes_clustered", "percent_clustered", "excluded", "refused_merges"}
    assert keys <= set(data)
    cluster = data["clusters"][0]
    assert cluster["name"] == "cluster_0" and cluster["op_types"]["MatMul"] == 1
    compiled_cluster = cg.clusters[0]
    assert cluster["kernel_hash"] == compiled_cluster.kernel_hash
    refused = cluster["refused_fusions"]
    assert len(refused) == sum(1 for d in compiled_cluster.fusion_decisions if not d.fused)
    assert all(r["reason"] and r["phase"] in ("producer-consumer", "multi-output", "sibling") for r in refused)
    dots = [r for r in refused if r["producer"].startswith("MatMul") and "expensive (dot)" in r["reason"]]
    assert dots, refused
    assert cluster["fusions"] and all(fu["members"] for fu in cluster["fusions"])
    assert {"node": "AsString", "op": "AsString"}.items() <= next(
        e for e in data["excluded"] if e["node"] == "AsString").items()


def test_bad_format_is_a_clear_error(compiled) -> None:
    f, args, _ = compiled
    with pytest.raises(ValueError, match=r"explain: format must be one of 'text', 'json', got 'yaml'"):
        f.explain(*args, format="yaml")


def test_must_compile_function_explains_too() -> None:
    f = tfxla_plugin.function(lambda x: tf.nn.relu(x) * 2.0 + 1.0)
    text = f.explain(tf.ones([3]))
    assert "1 cluster(s) built" in text and "HLO of cluster_0" in text


def test_a_fully_compiled_model_reads_100_percent() -> None:
    # Placeholders, variable reads, the NoOp and the output Identity stay in TensorFlow; none is compute
    w = tf.Variable(np.ones((4, 3), np.float32))
    f = tfxla_plugin.function(lambda x: tf.nn.relu(tf.matmul(x, w)) * 2.0 + 1.0)
    data = json.loads(f.explain(tf.ones([2, 4]), format="json"))
    assert (data["nodes_clustered"], data["nodes_total"], data["percent_clustered"]) == (4, 4, 100.0)
    left_out = {e["op"] for e in data["excluded"]}
    assert left_out and left_out <= NON_COMPUTE_OPS, left_out
    assert data["not_counted"]["Placeholder"] == 2 and data["not_counted"]["ReadVariableOp"] == 1
    assert sum(data["not_counted"].values()) == data["nodes_in_graph"] - 4
    assert "4 of 4 compute nodes clustered (100.0%); " in f.explain(tf.ones([2, 4]))
