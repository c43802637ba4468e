"""Compiling one traced signature: cluster the graph, compile each cluster, rewrite and rebuild it.

``CompiledGraph.build(concrete_function, ...)`` runs the graph passes, compiles every cluster to a
kernel (``cluster_compiler``, with the backend ``flags.backend`` names), replaces each cluster by one
``TfxlaLaunch`` node, and imports the rewritten GraphDef into a new ``tf.function`` bound to the same
live variables (docs/design.md §5).

When the whole function is a single launch fed directly by its inputs and variable reads, and its
only side effects are assigns of launch results to variables (an optimizer step), calls skip the
graph: the launch runs eagerly on the calling thread with the variables' handles, then the assigns
(``eager_launch.EagerStep``): one eager op per call plus one per assign. Which kernel the launch runs and
what it reads come from the rewrite's record of the launch (``RewriteResult.launches``), not from the
GraphDef it wrote.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping

import tensorflow as tf
from tensorflow.python.eager import context
from tensorflow.python.ops import resource_variable_ops

from backends.codegen.errors import CodegenUnsupported
from graph_passes.cluster import ClusterOptions
from graph_passes.pipeline import analyze_function, drop_clusters, rewrite, summary
from graph_passes.rewrite import LAUNCH_OP, LaunchRecord, LaunchSpec, standard_attrs
import backends as kernel_backends  # the Backend registry (backends.get); TODO(lead): rename at the call sites
from hlo.lowering.tensor_names import (canonical, control_inputs, data_inputs, is_control, node_name, parse_input,
                                       parse_tensor)
from hlo.lowering.errors import LoweringError
from tfxla_plugin import _op, gradient
from tfxla_plugin.cluster_compiler import CompiledCluster, compile_cluster
from tfxla_plugin.eager_launch import CapturedHandle, EagerLaunch, EagerStep
from tfxla_plugin.errors import UnsupportedGraphError
from tfxla_plugin.flags import Flags

log = logging.getLogger("tfxla_plugin")
_EagerTensor = type(tf.constant(0))
_MAX_EAGER_READS = 4096  # the eager single-launch path takes at most this many variables per call


class CompiledGraph:
    def __init__(self, cf, analysis, clusters: list[CompiledCluster], rewritten, flags: Flags):
        self.concrete_function = cf
        self._pack = output_packer(cf.structured_outputs)
        self.analysis = analysis
        self.clusters = clusters
        self.rewritten = rewritten  # graph_passes RewriteResult
        self.flags = flags
        self._rebuilt = None
        self.tiling = None  # batch_tiling.TilingResult when built by build_tiled
        self.symbolic = None  # symbolic_dims.SymbolicResult when built by build_symbolic
        self._fast = self._fast_path()

    # --- building -------------------------------------------------------------------
    @classmethod
    def build(cls, cf, *, must_compile: bool, flags: Flags) -> "CompiledGraph":
        kernel_backends.get(flags.backend).check()  # a missing toolchain is an error before any work
        analysis = analyze_function(cf, cluster_options(flags, must_compile))
        if must_compile:
            bad = analysis.unsupported()
            if bad:
                raise UnsupportedGraphError.from_nodes(cf, analysis, bad)
        if flags.dump_to:
            _dump_graph(flags, cf, analysis)
        compiled = compile_clusters(analysis, flags, keep_going=not must_compile)
        by_name = {c.name: c for c in compiled}

        def launch(spec) -> LaunchSpec:
            c = by_name[spec.name]
            attrs = standard_attrs(spec, kernel_hash=c.kernel_hash, **gradient.cluster_attrs(spec))
            return LaunchSpec(attrs, kernel_path=c.kernel_path)

        rewritten = rewrite(analysis, launch)
        return cls(cf, analysis, compiled, rewritten, flags)

    @classmethod
    def build_tiled(cls, cf, *, must_compile: bool, flags: Flags, tiles=None, progress=None,
                    all_or_nothing: bool = False) -> "CompiledGraph":
        """Like ``build`` for a function traced with ``None`` batch dims: kernels per batch tile serve every
        batch size (``batch_tiling``); clusters that cannot be tiled stay in TensorFlow (auto) or raise."""
        from tfxla_plugin import batch_tiling

        kernel_backends.get(flags.backend).check()
        result = batch_tiling.compile_tiled(cf, must_compile=must_compile, flags=flags,
                                            tiles=tiles or batch_tiling.DEFAULT_TILES, progress=progress,
                                            all_or_nothing=all_or_nothing)
        if flags.dump_to:
            _dump_graph(flags, cf, result.analysis)
        graph = cls(cf, result.analysis, [t.largest for t in result.tiled], result.rewritten, flags)
        graph.tiling = result
        return graph

    @classmethod
    def build_symbolic(cls, cf, *, must_compile: bool, flags: Flags, all_or_nothing: bool = True) -> "CompiledGraph":
        """Like ``build`` for a function traced with unknown dims: one kernel per cluster serves every value of
        them (``symbolic_dims``); raises ``symbolic.NotSymbolic`` when a cluster does not generalize."""
        from tfxla_plugin import symbolic_dims

        result = symbolic_dims.compile_symbolic(cf, must_compile=must_compile, flags=flags,
                                                all_or_nothing=all_or_nothing)
        if flags.dump_to:
            _dump_graph(flags, cf, result.analysis)
        graph = cls(cf, result.analysis, result.compiled, result.rewritten, flags)
        graph.symbolic = result
        return graph

    # --- calling ----------------------------------------------------------------------
    def _fast_path(self):
        """The ``EagerStep`` running a call without the graph, if the rewritten graph is one launch on its
        inputs and variable reads whose only side effects are assigns of its results; else None.

        The launch itself (its kernel, attrs, inputs and control inputs) is read from the rewrite's own
        record (``RewriteResult.launches``); the graph is read only for what lies around the launch:
        where each input comes from (an argument, a capture, a variable read), the assigns and the
        Identity chains on the outputs."""
        if len(self.clusters) != 1:
            return None
        record = self.rewritten.launches.get(self.analysis.clusters[0].name)
        if record is None or record.decided.op != LAUNCH_OP or record.decided.kernel_tensor is not None:
            return None  # dead, another op, or a kernel path the graph feeds (a SavedModel asset)
        cf = self.concrete_function
        graph = cf.graph
        nodes = {n.name: n for n in self.rewritten.graph_def.node}
        launch_name = record.node
        where = _Sources(cf, nodes)
        # tf.function's output Identity waits on a NoOp that waits on the variable reads (clustered,
        # that control edge lands on the launch); the eager path reads the variables before launching
        # anyway. Any control input with effects keeps the graph path.
        if not all(_harmless(nodes, c, launch_name) for c in record.control_inputs):
            return None
        sources = [where.of(t) for t in record.inputs]
        if None in sources:
            return None
        if sum(kind in ("var", "argvar") for kind, _ in sources) > _MAX_EAGER_READS:
            return None  # under a tape each variable is one eager read (~8 us): past this a graph call is cheaper
        # Side effects keep the graph path, except assigns of launch results to variables, captured or
        # arguments (an optimizer step), which run eagerly after the launch, as the graph orders them; bare
        # reads are fine.
        assigns, assign_nodes, waiting = [], set(), []
        for op in graph.control_outputs:
            assign = _launch_result_assign(nodes, op.name, launch_name, where.variable)
            if assign is None:
                waiting.append(op.name)
            elif any(_same_target(assign[0], target) for target, _ in assigns):
                return None
            else:
                assigns.append(assign)
                assign_nodes.add(op.name)
        # What the step returns, and every other control output, may wait on the launch and those assigns.
        if not all(_harmless(nodes, name, launch_name, assign_nodes) for name in waiting):
            return None
        outputs = []
        for t in graph.outputs:
            k = _launch_output(nodes, t.name, launch_name, self.rewritten.tensor_map, assign_nodes)
            if k is None:
                return None
            outputs.append(k)
        return EagerStep(_eager_launch(record), sources, outputs, assigns)

    def call_flat(self, flat_args: list):
        """Run on the flat data inputs (in the concrete function's order); returns flat outputs."""
        fast = self._fast
        if fast is not None:
            return fast(flat_args)
        rebuilt = self._rebuilt_function()
        if all(type(t) is _EagerTensor for t in flat_args):
            # what its __call__ ends in, less binding and casting the arguments to its signature (the caller
            # found this graph by their dtypes and shapes); a variable argument needs that binding
            return rebuilt._call_flat(list(flat_args), rebuilt.captured_inputs)  # noqa: SLF001
        return rebuilt(*flat_args)

    def _rebuilt_function(self):
        """The rewritten graph as a ConcreteFunction on the flat data inputs, made at the first call."""
        if self._rebuilt is None:
            self._rebuilt = self._rebuild()
        return self._rebuilt

    def eager_runner(self):
        """A function ``(ctx, flat_args) -> packed outputs`` running a call of eager tensors that nothing
        records (``ctx`` from ``eager_launch.quick_context``): the single-launch path, or the rewritten
        graph's flat call; made once per signature, so that a warm call is one dict lookup and this."""
        fast, pack = self._fast, self._pack
        if fast is None:  # the rewritten graph: what its _call_flat runs when no tape can record the call
            rebuilt = self._rebuilt_function()
            inference = rebuilt._inference_function  # noqa: SLF001
            # (no outputs: None)
            return lambda ctx, flat_args: pack(inference.call_flat(*flat_args, *rebuilt.captured_inputs) or [])
        quick = fast.quick
        if pack is _first:
            return lambda ctx, flat_args: quick(ctx, flat_args)[0]
        return lambda ctx, flat_args: pack(quick(ctx, flat_args))

    def _rebuild(self):
        importer = GraphImporter(self.concrete_function, self.rewritten.graph_def)
        return tf.function(lambda *flat: importer(flat), autograph=False).get_concrete_function(
            *data_input_specs(self.concrete_function))

    def pack_outputs(self, outs):
        return self._pack(outs)

    # --- introspection ---------------------------------------------------------------
    def ir(self, stage: str) -> str:
        stages = {
            "hlo": lambda: "\n".join(c.hlo.to_text() for c in self.clusters),
            "optimized_hlo": lambda: "\n".join(c.optimized.to_text() for c in self.clusters),
            "c": lambda: "\n".join(c.c_source for c in self.clusters),
            "clusters": lambda: summary(self.analysis),
            "graph": lambda: str(self.rewritten.graph_def),
        }
        if stage not in stages:
            raise ValueError(f"unknown stage {stage!r}; stages: {', '.join(stages)}")
        return stages[stage]()


def cluster_options(flags: Flags, must_compile: bool) -> ClusterOptions:
    """The clustering options ``flags`` ask for (must-compile clusters from a single node up)."""
    return ClusterOptions(min_cluster_size=1 if must_compile else flags.min_cluster_size,
                          max_cluster_size=flags.max_cluster_size or None,
                          fuel=None if flags.clustering_fuel < 0 else flags.clustering_fuel,
                          must_compile=must_compile)


def compile_clusters(analysis, flags: Flags, *, keep_going: bool = False) -> list[CompiledCluster]:
    """One compiled kernel per cluster of ``analysis`` (a ``ClusteringResult``), in its order.

    ``keep_going`` ("auto"): a cluster that lowering or the backend refuses (a ``LoweringError`` that is
    not TF's invalid argument, a ``CodegenUnsupported``: e.g. a size a rule does not take, which marking
    cannot see) stays in TensorFlow instead, dropped from ``analysis`` with the reason, one WARNING each.
    Without it (must-compile) the refusal is raised."""
    def compile_one(spec) -> CompiledCluster | Exception:
        try:
            return compile_cluster(spec.name, spec.graph_def, spec.input_specs(), spec.output_tensors(), flags,
                                   sources=getattr(analysis, "sources", None), library=spec.graph_def.library,
                                   concurrent=workers)
        except (LoweringError, CodegenUnsupported) as e:
            if not keep_going:
                raise
            return e

    # Independent clusters compile concurrently: the C compiler runs in subprocesses.
    workers = min(len(analysis.clusters), os.cpu_count() or 1)
    if workers > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(compile_one, analysis.clusters))
    else:
        results = [compile_one(spec) for spec in analysis.clusters]
    refused = {spec.name: f"not compiled: {str(r).splitlines()[0]}"
               for spec, r in zip(analysis.clusters, results) if isinstance(r, Exception)}
    for name, why in refused.items():
        log.warning("cluster %s stays in TensorFlow (%s)", name, why)
    drop_clusters(analysis, refused)
    return [r for r in results if not isinstance(r, Exception)]


