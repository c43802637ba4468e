"""graph_passes.cluster on small hand-built GraphDefs (abstract ops, fake markings)."""

import random

import pytest

from graph_passes import cluster
from graph_passes.cluster import ClusterOptions, _Clusterer, cluster_nodes
from tests.graph_passes_util import acyclic_after_contraction, fake_marking, make_graph

ONE = ClusterOptions(min_cluster_size=1)


def chain(n: int, op: str = "Add"):
    return make_graph([("n0", op, [])] + [(f"n{i}", op, [f"n{i - 1}"]) for i in range(1, n)])


def groups(result) -> list[tuple[str, ...]]:
    return [c.nodes for c in result.clusters]


def test_diamond_through_uncompilable_node_is_not_merged():
    gd = make_graph([("A", "Add", []), ("B", "Print", ["A"]), ("C", "Add", ["A", "B"])])
    result = cluster_nodes(fake_marking(gd, bad={"B"}), ONE)
    assert groups(result) == [("A",), ("C",)]
    assert acyclic_after_contraction(gd, result.cluster_of)
    (refused,) = result.refused
    assert (refused.producer, refused.consumer) == ("A", "C")
    assert "cycle" in refused.reason and "'B'" in refused.reason


def test_diamond_of_compilable_nodes_is_one_cluster():
    gd = make_graph([("A", "Add", []), ("B", "Mul", ["A"]), ("C", "Add", ["A", "B"])])
    assert groups(cluster_nodes(fake_marking(gd), ONE)) == [("A", "B", "C")]


def test_control_edge_through_uncompilable_node_is_a_path_too():
    # A -ctl-> X(bad) -data-> C and A -data-> C: merging A and C would make X both after and before it.
    gd = make_graph([("A", "Add", []), ("X", "Assign", ["^A"]), ("C", "Add", ["A", "X"])])
    result = cluster_nodes(fake_marking(gd, bad={"X"}), ONE)
    assert groups(result) == [("A",), ("C",)]
    gd = make_graph([("A", "Add", []), ("X", "Assign", ["A"]), ("C", "Add", ["A", "^X"])])
    result = cluster_nodes(fake_marking(gd, bad={"X"}), ONE)
    assert groups(result) == [("A",), ("C",)]
    assert acyclic_after_contraction(gd, result.cluster_of)


def test_control_edges_between_compilable_nodes_do_not_block_merging():
    gd = make_graph([("A", "Add", []), ("B", "Mul", ["A", "^A"]), ("C", "Add", ["B"]), ("D", "NoOp", ["^C"])])
    result = cluster_nodes(fake_marking(gd, bad={"D"}), ONE)
    assert groups(result) == [("A", "B", "C")]


@pytest.mark.parametrize("min_gap", [cluster.MIN_RANK_GAP, 1e9])  # 1e9: renumber the ranks on every move
def test_random_dags_never_get_a_cycle_and_are_deterministic(min_gap, monkeypatch):
    monkeypatch.setattr(cluster, "MIN_RANK_GAP", min_gap)
    rng = random.Random(1234)
    for trial in range(100):
        n = rng.randint(3, 60)
        spec = []
        for i in range(n):
            preds = [f"n{j}" for j in range(i) if rng.random() < 0.25]
            ctl = [f"^n{j}" for j in range(i) if rng.random() < 0.08]
            spec.append((f"n{i}", rng.choice(["Add", "Mul", "Const", "Identity"]), preds + ctl))
        gd = make_graph(spec)
        bad = {f"n{i}" for i in range(n) if rng.random() < 0.3}
        options = ClusterOptions(min_cluster_size=rng.choice([1, 2, 4]), must_compile=trial % 3 == 0)
        first = cluster_nodes(fake_marking(gd, bad), options)
        assert acyclic_after_contraction(gd, first.cluster_of), (trial, spec, bad)
        assert not set(first.cluster_of) & bad
        second = cluster_nodes(fake_marking(gd, bad), options)
        assert groups(first) == groups(second) and first.refused == second.refused
        clusterer = _Clusterer(fake_marking(gd, bad), options)
        clusterer.run(clusterer_marking := fake_marking(gd, bad))
        graph = clusterer.graph  # the ranking it kept while contracting is still topological
        assert all(graph.rank[s] > graph.rank[r] for r in graph.succs for s in graph.succs[r]), clusterer_marking


def test_names_follow_the_position_of_the_first_node():
    gd = make_graph([("a", "Add", []), ("x", "Print", ["a"]), ("b", "Mul", ["x"]), ("c", "Mul", ["b"]),
                     ("d", "Add", ["a"])])
    result = cluster_nodes(fake_marking(gd, bad={"x"}), ONE)
    assert [(c.name, c.nodes) for c in result.clusters] == [("cluster_0", ("a", "d")), ("cluster_1", ("b", "c"))]
    assert result.cluster_of == {"a": "cluster_0", "d": "cluster_0", "b": "cluster_1", "c": "cluster_1"}


