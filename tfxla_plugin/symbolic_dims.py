"""Compiling a function once for every value of its unknown dims (``input_signature=[None, None]``).

The unknown dims of the data inputs become symbols, one per dim position (every input's unknown dim 0 is
``s0``, every unknown dim 1 is ``s1``, ...: inputs that share a position must agree at run time, which the
kernel checks, naming the input). The function is clustered at every probe point
(``backends.codegen.symbolic``: a grid of two values per symbol plus two verify points); a cluster must
come out the same at all of them. Each cluster is lowered, optimized and generated at every point in
probe mode, and ``symbolic.generalize`` turns the sources into one kernel whose loops, offsets and
output dims are expressions of the symbols, checked at the verify points; the C compiler then runs
once per cluster. A cluster that does not generalize (its source changes with the size in a way no
polynomial gives, a symbol is folded into a float that is not the size or its reciprocal, ...) raises
``NotSymbolic`` naming the cluster and the first differing line: the caller compiles per input shape.

oneDNN is not used by symbolic kernels (its primitives are built in ``tfxla_init`` for fixed sizes): a
dot is a generated loop. Loops run on the calling thread (the symbols are thread-local). Only the CPU
backend generates symbolic kernels.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import backends
from backends import cache_usage
from backends.codegen import symbolic
from backends.codegen.symbolic import NotPolynomial, NotSymbolic, Point, SymbolicAbi
from graph_passes.cluster import ClusterOptions
from graph_passes.pipeline import analyze, control, drop_clusters, resource_shapes_of, rewrite
from graph_passes.rewrite import LaunchSpec, standard_attrs
from hlo.lowering import lower_graph
from hlo.opcodes import Opcode as O
from tfxla_plugin import gradient
from tfxla_plugin.cluster_compiler import CompiledCluster, sha256_file
from tfxla_plugin.errors import UnsupportedGraphError
from tfxla_plugin.flags import Flags

log = logging.getLogger("tfxla_plugin")
# Symbol j takes LEVELS[k] + 2j on the grid of degree k (its first k + 1 levels); a cluster is fitted with
# degree 1 first, then 2 (``NotPolynomial``, at most MAX_SQUARED symbols: 3**n probes).
LEVELS = (5, 12, 9)
MAX_SQUARED = 2
VERIFY = ((19, 4), (10, -1), (67, 6))  # verify point v: symbol j is v[0] + v[1]*j (off the grid, another order, and
# one well above it with odd residues: a decision that flips between the small probes and large sizes)



@dataclass
class SymbolicResult:
    analysis: object = field(repr=False)  # the ClusteringResult at the first grid point
    compiled: list[CompiledCluster] = field(repr=False)
    rewritten: object = field(repr=False)  # RewriteResult
    symbols: list[str]  # "s0 = dim 0", ...
    notes: dict[str, str] = field(default_factory=dict)


def unknown_inputs(cf) -> dict[str, list[int | None]]:
    """Data inputs with an unknown dim: name -> dims (None where unknown); NotSymbolic for an unknown rank."""
    graph = cf.graph
    out = {}
    for t in graph.inputs[:len(graph.inputs) - len(graph.captures)]:
        if t.shape.rank is None:
            raise NotSymbolic(f"input {t.op.name} has an unknown rank")
        dims = t.shape.as_list()
        if any(d is None for d in dims):
            out[t.op.name] = dims
    return out


def probe_points(n: int, degree: int = 1) -> tuple[list[Point], list[Point]]:
    """The grid fitting polynomials of ``degree`` in ``n`` symbols, and the verify points."""
    levels = [[v + 2 * j for v in LEVELS[:degree + 1]] for j in range(n)]
    return symbolic.grid(levels), [tuple(a + b * j for j in range(n)) for a, b in VERIFY]


@dataclass
class _Probe:
    source: str
    slots: list[int]
    signature: dict
    module: object  # the lowered module
    optimized: object
    generated: object
    graph: bytes  # the cluster's GraphDef at this probe


def _probe(spec, flags: Flags, sources, name: str) -> _Probe:
    backend = backends.get(flags.backend)
    module = lower_graph(spec.graph_def, spec.input_specs(), spec.output_tensors(), name=name, sources=sources,
                         library=spec.graph_def.library)
    pipeline = backend.pipeline(disabled=backend.symbolic.PROBE_DISABLED)
    optimized = pipeline.run(module)[0] if flags.optimize else pipeline.prepare(module)
    generated = backend.symbolic.generate_probe(optimized)
    return _Probe(generated.source, generated.slots, generated.signature, module, optimized, generated,
                  spec.graph_def.SerializeToString())


def _fit_degrees(n: int, probe, names: list[str]) -> tuple[str, dict, _Probe]:
    """The symbolic source and signature of a cluster (``probe(point)`` generates it there) and its first
    probe: fitted with degree 1, then (``NotPolynomial``, at most ``MAX_SQUARED`` symbols) degree 2."""
    for degree in (1, 2):
        grid, verify = probe_points(n, degree)
        probes = {p: probe(p) for p in grid + verify}
        try:
            source, sig = _fit_cluster(grid, verify, probes, names)
            return source, sig, probes[grid[0]]
        except NotPolynomial:
            if degree == 2 or n > MAX_SQUARED:
                raise
    raise AssertionError("unreachable")


def _fit_cluster(grid: list[Point], verify: list[Point], probes: dict[Point, _Probe],
                 names: list[str]) -> tuple[str, dict]:
    ffts = {tuple(tuple(i.attr("fft_length")) for _, i in probes[p].optimized.instructions() if i.opcode is O.FFT)
            for p in probes}
    if len(ffts) > 1:  # its algorithm (radix or Bluestein's) is chosen per length, at generation
        raise NotSymbolic("an FFT's length depends on a symbolic dim")
    template = symbolic.generalize(grid, [probes[p].source for p in grid])
    for v in verify:
        template.check(v, probes[v].source)
    everything = grid + verify

    def dims(key: str):
        fitted = symbolic.fit_dims(grid, [[e["dims"] for e in probes[p].signature[key]] for p in grid], key[:-1])
        for v in verify:
            got = [e["dims"] for e in probes[v].signature[key]]
            if got != [[poly(v) for poly in shape] for shape in fitted]:
                raise NotPolynomial(f"the {key} at the verify point {v} are {got}, not what the probes give")
        return fitted

    inputs, outputs = dims("inputs"), dims("outputs")
    if len({len(probes[p].slots) for p in everything}) != 1:
        raise NotSymbolic("the number of scratch buffers changes with the dims")
    slots = symbolic.fit_dims(grid, [[probes[p].slots] for p in grid], "scratch")[0] if probes[grid[0]].slots else []
    for v in verify:
        if [s(v) for s in slots] != probes[v].slots:
            raise NotPolynomial(f"the scratch sizes at the verify point {v} are not what the probes give")
    first = probes[grid[0]]
    labels = [f"input {p.parameter_number} (%%{p.name})" for p in first.optimized.entry.parameters]
    used = template.symbols() | {i for polys in inputs + outputs + [slots] for p in polys for i in p.symbols}
    abi = SymbolicAbi(names, symbolic.bind_symbols(inputs, len(names), used), inputs, outputs, slots, labels)
    sig = symbolic.signature(first.signature["module"], abi, first.signature["inputs"], first.signature["outputs"])
    return symbolic.assemble(template.text(), abi, sig), sig


def _compile(name: str, source: str, sig: dict, first: _Probe, flags: Flags, start: float) -> CompiledCluster:
    from backends.toolchain import CompileError

    try:
        kernel = backends.get(flags.backend).symbolic.compile_source(source, sig, first.generated, first.optimized,
                                                                     flags.cache_dir, name)
    except CompileError as e:
        raise NotSymbolic(f"the symbolic source does not compile: {str(e).splitlines()[0]}") from e
    if not kernel.cache_hit:  # the cache grew: keep it under its limit (never evicting this kernel)
        cache_usage.evict(flags.cache_dir, flags.cache_max_bytes, keep={Path(kernel.path).name[:64]})
    log.info("compiled cluster %s with symbolic dims (%s): %.3f s, kernel cache %s", name,
             ", ".join(sig["symbols"]), time.perf_counter() - start, "hit" if kernel.cache_hit else "miss")
    return CompiledCluster(name, first.module, first.optimized, kernel, str(kernel.path), sha256_file(kernel.path),
                           time.perf_counter() - start, kernel.cache_hit)


def compile_symbolic(cf, *, must_compile: bool, flags: Flags, all_or_nothing: bool = True) -> SymbolicResult:
    """Cluster ``cf`` (traced with unknown dims) and compile every cluster once for all their values.

    ``all_or_nothing``: a cluster that does not generalize raises ``NotSymbolic`` (before anything is
    compiled); otherwise it stays in TensorFlow with one WARNING naming it and why."""
    if not flags.symbolic_dims:
        raise NotSymbolic("--symbolic_dims=false")
    if backends.get(flags.backend).symbolic is None:
        raise NotSymbolic(f"the {flags.backend} backend does not generate symbolic dims")
    unknown = unknown_inputs(cf)
    if not unknown:
        raise NotSymbolic("no input has an unknown dim")
    positions = sorted({d for dims in unknown.values() for d, x in enumerate(dims) if x is None})
    symbol_of = {d: j for j, d in enumerate(positions)}
    names = [f"s{j}" for j in range(len(positions))]
    grid = probe_points(len(positions))[0]
    options = ClusterOptions(min_cluster_size=1 if must_compile else flags.min_cluster_size,
                             max_cluster_size=flags.max_cluster_size or None,
                             fuel=None if flags.clustering_fuel < 0 else flags.clustering_fuel,
                             must_compile=must_compile)
    from hlo.lowering.tf_function import python_sources

    graph = cf.graph
    fetches = [t.name for t in graph.outputs] + [control(op.name) for op in graph.control_outputs]
    graph_def, resources, py_sources = graph.as_graph_def(), resource_shapes_of(cf), python_sources(graph)
    analyses: dict[Point, object] = {}

    def analysis(p: Point):  # the function clustered with its unknown dims at ``p``
        if p not in analyses:
            shapes = {n: tuple(p[symbol_of[d]] if x is None else x for d, x in enumerate(dims))
                      for n, dims in unknown.items()}
            result = analyze(graph_def, fetches, options, resource_shapes=resources, input_shapes=shapes)
            result.sources = result.node_sources(py_sources)
            analyses[p] = result
        return analyses[p]

    base = analysis(grid[0])
    if must_compile and base.unsupported():
        raise UnsupportedGraphError.from_nodes(cf, base, base.unsupported())
    function_name = cf.name.decode() if isinstance(cf.name, bytes) else str(cf.name)
    notes: dict[str, str] = {}
    compiled: list[CompiledCluster] = []
    fitted = []
    for spec in base.clusters:
        start = time.perf_counter()
        probes: dict[Point, _Probe] = {}

        def probe(p: Point, spec=spec, probes=probes) -> _Probe:
            if p not in probes:
                c = {c.name: c for c in analysis(p).clusters}.get(spec.name)
                if c is None or c.node_names != spec.node_names:
                    raise NotSymbolic(f"the clustering differs between probe sizes ({grid[0]} and {p})")
                probes[p] = _probe(c, flags, base.sources, spec.name)
            return probes[p]

        try:
            fitted.append((spec, *_fit_degrees(len(names), probe, names), start,
                           len({q.graph for q in probes.values()}) == 1))
        except NotSymbolic as e:
            notes[spec.name] = f"not symbolic: {e}"
    if notes and (must_compile or all_or_nothing):
        raise NotSymbolic("; ".join(f"cluster {n} is {why}" for n, why in notes.items()))
    for name, why in notes.items():
        log.warning("%s: cluster %s stays in TensorFlow: %s", function_name, name, why)
    launches = {}
    for spec, source, sig, first, start, one_graph in fitted:
        c = _compile(spec.name, source, sig, first, flags, start)
        compiled.append(c)
        shapes = [[None if e < 0 else e for e in o["dims"]] for o in sig["outputs"]]
        # No size baked into the cluster graph (the probes' graphs agree): its gradient holds at any size.
        extra = gradient.cluster_attrs(spec) if one_graph else {}
        launches[spec.name] = LaunchSpec(standard_attrs(spec, kernel_hash=c.kernel_hash, output_shapes=shapes,
                                                        **extra), kernel_path=c.kernel_path)
    drop_clusters(base, notes)
    rewritten = rewrite(base, lambda spec: launches[spec.name])
    symbols = [f"s{j} = dim {d}" for j, d in enumerate(positions)]
    return SymbolicResult(base, compiled, rewritten, symbols, notes)