def output_packer(structure):
    """A function packing the flat outputs of a traced function in its ``structured_outputs``
    ``structure``; a ``None`` there is no output and stays ``None`` (as TF's ConcreteFunction packs them).
    Where the ``None``s are is found once here, not on every call."""
    if isinstance(structure, tf.Tensor):
        return _first
    flat = _flat_packer(structure)
    if flat is not None:
        return flat
    holes = [x is None for x in tf.nest.flatten(structure, expand_composites=True)]
    if not any(holes):
        return lambda outs: tf.nest.pack_sequence_as(structure, list(outs), expand_composites=True)

    def pack(outs):
        values = iter(outs)
        return tf.nest.pack_sequence_as(structure, [None if hole else next(values) for hole in holes],
                                        expand_composites=True)
    return pack


def _first(outs):
    return outs[0]


def _flat_packer(structure):
    """The packer of a plain tuple, list or dict of tensors (what ``tf.nest.pack_sequence_as`` builds for
    it, without walking the structure per call), or None for any other structure."""
    if type(structure) not in (tuple, list, dict) or not structure:
        return None
    values = list(structure.values()) if type(structure) is dict else structure
    if not all(isinstance(v, tf.Tensor) for v in values):
        return None
    if type(structure) is tuple:
        return tuple
    if type(structure) is list:
        return list
    try:
        order = sorted(structure)  # tf.nest flattens a dict in sorted key order and packs it in its own order
    except TypeError:
        return None
    at = [(key, order.index(key)) for key in structure]
    return lambda outs: {key: outs[k] for key, k in at}