def test_min_cluster_size_dissolves_small_clusters_and_zero_cost_ops_count_zero():
    gd = make_graph([("k", "Const", []), ("a", "Add", ["k"]), ("i", "Identity", ["a"]), ("s", "Snapshot", ["i"]),
                     ("b", "Mul", ["s"]), ("c", "Sub", ["b"])])
    result = cluster_nodes(fake_marking(gd), ClusterOptions(min_cluster_size=4))
    assert result.clusters == []
    assert result.excluded["a"] == "cluster too small (3 ops < min_cluster_size 4)"
    assert set(result.excluded) == {"k", "a", "i", "s", "b", "c"}
    result = cluster_nodes(fake_marking(gd), ClusterOptions(min_cluster_size=3))
    assert groups(result) == [("k", "a", "i", "s", "b", "c")] and result.clusters[0].size == 3


def test_max_cluster_size():
    result = cluster_nodes(fake_marking(chain(10)), ClusterOptions(min_cluster_size=1, max_cluster_size=4))
    assert [c.size for c in result.clusters] == [4, 4, 2]
    assert [(r.producer, r.consumer) for r in result.refused] == [("n3", "n4"), ("n7", "n8")]
    for r in result.refused:
        assert r.reason.startswith("max_cluster_size exceeded (") and r.reason.endswith(" ops > 4)")


@pytest.mark.parametrize("fuel", [0, 1, 3, 7, 9, 20])
def test_fuel_allows_exactly_k_merges(fuel):
    result = cluster_nodes(fake_marking(chain(10)), ClusterOptions(min_cluster_size=1, fuel=fuel))
    merges = min(fuel, 9)
    assert result.merges == merges
    assert len(result.clusters) == 10 - merges
    if fuel < 9:
        assert any(r.reason == f"out of fuel (fuel={fuel})" for r in result.refused)


def test_fuel_bisects_a_prefix_of_the_same_decisions():
    rng = random.Random(7)
    spec = [(f"n{i}", "Add", [f"n{j}" for j in range(i) if rng.random() < 0.3]) for i in range(25)]
    gd = make_graph(spec)
    full = cluster_nodes(fake_marking(gd, {"n5", "n11"}), ONE)
    for fuel in range(full.merges + 1):
        partial = cluster_nodes(fake_marking(gd, {"n5", "n11"}), ClusterOptions(min_cluster_size=1, fuel=fuel))
        assert partial.merges == fuel
        for c in partial.clusters:  # every partial cluster lies inside one final cluster
            assert len({full.cluster_of[n] for n in c.nodes}) == 1


def test_devices_are_not_mixed_and_spellings_are_normalized():
    gd = make_graph([("a", "Add", []), ("b", "Add", ["a"]), ("c", "Add", ["b"]), ("d", "Add", ["c"])],
                    devices={"a": "/device:CPU:0", "b": "/job:localhost/replica:0/task:0/device:CPU:0",
                             "c": "/device:CPU:1"})
    result = cluster_nodes(fake_marking(gd), ONE)
    assert groups(result) == [("a", "b"), ("c", "d")]
    assert result.clusters[0].device == "/device:CPU:0" and result.clusters[1].device == "/device:CPU:1"
    assert any(r.reason.startswith("different devices") for r in result.refused)


def test_must_compile_forms_one_cluster_from_disconnected_parts():
    gd = make_graph([("a", "Add", []), ("b", "Mul", ["a"]), ("c", "Add", []), ("d", "Neg", ["c"]),
                     ("k", "Const", [])])
    assert len(cluster_nodes(fake_marking(gd), ClusterOptions()).clusters) == 0
    result = cluster_nodes(fake_marking(gd), ClusterOptions(must_compile=True))
    assert groups(result) == [("a", "b", "c", "d", "k")]


def test_must_compile_keeps_two_clusters_when_one_would_be_a_cycle():
    gd = make_graph([("a", "Add", []), ("x", "Print", ["a"]), ("b", "Mul", ["x"]), ("c", "Add", [])])
    result = cluster_nodes(fake_marking(gd, {"x"}), ClusterOptions(must_compile=True))
    assert groups(result) == [("a", "c"), ("b",)]
    assert [(r.producer, r.consumer) for r in result.refused] == [("a", "b")]
    assert "cycle" in result.refused[0].reason


def test_v1_cycle_is_contracted_not_a_crash():
    gd = make_graph([("e", "Enter", []), ("m", "Merge", ["e", "ni"]), ("a", "Add", ["m"]), ("b", "Mul", ["a"]),
                     ("ni", "NextIteration", ["b"]), ("z", "Add", []), ("z2", "Add", ["z"])])
    result = cluster_nodes(fake_marking(gd, {"e", "m", "ni", "a", "b"}), ONE)
    assert groups(result) == [("z", "z2")]


def test_options_validate():
    with pytest.raises(ValueError):
        ClusterOptions(fuel=-1)
    with pytest.raises(ValueError):
        ClusterOptions(max_cluster_size=0)
