"""The text of ``saved_model_cli show``, which ``tfxla show`` prints by default: the same lines for
the same flags (``--dir`` alone: the tag-sets; ``--tag_set``: its SignatureDef keys; ``--signature_def``:
its inputs and outputs; ``--list_ops``; ``--all``), read from ``saved_model.pb`` without loading the
model. The one difference: ``--all`` does not end with saved_model_cli's "Concrete Functions" listing
(that needs the model loaded), and ``--list_ops`` prints the op set sorted.
"""

from __future__ import annotations

import argparse


def _dtype(enum: int) -> str:
    from tensorflow.core.framework import types_pb2

    return types_pb2.DataType.Name(enum)


def _tensor_lines(info, indent: str) -> list[str]:
    shape = ("unknown_rank" if info.tensor_shape.unknown_rank
             else "(" + ", ".join(str(d.size) for d in info.tensor_shape.dim) + ")")
    return [f"{indent}    dtype: {_dtype(info.dtype)}", f"{indent}    shape: {shape}", f"{indent}    name: {info.name}"]


def signature_lines(mg, key: str, indent: str = "") -> list[str]:
    """One SignatureDef's inputs, outputs and method name (``_show_inputs_outputs_mgd``)."""
    sig = mg.signature_def[key]
    lines = []
    for title, tensors in (("input", sig.inputs), ("output", sig.outputs)):
        lines.append(f"{indent}The given SavedModel SignatureDef contains the following {title}(s):")
        for name, info in sorted(tensors.items()):
            lines.append(f"{indent}  {title}s['{name}'] tensor_info:")
            lines.extend(_tensor_lines(info, indent + "  "))
    lines.append(f"{indent}Method name is: {sig.method_name}")
    return lines


def ops_line(mg) -> str:
    from tensorflow.python.framework import meta_graph

    ops = sorted(set(meta_graph.ops_used_by_graph_def(mg.graph_def)))
    return (f"The MetaGraph with tag set {list(mg.meta_info_def.tags)} contains the following ops: "
            "{" + ", ".join(repr(op) for op in ops) + "}")


def _all_lines(proto) -> list[str]:
    lines = []
    for mg in sorted(proto.meta_graphs, key=lambda m: list(m.meta_info_def.tags)):
        lines += ["", f"MetaGraphDef with tag-set: '{', '.join(mg.meta_info_def.tags)}' contains the following "
                      "SignatureDefs:"]
        for key in sorted(mg.signature_def):
            lines += ["", f"signature_def['{key}']:", *signature_lines(mg, key, "  ")]
        lines.append(ops_line(mg))
    return lines


def show_lines(proto, args: argparse.Namespace, find_meta_graph, path) -> list[str]:
    """What ``saved_model_cli show`` prints for ``args`` (``--dir``, ``--tag_set``, ``--signature_def``,
    ``--all``, ``--list_ops``). ``find_meta_graph(proto, tag_set, path)`` picks the MetaGraphDef (or raises)."""
    if args.all:
        return _all_lines(proto)
    if args.tag_set is None:
        lines = ["--list_ops must be paired with a tag-set or with --all."] if args.list_ops else []
        lines.append("The given SavedModel contains the following tag-sets:")
        lines += [repr(", ".join(sorted(tags))) for tags in sorted(list(m.meta_info_def.tags) for m in proto.meta_graphs)]
        return lines
    mg = find_meta_graph(proto, args.tag_set, path)
    lines = [ops_line(mg)] if args.list_ops else []
    if args.signature_def is None:
        lines.append("The given SavedModel MetaGraphDef contains SignatureDefs with the following keys:")
        lines += [f'SignatureDef key: "{key}"' for key in sorted(mg.signature_def)]
    else:  # the caller checked that it exists
        lines += signature_lines(mg, args.signature_def)
    return lines