def pack_outputs(structure, outs):
    """``outs`` packed in ``structure`` (``output_packer``)."""
    return output_packer(structure)(outs)


def live_variables(cf) -> list:
    """``cf.variables`` less those already freed. A function holds its variables weakly: a loaded
    SavedModel's signature outlives the loaded object's variables (their resources live on in the captured
    handles), and ``cf.variables`` then raises."""
    try:
        return list(cf.variables)
    except AssertionError:  # "Called a function referencing variables which have been deleted"
        refs = getattr(cf.graph, "_weak_variables", ())
        return [v for v in (r() for r in refs) if v is not None]


def data_input_specs(cf) -> list:
    """The spec of each data input of ``cf`` (its graph inputs less the captures): a ``tf.TensorSpec``, or
    for a variable passed as an argument (a resource placeholder) the ``tf.VariableSpec`` it was traced with."""
    graph = cf.graph
    variable_specs, aliases = [], set()
    for s in tf.nest.flatten(cf.structured_input_signature, expand_composites=True):
        if isinstance(s, resource_variable_ops.VariableSpec) and (s.alias_id is None or s.alias_id not in aliases):
            aliases.add(s.alias_id)  # a variable passed twice is one input
            variable_specs.append(s)
    variable_specs = iter(variable_specs)
    specs = []
    for t in graph.inputs[:len(graph.inputs) - len(graph.captures)]:
        spec = next(variable_specs, None) if t.dtype == tf.resource else None
        specs.append(spec if spec is not None else tf.TensorSpec(t.shape, t.dtype))
    return specs


