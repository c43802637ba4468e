"""graph_passes/launch_reads.py on hand-built GraphDefs: which variable reads a launch takes as handles, and
which it must leave (ordering, other consumers, aliases, devices)."""

from __future__ import annotations

import pytest
import tensorflow as tf

from graph_passes._graph import GraphIndex
from graph_passes.forward_variables import DT_RESOURCE
from graph_passes.launch_reads import fold_launch_reads
from tests.graph_passes_util import make_graph

F32 = tf.float32.as_datatype_enum


def graph(spec, tin=1, devices=None):
    """``make_graph`` whose ``TfxlaLaunch`` node ``L`` gets a float ``Tin`` of ``tin`` entries."""
    gd = make_graph(spec, devices)
    for node in gd.node:
        if node.op == "TfxlaLaunch":
            node.attr["Tin"].list.type.extend([F32] * tin)
    return gd


def nodes(gd):
    return {n.name: n for n in gd.node}


STEP = [  # read v, launch on it, write the launch's result back (auto control deps: the write waits on the read)
    ("v", "VarHandleOp", []),
    ("p", "Const", []),
    ("r", "ReadVariableOp", ["v", "^p"]),
    ("L", "TfxlaLaunch", ["p", "r"]),
    ("w", "AssignVariableOp", ["v", "L", "^r"]),
]


def test_a_read_becomes_the_handle_and_the_write_waits_on_the_launch() -> None:
    gd = graph(STEP)
    before = gd.SerializeToString()
    result = fold_launch_reads(gd)
    got = nodes(result.graph_def)
    assert list(got["L"].input) == ["p", "v:0", "^p"]  # the read's control input moves to the launch
    assert list(got["L"].attr["Tin"].list.type) == [DT_RESOURCE]
    assert list(got["w"].input) == ["v", "L", "^L"]
    assert "r" not in got and result.removed == ["r"] and result.folded == [("L", 0, "r")]
    assert gd.SerializeToString() == before  # the GraphDef given is not changed
    assert fold_launch_reads(gd).graph_def.SerializeToString() == result.graph_def.SerializeToString()
    GraphIndex(result.graph_def.node)  # every input names a node


def test_refused_when_the_launch_depends_on_a_later_write() -> None:
    # w writes v after the read and the launch waits on w: at launch time v holds w's value, not r's
    gd = graph([
        ("v", "VarHandleOp", []),
        ("p", "Const", []),
        ("r", "ReadVariableOp", ["v"]),
        ("w", "AssignVariableOp", ["v", "p", "^r"]),
        ("L", "TfxlaLaunch", ["p", "r", "^w"]),
    ])
    result = fold_launch_reads(gd)
    assert result.folded == []
    assert result.kept == {"r": "the launch waits on 'w', which may write the variable after the read"}
    assert result.graph_def.SerializeToString() == gd.SerializeToString()


def test_a_node_the_launch_waits_on_waits_on_what_the_read_waited_on() -> None:
    # a tf.function's outputs wait on a NoOp that waits on every read; the rewrite moved that edge to the launch
    gd = graph([
        ("v", "VarHandleOp", []),
        ("p", "Const", []),
        ("r", "ReadVariableOp", ["v", "^p"]),
        ("n", "NoOp", ["^r"]),
        ("L", "TfxlaLaunch", ["p", "r", "^n", "^r"]),
    ])
    got = nodes(fold_launch_reads(gd).graph_def)
    assert list(got["n"].input) == ["^p"]
    assert list(got["L"].input) == ["p", "v:0", "^n", "^p"]
    GraphIndex(got.values())


def test_refused_when_the_launch_waits_on_a_write_not_ordered_after_the_read() -> None:
    gd = graph([
        ("v", "VarHandleOp", []),
        ("p", "Const", []),
        ("r", "ReadVariableOp", ["v"]),
        ("w", "AssignVariableOp", ["v", "p"]),  # not ordered with the read at all
        ("L", "TfxlaLaunch", ["p", "r", "^w"]),
    ])
    assert fold_launch_reads(gd).kept == {"r": "the launch waits on 'w', which may write the variable after the read"}


def test_refused_when_a_write_could_run_before_the_launch() -> None:
    gd = graph([
        ("v", "VarHandleOp", []),
        ("p", "Const", []),
        ("r", "ReadVariableOp", ["v"]),
        ("n", "Neg", ["r"]),
        ("w", "AssignVariableOp", ["v", "n"]),  # after the read only through the read's other consumer
        ("L", "TfxlaLaunch", ["p", "r"]),
    ])
    assert fold_launch_reads(gd).kept == {"r": "'w' may write the variable before the launch runs"}


