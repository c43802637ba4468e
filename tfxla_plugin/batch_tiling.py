"""Batch-polymorphic compilation: one set of kernels serves every batch size.

A function traced with a ``None`` leading dim (a SavedModel serving signature, or an
``input_signature`` with ``None`` batch) is analysed at the probe batch sizes 2 and 3 and at each tile
size. Every cluster is lowered at both probes and ``hlo.analysis.batch_polymorphism`` proves that it
tiles over the batch (the batch size is only a size, rows are independent); the cluster is then
compiled once per tile size (default 1 and 8) and its ``TfxlaLaunch`` node runs any batch as full
tiles plus one padded tile (``ops/tfxla_launch.cc``, ``PlanTiles``). The rewritten graph keeps its
``None`` batch dims, so nothing recompiles when the batch size changes.

A cluster that is not batch-polymorphic (it reduces over the batch, divides by the batch size, ...)
stays in TensorFlow under ``jit_compile="auto"`` (its reason is in ``notes`` and in one WARNING), and is
a ``NotTileable`` error under must-compile or ``all_or_nothing`` (``tfxla_plugin.function`` then
compiles per input shape instead).
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from graph_passes.cluster import ClusterOptions
from graph_passes.pipeline import analyze_function, batched_inputs, drop_clusters, rewrite
from graph_passes.rewrite import LaunchSpec, standard_attrs
from hlo.analysis import NotBatchPolymorphic, batch_polymorphism
from hlo.lowering import lower_graph
from tfxla_plugin import gradient
from tfxla_plugin.cluster_compiler import CompiledCluster, compile_cluster
from tfxla_plugin.errors import UnsupportedGraphError
from tfxla_plugin.flags import Flags

log = logging.getLogger("tfxla_plugin")
PROBES = (2, 3)
DEFAULT_TILES = (1, 8)


class NotTileable(ValueError):
    """A must-compile function whose clusters cannot be tiled over the batch dimension."""


@dataclass
class TiledCluster:
    name: str
    tiles: tuple[int, ...]
    kernels: list[CompiledCluster]  # one per tile, same order
    batched_args: tuple[bool, ...]
    batched_results: tuple[bool, ...]

    @property
    def largest(self) -> CompiledCluster:
        return self.kernels[max(range(len(self.tiles)), key=self.tiles.__getitem__)]


@dataclass
class TilingResult:
    analysis: object  # the ClusteringResult at probe batch 2, restricted to the tiled clusters
    tiled: list[TiledCluster]
    rewritten: object  # RewriteResult
    notes: dict[str, str] = field(default_factory=dict)  # cluster name -> why it stayed in TensorFlow


def _batched_flags(specs_a, specs_b, ba: int, bb: int, what: str, cluster: str) -> tuple[bool, ...]:
    flags = []
    for pa, pb in zip(specs_a, specs_b):
        da, db = tuple(pa.shape), tuple(pb.shape)
        if da == db:
            flags.append(False)
        elif len(da) == len(db) and da and da[0] == ba and db[0] == bb and da[1:] == db[1:]:
            flags.append(True)
        else:
            raise NotBatchPolymorphic(f"{cluster}: {what} {pa.tensor} has shape {list(da)} at batch {ba} and "
                                      f"{list(db)} at batch {bb}: only a leading batch dim may vary")
    return tuple(flags)


def _check_polymorphic(name: str, by_size: dict) -> tuple[tuple[bool, ...], tuple[bool, ...]]:
    (ba, a), (bb, b) = [(p, by_size[p][name]) for p in PROBES]
    args = _batched_flags(a.inputs, b.inputs, ba, bb, "input", name)
    results = _batched_flags(a.outputs, b.outputs, ba, bb, "output", name)
    if not any(args):
        raise NotBatchPolymorphic(f"{name}: no input carries the batch dimension")
    ma = lower_graph(a.graph_def, a.input_specs(), a.output_tensors(), name=name)
    mb = lower_graph(b.graph_def, b.input_specs(), b.output_tensors(), name=name)
    proof = batch_polymorphism(ma, mb, ba, bb, args)
    if proof.outputs != results:
        raise NotBatchPolymorphic(f"{name}: the outputs' batch dims in HLO {proof.outputs} disagree with the "
                                  f"graph's {results}")
    return args, results


def _input_dims(cf) -> str:
    """The traced function's data inputs as ``name [None, 5]`` text, for messages."""
    graph = cf.graph
    inputs = graph.inputs[:len(graph.inputs) - len(graph.captures)]
    return ", ".join(f"{t.op.name} {t.shape.as_list() if t.shape.rank is not None else 'of unknown rank'}"
                     for t in inputs) or "none"