class GraphImporter:
    """Imports a rewritten GraphDef of ``cf`` into the graph being traced, bound to ``cf``'s live
    variables (docs/design.md §5); ``importer(flat_inputs, extra_map)`` returns the flat outputs.
    ``flat_inputs`` are tensors, or variables for variable arguments; ``extra_map`` maps more tensor
    names (a kernel path Const, say) to tensors of the traced graph.

    Only placeholders the rewritten graph still has are fed: a captured eager tensor small enough for
    TF to trace as a ``Const`` may have been copied into a cluster (its node is gone), and an argument
    nothing reads may have been removed with the nodes that read it."""

    def __init__(self, cf, graph_def):
        graph = cf.graph
        n_data = len(graph.inputs) - len(graph.captures)
        present = {n.name for n in graph_def.node}
        self.data = [(k, t.name) for k, t in enumerate(graph.inputs[:n_data]) if t.op.name in present]
        self.captures = [(external, internal) for external, internal in graph.captures
                         if internal.op.name in present]
        self.variables = live_variables(cf)
        self.fetch_names = [t.name for t in graph.outputs]
        self.targets = [op.name for op in graph.control_outputs]
        self.graph_def = graph_def
        # Functions the passes wrote (graph_passes/loop_reads.py's loop bodies) that TensorFlow has not seen:
        # importing adds them to the graph, but the runtime finds a loop's body in the eager context.
        ctx = context.context()
        for fdef in graph_def.library.function:
            if not ctx.has_function(fdef.signature.name):
                ctx.add_function_def(fdef)

    def __call__(self, flat, extra_map=None) -> list:
        fg = tf.compat.v1.get_default_graph()
        input_map = {}
        for k, name in self.data:
            x = flat[k]
            if isinstance(x, tf.Variable):  # traced from a VariableSpec: its handle lives in the outer graph
                resource_variable_ops.variable_accessed(x)
                x = fg.capture(x.handle)
            input_map[name] = x
        for external, internal in self.captures:
            input_map[internal.name] = fg.capture(external)
        for v in self.variables:
            resource_variable_ops.variable_accessed(v)
        input_map.update(extra_map or {})
        results = tf.graph_util.import_graph_def(self.graph_def, input_map=input_map,
                                                 return_elements=self.fetch_names + self.targets, name="")
        outs = list(results[:len(self.fetch_names)])
        ops = results[len(self.fetch_names):]
        if ops:
            with tf.control_dependencies(ops):
                outs = [tf.identity(o) for o in outs]
        return outs