def test_a_write_before_the_read_is_fine() -> None:
    gd = graph([
        ("v", "VarHandleOp", []),
        ("p", "Const", []),
        ("w", "AssignVariableOp", ["v", "p"]),
        ("r", "ReadVariableOp", ["v", "^w"]),
        ("L", "TfxlaLaunch", ["p", "r"]),
    ])
    got = nodes(fold_launch_reads(gd).graph_def)
    assert list(got["L"].input) == ["p", "v:0", "^w"]


def test_a_read_with_another_consumer_stays_for_it_and_is_still_folded() -> None:
    gd = graph([*STEP, ("n", "Neg", ["r"])])
    result = fold_launch_reads(gd)
    got = nodes(result.graph_def)
    assert result.folded == [("L", 0, "r")] and result.removed == []
    assert list(got["L"].input) == ["p", "v:0", "^p"]
    assert list(got["n"].input) == ["r"]
    assert list(got["w"].input) == ["v", "L", "^r", "^L"]  # waits on the read (kept) and on the launch


def test_a_fetched_read_stays_and_a_target_becomes_a_noop() -> None:
    result = fold_launch_reads(graph(STEP), keep=["r:0"])
    assert result.folded == [("L", 0, "r")] and nodes(result.graph_def)["r"].op == "ReadVariableOp"
    result = fold_launch_reads(graph(STEP), keep=["^r"])  # a function's control output: its name must stay
    got = nodes(result.graph_def)
    assert (got["r"].op, list(got["r"].input)) == ("NoOp", ["^L"])
    assert result.targets == ["r"] and result.removed == []
    assert list(got["w"].input) == ["v", "L", "^L"]


def test_two_reads_and_one_read_in_two_slots() -> None:
    gd = graph([
        ("u", "VarHandleOp", []),
        ("v", "VarHandleOp", []),
        ("p", "Const", []),
        ("ru", "ReadVariableOp", ["u"]),
        ("rv", "ReadVariableOp", ["v"]),
        ("L", "TfxlaLaunch", ["p", "ru", "rv", "ru", "^ru"]),
        ("w", "AssignVariableOp", ["u", "L:1", "^ru", "^rv"]),
    ], tin=3)
    result = fold_launch_reads(gd)
    got = nodes(result.graph_def)
    assert list(got["L"].input) == ["p", "u:0", "v:0", "u:0"]
    assert list(got["L"].attr["Tin"].list.type) == [DT_RESOURCE] * 3
    assert list(got["w"].input) == ["u", "L:1", "^L"]
    assert result.removed == ["ru", "rv"]


@pytest.mark.parametrize("spec, why", [
    ([("v", "VarHandleOp", []), ("a", "Identity", ["v"]), ("r", "ReadVariableOp", ["v"])],
     "its handle is passed on by Identity 'a'"),
    ([("x", "Placeholder", []), ("v", "Identity", ["x"]), ("r", "ReadVariableOp", ["v"])],
     "its handle is not a variable's (VarHandleOp, resource _Arg or Placeholder)"),
])
def test_reads_of_handles_that_are_not_plain_variables_stay(spec, why) -> None:
    gd = graph([*spec, ("p", "Const", []), ("L", "TfxlaLaunch", ["p", "r"])])
    assert fold_launch_reads(gd).kept == {"r": why}


def test_a_read_on_another_device_or_colocated_stays() -> None:
    cpu1 = "/job:localhost/replica:0/task:0/device:CPU:1"
    gd = graph(STEP, devices={"r": cpu1})
    assert fold_launch_reads(gd).kept == {"r": f"it is on device '{cpu1}', the launch on ''"}
    gd = graph(STEP)
    nodes(gd)["r"].attr["_class"].list.s.append(b"loc:@v")
    assert fold_launch_reads(gd).kept == {"r": "it has a colocation (_class) the launch does not"}


def _resource_arg(gd, name: str, specified: str) -> None:
    node = nodes(gd)[name]
    node.attr["T"].type = DT_RESOURCE
    node.attr["_handle_dtypes"].list.type.append(F32)
    node.attr["_handle_shapes"].list.shape.add().dim.add(size=4)
    node.attr["_user_specified_name"].s = specified.encode()


def test_the_writes_of_an_arg_that_may_be_the_same_variable_count() -> None:
    # a and b are arguments of one dtype and shape: the caller may pass one variable twice
    spec = [
        ("a", "_Arg", []),
        ("b", "_Arg", []),
        ("p", "Const", []),
        ("r", "ReadVariableOp", ["a"]),
        ("L", "TfxlaLaunch", ["p", "r"]),
        ("w", "AssignVariableOp", ["b", "p"]),  # ordered with nothing
    ]
    gd = graph(spec)
    _resource_arg(gd, "a", "a")
    _resource_arg(gd, "b", "b")
    assert fold_launch_reads(gd).kept == {"r": "'w' may write the variable before the launch runs"}
    gd = graph(spec)
    _resource_arg(gd, "a", "resource")  # two captures: two variables
    _resource_arg(gd, "b", "resource")
    assert fold_launch_reads(gd).folded == [("L", 0, "r")]