def symbolic_dims_needed(cf) -> str:
    """The data inputs of ``cf`` (traced from TensorSpecs) with an unknown dim other than the leading one, or
    of unknown rank, named with their dims, and why batch tiles cannot serve them; "" if none. Symbolic dims
    (``symbolic_dims``) may still: this is the reason given when they do not either."""
    graph = cf.graph
    inputs = graph.inputs[:len(graph.inputs) - len(graph.captures)]
    unknown = [f"{t.op.name} {t.shape.as_list() if t.shape.rank is not None else '(unknown rank)'}" for t in inputs
               if t.shape.rank is None or any(d is None for d in t.shape.as_list()[1:])]
    if not unknown:
        return ""
    return (f"input(s) {', '.join(unknown)} have unknown dims that no kernel serves: batch tiles need a None "
            "leading dim alone, symbolic dims a known rank and clusters whose sizes generalize (the INFO log says "
            "why one did not)")


def compile_tiled(cf, *, must_compile: bool, flags: Flags, tiles=DEFAULT_TILES,
                  progress=None, all_or_nothing: bool = False) -> TilingResult:
    """Cluster ``cf`` (traced with ``None`` batch dims), prove and compile every cluster per tile size.

    ``progress(cluster_name, tile, compiled_cluster)`` is called after each kernel is compiled.
    ``all_or_nothing``: a cluster that does not tile raises ``NotTileable`` (before anything is compiled)
    instead of staying in TensorFlow.
    """
    if not batched_inputs(cf):
        raise NotTileable("batch tiling needs an input whose only unknown dim is the leading (batch) one; "
                          f"the inputs are {_input_dims(cf)}")
    tiles = tuple(sorted(set(int(t) for t in tiles)))
    if not tiles or tiles[0] < 1:
        raise ValueError(f"batch tiles must be positive integers, got {tiles}")
    options = ClusterOptions(min_cluster_size=1 if must_compile else flags.min_cluster_size,
                             max_cluster_size=flags.max_cluster_size or None,
                             fuel=None if flags.clustering_fuel < 0 else flags.clustering_fuel,
                             must_compile=must_compile)
    sizes = sorted(set(PROBES) | set(tiles))
    analyses = {b: analyze_function(cf, options, batch_size=b) for b in sizes}
    base = analyses[PROBES[0]]
    if must_compile and base.unsupported():
        raise UnsupportedGraphError.from_nodes(cf, base, base.unsupported())
    by_size = {b: {c.name: c for c in a.clusters} for b, a in analyses.items()}
    notes: dict[str, str] = {}
    proven: dict[str, tuple] = {}
    for spec in base.clusters:
        same = all(spec.name in by_size[b] and by_size[b][spec.name].node_names == spec.node_names for b in sizes)
        try:
            if not same:
                raise NotBatchPolymorphic(f"{spec.name}: the clustering differs between batch sizes")
            proven[spec.name] = _check_polymorphic(spec.name, by_size)
        except NotBatchPolymorphic as e:
            notes[spec.name] = f"not batch-polymorphic: {e}"
    if (must_compile or all_or_nothing) and notes:
        raise NotTileable("cannot compile for every batch size: "
                          + "; ".join(f"cluster {name} is {why}" for name, why in notes.items()))
    n_nodes = {spec.name: len(spec.node_names) for spec in base.clusters}
    function_name = cf.name.decode() if isinstance(cf.name, bytes) else str(cf.name)
    for name, why in notes.items():
        log.warning("%s: cluster %s (%d nodes) stays in TensorFlow: %s", function_name, name, n_nodes[name], why)

    jobs = [(name, t) for name in proven for t in tiles]

    def compile_one(job) -> CompiledCluster:
        name, t = job
        spec = by_size[t][name]
        compiled = compile_cluster(f"{name}_b{t}", spec.graph_def, spec.input_specs(), spec.output_tensors(), flags,
                                   sources=base.sources, library=spec.graph_def.library, concurrent=workers)
        if progress is not None:
            progress(name, t, compiled)
        return compiled

    workers = min(len(jobs), os.cpu_count() or 1)
    if workers > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            compiled = list(pool.map(compile_one, jobs))
    else:
        compiled = [compile_one(j) for j in jobs]
    kernels = dict(zip(jobs, compiled))
    tiled = [TiledCluster(name, tiles, [kernels[(name, t)] for t in tiles], *proven[name]) for name in proven]
    by_name = {t.name: t for t in tiled}

    def launch(spec) -> LaunchSpec:
        t = by_name[spec.name]
        shapes = [(None, *p.shape[1:]) if b else tuple(p.shape) for p, b in zip(spec.outputs, t.batched_results)]
        graphs = {by_size[p][spec.name].graph_def.SerializeToString() for p in PROBES}
        # No batch size baked into the cluster graph (the probes' graphs agree): its gradient holds at any batch.
        extra = gradient.cluster_attrs(spec) if len(graphs) == 1 else {}
        attrs = standard_attrs(spec, kernel_hash=t.kernels[0].kernel_hash, output_shapes=shapes,
                               batch_tiles=list(tiles), batched_args=[int(b) for b in t.batched_args],
                               batched_results=[int(b) for b in t.batched_results],
                               kernel_hashes=[k.kernel_hash for k in t.kernels], **extra)
        return LaunchSpec(attrs, kernel_path=[k.kernel_path for k in t.kernels])

    drop_clusters(base, notes)
    rewritten = rewrite(base, launch)
    return TilingResult(base, tiled, rewritten, notes)