def _launch_result_assign(nodes: dict, name: str, launch_name: str, variable):
    """(target, launch output index) when ``node`` assigns a launch result to a variable (``variable`` maps
    its handle tensor to ("var", v) or ("argvar", argument index)) and waits on nothing but reads; else None."""
    node = nodes.get(name)
    if node is None or node.op != "AssignVariableOp" or len(node.input) < 2:
        return None
    handle, value, *controls = node.input
    value = parse_input(value)
    if value.node != launch_name or value.control or not all(
            is_control(c) and _harmless(nodes, node_name(c), launch_name) for c in controls):
        return None
    target = variable(handle, node.attr["dtype"].type)
    return None if target is None else (target, value.output)


def _same_target(a: tuple, b: tuple) -> bool:
    """Whether two assign targets may be the same variable (an argument may be a captured variable)."""
    if a[0] != b[0]:
        return True
    return a[1] is b[1] if a[0] == "var" else a[1] == b[1]


class _Sources:
    """Where a launch input comes from: the function's signature says which placeholders are arguments
    and which captures, and a variable's value arrives through a ``ReadVariableOp`` of its handle."""

    def __init__(self, cf, nodes: dict):
        graph = cf.graph
        self.nodes = nodes
        self.data = {t.op.name: k for k, t in enumerate(graph.inputs[:len(graph.inputs) - len(graph.captures)])}
        self.resource_data = {t.op.name for t in graph.inputs[:len(self.data)] if t.dtype == tf.resource}
        self.captured = {internal.op.name: (external, internal.dtype == tf.resource)
                         for external, internal in graph.captures}
        self.variables = {id(v.handle): v for v in live_variables(cf)}
        self.handles: dict[str, CapturedHandle] = {}

    def of(self, tensor: str):
        """(kind, what) for ``EagerStep`` (an argument, a captured value, a variable), or None."""
        name = node_name(tensor)
        if name in self.data:
            return ("arg", self.data[name])
        if name in self.captured:
            external, resource = self.captured[name]
            return None if resource else ("value", external)  # a captured eager tensor: constant
        node = self.nodes.get(name)
        if node is not None and node.op == "ReadVariableOp":
            return self.variable(node.input[0], node.attr["dtype"].type)
        return None

    def variable(self, handle: str, dtype: int):
        """("var", captured variable) or ("argvar", index of a variable argument) for a handle tensor of
        a variable of ``dtype``; a captured handle whose variable is gone is read by handle."""
        name = node_name(handle)
        if name in self.resource_data:
            return ("argvar", self.data[name])
        if name not in self.captured or not self.captured[name][1]:
            return None
        external = self.captured[name][0]
        var = self.variables.get(id(external))
        if var is None:
            var = self.handles.setdefault(name, CapturedHandle(external, tf.dtypes.as_dtype(dtype)))
        return ("var", var)


