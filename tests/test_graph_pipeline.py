"""graph_passes.pipeline: analyze/rewrite drivers and the clustering summary."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import tensorflow as tf

from graph_passes.cluster import ClusterOptions
from graph_passes.pipeline import NON_COMPUTE_OPS, analyze_function, rewrite, summary, summary_json
from graph_passes.rewrite import LAUNCH_OP
from tests.graph_passes_util import check_clusters_against_tf


@tf.function
def helper(x):
    return tf.nn.relu(x) * 2.0 + 1.0


@tf.function
def mixed(x):
    y = helper(x)
    z = tf.exp(y) - y
    label = tf.strings.as_string(z)
    noisy = z * tf.random.uniform([2, 4])
    return tf.reduce_sum(noisy * noisy), label, tf.sqrt(tf.abs(z))


SPEC = tf.TensorSpec([2, 4], tf.float32)


def test_auto_clustering_leaves_string_and_random_ops_with_reasons():
    cf = mixed.get_concrete_function(SPEC)
    result = analyze_function(cf)
    assert result.inlined == 1
    text = summary(result)
    ops = {n.name: n.op for n in result.graph_def.node}
    for name, reason in result.excluded.items():
        assert reason, name
    as_string = next(n for n, op in ops.items() if op == "AsString")
    rnd = next(n for n, op in ops.items() if op == "RandomUniform")
    assert result.excluded[as_string].startswith("string tensor")
    assert result.excluded[rnd].startswith("stateful random op")
    assert re.search(rf"\n  AsString +{as_string}: string tensor 'AsString:0'.*\(test_graph_pipeline.py:\d+\)",
                     text)
    assert re.search(rf"\n  RandomUniform +{rnd}: stateful random op", text)
    assert text.startswith("Clustering summary: 1 cluster(s) built, ")
    unsupported = result.unsupported()
    assert {as_string, rnd} <= set(unsupported)
    assert all(r.startswith("string tensor") for n, r in unsupported.items() if n != rnd)


def test_summary_json_counts_and_is_serializable():
    result = analyze_function(mixed.get_concrete_function(SPEC), ClusterOptions(min_cluster_size=1))
    data = json.loads(json.dumps(summary_json(result)))
    # coverage counts compute nodes: not NON_COMPUTE_OPS (Const, Identity, Placeholder, NoOp, ...), not dead code
    ops = {n.name: n.op for n in result.graph_def.node}
    compute = {n for n, op in ops.items() if op not in NON_COMPUTE_OPS and n not in result.dead_nodes}
    assert data["nodes_total"] == len(compute) < data["nodes_in_graph"] == len(ops)
    assert data["nodes_clustered"] == sum(n in compute for c in result.clusters for n in c.node_names)
    assert data["percent_clustered"] == round(100 * data["nodes_clustered"] / data["nodes_total"], 1)
    assert sum(data["not_counted"].values()) == len(ops) - len(compute) and "Placeholder" in data["not_counted"]
    assert [c["name"] for c in data["clusters"]] == [f"cluster_{i}" for i in range(len(result.clusters))]
    assert sum(sum(c["op_types"].values()) for c in data["clusters"]) == sum(len(c.node_names) for c in result.clusters)
    assert {e["node"] for e in data["excluded"]} == set(result.excluded)
    text = summary(result)
    for c in data["clusters"]:
        assert f"  {c['name']}: {c['nodes']} nodes" in text


def test_analysis_is_deterministic():
    cf = mixed.get_concrete_function(SPEC)
    first, second = analyze_function(cf), analyze_function(cf)
    assert summary(first) == summary(second)
    assert [c.graph_def.SerializeToString(deterministic=True) for c in first.clusters] == \
        [c.graph_def.SerializeToString(deterministic=True) for c in second.clusters]
    a, b = rewrite(first).graph_def, rewrite(second).graph_def
    assert a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)


def test_must_compile_gives_one_cluster_that_matches_tf():
    v = tf.Variable(tf.fill([4, 3], 0.5))

    @tf.function
    def dense(x):
        h = tf.matmul(x, v)
        return tf.reduce_mean(tf.nn.softmax(h * 2.0 - 1.0), axis=1), tf.nn.relu(h)
    cf = dense.get_concrete_function(SPEC)
    result = analyze_function(cf, ClusterOptions(must_compile=True))
    assert not result.unsupported() and len(result.clusters) == 1
    (spec,) = result.clusters
    assert spec.inputs[0].tensor == "x:0" and any(p.dtype == tf.float32.as_datatype_enum for p in spec.inputs[1:])
    rewritten = rewrite(result).graph_def
    assert [n.op for n in rewritten.node].count(LAUNCH_OP) == 1
    assert not {n.op for n in rewritten.node} & {"MatMul", "Softmax", "Relu", "Mean"}
    read = next(n.name for n in result.graph_def.node if n.op == "ReadVariableOp")
    check_clusters_against_tf(result, {"x:0": np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4),
                                       f"{read}:0": v.numpy()})  # feed the variable's value at its read


def test_inlined_nodes_keep_their_python_lines():
    result = analyze_function(mixed.get_concrete_function(SPEC))
    relu = next(n.name for n in result.graph_def.node if n.op == "Relu")  # inlined from helper()
    as_string = next(n.name for n in result.graph_def.node if n.op == "AsString")
    assert result.origins[relu].endswith("::Relu")
    assert result.sources[relu] == (__file__, helper.python_function.__code__.co_firstlineno + 2)
    assert result.sources[as_string] == (__file__, mixed.python_function.__code__.co_firstlineno + 4)


DIGEST_SCRIPT = """
import hashlib
from graph_passes.cluster import ClusterOptions
from graph_passes.pipeline import analyze, rewrite, summary
from tests.graph_passes_util import mixed_graph

def digest():
    gd, fetches = mixed_graph()
    h = hashlib.sha256()
    for options in (ClusterOptions(min_cluster_size=1), ClusterOptions(must_compile=True)):
        result = analyze(gd, fetches, options)
        h.update(summary(result).encode())
        h.update(rewrite(result).graph_def.SerializeToString(deterministic=True))
        for c in result.clusters:
            h.update(c.graph_def.SerializeToString(deterministic=True))
    return h.hexdigest()

if __name__ == "__main__":
    print(digest())
"""


def test_results_do_not_depend_on_the_hash_seed(tmp_path):
    script = tmp_path / "digest.py"
    script.write_text(DIGEST_SCRIPT)
    namespace = {}
    exec(compile(DIGEST_SCRIPT, str(script), "exec"), namespace)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONHASHSEED="12345", TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=root)
    out = subprocess.run([sys.executable, str(script)], cwd=root, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == namespace["digest"]()