def _eager_launch(record: LaunchRecord) -> EagerLaunch:
    """The eager op of a launch, from what the build decided for it (``record.decided``)."""
    attrs: Mapping[str, Any] = record.decided.attrs  # name -> AttrValue
    extra = {key: list(attrs[key].list.i) for key in ("batch_tiles", "batched_args", "batched_results")
             if key in attrs}
    if "kernel_hashes" in attrs:
        extra["kernel_hashes"] = [h.decode() for h in attrs["kernel_hashes"].list.s]
    # The cluster's own graph goes with the op only where a tape or a graph records it, for its gradient.
    recorded = {key: attrs[key].s for key in gradient.GRADIENT_ATTRS if key in attrs}
    return EagerLaunch(
        tf.constant(record.decided.kernel_path or ""),
        tin=[tf.dtypes.as_dtype(t) for t in attrs["Tin"].list.type],
        tout=[tf.dtypes.as_dtype(t) for t in attrs["Tout"].list.type],
        output_shapes=[tf.TensorShape(s) for s in attrs["output_shapes"].list.shape],
        cluster=attrs["cluster"].s.decode(), kernel_hash=attrs["kernel_hash"].s.decode(), extra=extra,
        recorded=recorded)


_PURE_OPS = frozenset({"ReadVariableOp", "NoOp", "Identity", "IdentityN", "Placeholder", "Const"})


def _harmless(nodes: dict, name: str, launch_name: str, done: frozenset | set = frozenset(),
              memo: dict | None = None) -> bool:
    """True when node ``name`` has no effect an eager step leaves out: it is the launch itself, one of
    ``done`` (assigns the step runs after the launch), or a read, NoOp, Identity(N), placeholder or
    constant whose inputs (data and control) are all harmless. Such nodes are what tf.function and
    nested function calls add around a launch to order outputs after reads, calls and updates; a read
    ordered after an assign is not harmless (the assign is not, as an input of the launch's)."""
    memo = {} if memo is None else memo
    if name in memo:
        return memo[name]
    memo[name] = False  # a cycle (impossible in a graph) or unfinished: not harmless
    node = nodes.get(name)
    ok = node is not None and (name == launch_name or name in done or (node.op in _PURE_OPS and all(
        _harmless(nodes, node_name(i), launch_name, done, memo) for i in node.input)))
    memo[name] = ok
    return ok


def _launch_output(nodes: dict, tensor: str, launch_name: str, tensor_map: dict,
                   done: frozenset | set = frozenset()) -> int | None:
    """The launch output that graph tensor ``tensor`` is, through the Identity / IdentityN chains that
    tf.function and nested calls put on outputs (their control inputs harmless, ``done`` counting as
    such); else None."""
    for _ in range(64):
        ref = parse_tensor(tensor_map.get(tensor, tensor))
        if ref.node == launch_name:
            return ref.output
        node = nodes.get(ref.node)
        if node is None or node.op not in ("Identity", "IdentityN"):
            return None
        if not all(_harmless(nodes, node_name(c), launch_name, done) for c in control_inputs(node.input)):
            return None
        data = data_inputs(node.input)
        tensor = canonical(data[ref.output] if node.op == "IdentityN" else data[0])
    return None


def _dump_graph(flags: Flags, cf, analysis) -> None:
    from pathlib import Path

    path = Path(flags.dump_to)
    path.mkdir(parents=True, exist_ok=True)
    name = cf.name.decode() if isinstance(cf.name, bytes) else str(cf.name)
    gd = tf.compat.v1.GraphDef()
    gd.CopyFrom(analysis.graph_def)
    for node in gd.node:
        cluster = analysis.cluster_of(node.name)
        if cluster:
            node.attr["_XlaCluster"].s = cluster.encode()
    (path / f"{name}.clustered_graph.pbtxt").write_text(str(gd))
