"""Wrapping an existing SavedModel: compile its signatures and save a SavedModel that runs the kernels.

``wrap(src, dst)`` loads ``src``, and for every selected signature clusters and compiles it
(``batch_tiling`` when the signature has ``None`` batch dims: one set of kernels for every batch
size), rewrites it so each cluster is one ``TfxlaLaunch`` node, and saves ``dst`` with:

* the same signatures: input names, dtypes and shapes (``None`` dims kept) and output keys;
* the variables as variables (or, with ``freeze=True``, folded into the kernels as constants);
* per kernel three Assets: the shared object ``k_<hash>.so``, its source (``k_<hash>`` plus the
  backend's ``source_suffix``: ``.c``, or for ``backend="cuda"`` the host launcher's ``.cu``) and its
  optimized HLO ``k_<hash>.hlo.txt``, plus ``tfxla_manifest.json`` (``read_manifest``) with the backend,
  their sha256 hashes, the command that rebuilds each (``rebuild_argv``), the CPU features the objects
  were built for, and each signature's clustering.

The launch nodes carry the same hashes, so the op never loads an object whose hash does not match,
and what it needs to rebuild one (the backend's ``rebuild_command``: an argv, run without a shell).
A kernel that does not fit the machine loading it (a changed or missing ``.so``, a CPU lacking a
feature it was built for) is rebuilt by the op from its source, if the source has its recorded hash
(``ops/rebuild.h``). The wrapped model loads with ``tf.saved_model.load(dst)`` after ``import tfxla_plugin``, from wherever it
is moved; a CUDA model needs an NVIDIA GPU to run (without one, calling it raises the kernel's clear
"no usable CUDA device" error).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import tensorflow as tf

from graph_passes.launch_reads import fold_launch_reads
from graph_passes.pipeline import batched_inputs, summary_json
from tfxla_plugin.batch_tiling import symbolic_dims_needed
import backends
from backends import Backend
from tfxla_plugin._version import __version__
from tfxla_plugin.cluster_compiler import sha256_file
from tfxla_plugin.compiled_graph import CompiledGraph, GraphImporter
from tfxla_plugin.flags import Flags

log = logging.getLogger("tfxla_plugin")
MANIFEST = "tfxla_manifest.json"
FORMAT = "tfxla-wrapped-savedmodel/1"


def read_manifest(directory: str | Path) -> dict | None:
    """The manifest of a wrapped SavedModel (see the module docstring), or None for a plain one."""
    path = Path(directory) / "assets" / MANIFEST
    if not path.is_file():
        return None
    return json.loads(path.read_text())


@dataclass
class SignatureReport:
    name: str
    clusters: int
    kernels: int
    nodes_clustered: int
    nodes_total: int
    batch_tiles: tuple[int, ...]
    compile_seconds: float
    notes: dict[str, str] = field(default_factory=dict)
    no_cluster_reason: str = ""  # set when the signature compiled no cluster: why

    @property
    def coverage(self) -> float:
        return 100.0 * self.nodes_clustered / self.nodes_total if self.nodes_total else 0.0


@dataclass
class WrapReport:
    source: str
    destination: str
    signatures: list[SignatureReport]
    seconds: float

    def __str__(self) -> str:
        lines = [f"wrapped {self.source} -> {self.destination} in {self.seconds:.1f} s"]
        for s in self.signatures:
            tiles = f", batch tiles {list(s.batch_tiles)}" if s.batch_tiles else ", static shapes"
            lines.append(f"  {s.name}: {s.clusters} cluster(s), {s.kernels} kernel(s), {s.nodes_clustered}/"
                         f"{s.nodes_total} nodes clustered ({s.coverage:.1f}%){tiles}, compile {s.compile_seconds:.1f} s")
            lines.extend(f"    {name} stays in TensorFlow: {why}" for name, why in s.notes.items())
            if s.no_cluster_reason:
                lines.append(f"    no cluster compiled: {s.no_cluster_reason}")
        return "\n".join(lines)

    @property
    def compiled_nothing(self) -> bool:
        """No signature compiled any cluster: the wrapped model runs entirely in TensorFlow."""
        return all(s.clusters == 0 for s in self.signatures)


def _spec_json(spec: tf.TensorSpec) -> dict:
    return {"dtype": spec.dtype.name, "shape": spec.shape.as_list() if spec.shape.rank is not None else None}


def _kernel_id(kernel_hash: str) -> str:
    return f"k_{kernel_hash[:16]}"


def _kernel_files(compiled, backend: Backend) -> dict:
    """The kernel's files, hashes and rebuild command (``compiled`` is a CompiledCluster)."""
    so = Path(compiled.kernel_path)
    kid = _kernel_id(compiled.kernel_hash)
    return {"id": kid, "so_path": so, "source": compiled.c_source, "source_name": f"{kid}{backend.source_suffix}",
            "hlo": compiled.optimized.to_text(), "so_sha256": compiled.kernel_hash,
            "rebuild_argv": list(backend.rebuild_command(compiled.c_source)),
            "compile_seconds": round(compiled.compile_seconds, 3)}


class CompiledSignature:
    """One compiled signature: its CompiledGraph and what the saved function needs."""

    def __init__(self, name: str, cf, compiled: CompiledGraph, signature=None):
        self.name, self.cf, self.compiled = name, cf, compiled
        self.signature = signature if signature is not None else cf  # the original: input/output structure
        tiling = compiled.tiling
        if tiling is not None:
            self.kernels = {t.name: t.kernels for t in tiling.tiled}
            self.tiles = tuple(tiling.tiled[0].tiles) if tiling.tiled else ()
            self.notes = dict(tiling.notes)
        else:
            self.kernels = {spec.name: [c] for spec, c in zip(compiled.analysis.clusters, compiled.clusters)}
            self.tiles = ()
            self.notes = dict(compiled.symbolic.notes) if compiled.symbolic is not None else {}


def _compile_signature(name: str, cf, signature, *, jit_compile, flags: Flags, batch_tiles, bar) -> CompiledSignature:
    must = jit_compile is True
    batched = bool(batched_inputs(cf))  # a leading None and the other dims known: compiled per batch tile

    def progress(cluster, tile, compiled):
        bar.set_postfix_str(f"{name}/{cluster} b{tile}: {compiled.compile_seconds:.1f} s"
                            f"{' (cached)' if compiled.cache_hit else ''}")

    if batched:
        compiled = CompiledGraph.build_tiled(cf, must_compile=must, flags=flags, tiles=batch_tiles, progress=progress)
    else:
        compiled = _build_unknown_dims(cf, must, flags) if symbolic_dims_needed(cf) else None
        if compiled is None:
            compiled = CompiledGraph.build(cf, must_compile=must, flags=flags)
    return CompiledSignature(name, cf, compiled, signature)


def _build_unknown_dims(cf, must: bool, flags: Flags) -> CompiledGraph | None:
    """Kernels with symbolic dims for a signature with unknown dims other than a batch (``symbolic_dims``):
    a cluster that does not generalize stays in TensorFlow with a WARNING (an error under must-compile);
    None when nothing can be symbolic (an unknown rank): the signature is then built as it is."""
    from backends.codegen.symbolic import NotSymbolic

    try:
        return CompiledGraph.build_symbolic(cf, must_compile=must, flags=flags, all_or_nothing=must)
    except NotSymbolic as e:
        if must:
            raise
        log.warning("tfxla wrap: no symbolic dims for %s: %s", cf.name, e)
        return None


def _launch_attrs(gd, sig: CompiledSignature, files: dict[str, dict], features: Sequence[str], strip_graphs: bool,
                  backend: Backend) -> None:
    """Record in each launch node (in place) its kernels' hashes and what the op needs to rebuild them from
    their sources: the sources' hashes, the rebuild commands (a JSON argv each), the CPU features."""
    launches = {launch: cluster for cluster, launch in sig.compiled.rewritten.launch_nodes.items()}
    for node in gd.node:
        cluster = launches.get(node.name)
        if cluster is None:
            continue
        kernels = [files[k.kernel_hash] for k in sig.kernels[cluster]]
        attrs = [("kernel_hashes", [f["so_sha256"] for f in kernels]),
                 ("source_hashes", [f["source_sha256"] for f in kernels]),
                 ("rebuild_commands", [json.dumps(f["rebuild_argv"]) for f in kernels]),
                 ("cpu_features", list(features))]
        for key, values in attrs:
            node.attr[key].list.Clear()
            node.attr[key].list.s.extend(v.encode() for v in values)
        node.attr["backend"].s = backend.name.encode()
        node.attr["source_suffix"].s = backend.source_suffix.encode()
        if strip_graphs:
            for key in ("cluster_graph", "cluster_io"):
                node.attr.pop(key, None)


def launch_graph(sig: CompiledSignature, files: dict[str, dict], features: Sequence[str], backend: Backend,
                 strip_graphs: bool = False):
    """A copy of ``sig``'s rewritten GraphDef whose launch nodes record their kernels (``_launch_attrs``) and read
    their variables themselves (``graph_passes.launch_reads``)."""
    graph = sig.cf.graph
    fetches = [t.name for t in graph.outputs] + [f"^{op.name}" for op in graph.control_outputs]
    gd = tf.compat.v1.GraphDef()
    gd.CopyFrom(fold_launch_reads(sig.compiled.rewritten.graph_def, keep=fetches).graph_def)
    _launch_attrs(gd, sig, files, features, strip_graphs=strip_graphs, backend=backend)
    return gd


def asset_importer(sig: CompiledSignature, gd, assets: dict[str, tf.saved_model.Asset]):
    """A function of the flat data inputs that imports ``gd`` (``launch_graph``) into the graph being traced,
    each launch's kernel path fed from its Asset (a stack of them, one per batch tile): the path follows the
    SavedModel directory when it moves. Returns the flat outputs."""
    importer = GraphImporter(sig.cf, gd)
    nodes = {n.name: n for n in gd.node}
    path_inputs = {}  # kernel-path Const tensor -> kernel ids
    for cluster, launch in sig.compiled.rewritten.launch_nodes.items():
        tensor = nodes[launch].input[0]
        path_inputs[tensor if ":" in tensor else f"{tensor}:0"] = [_kernel_id(k.kernel_hash)
                                                                    for k in sig.kernels[cluster]]
    tiled = bool(sig.tiles)

    def run(flat):
        # an op on the Asset's path captures it (import_graph_def takes no eager tensor in input_map)
        paths = {t: tf.stack([assets[i].asset_path for i in ids]) if tiled else tf.identity(assets[ids[0]].asset_path)
                 for t, ids in path_inputs.items()}
        return importer(flat, paths)
    return run


def _serving_function(sig: CompiledSignature, run):
    """A tf.function with the signature's inputs that runs ``run`` (``asset_importer``) on them."""
    specs = tf.nest.flatten(sig.signature.structured_input_signature, expand_composites=True)
    kwargs_specs = sig.signature.structured_input_signature[1]
    structure = sig.signature.structured_outputs

    def serve(**kwargs):
        outs = run(tf.nest.flatten(kwargs, expand_composites=True))
        return tf.nest.pack_sequence_as(structure, outs, expand_composites=True)

    fn = tf.function(serve, autograph=False)
    if kwargs_specs:
        return fn.get_concrete_function(**kwargs_specs)
    return fn.get_concrete_function(*specs)


def stage_kernel(compiled, backend: Backend, staging: Path) -> dict:
    """Write the kernel of ``compiled`` (a CompiledCluster) into ``staging`` as a wrapped model stores it:
    ``k_<hash>.so``, its source ``k_<hash>.c`` (the backend's ``source_suffix``) and ``k_<hash>.hlo.txt``;
    returns its ``_kernel_files`` entry with ``source_sha256``. Files already there are written again."""
    f = _kernel_files(compiled, backend)
    so = staging / f"{f['id']}.so"
    tmp = staging / f".{f['id']}.so.tmp"  # atomic: a reader of the staged .so never sees half of it
    shutil.copyfile(f["so_path"], tmp)
    tmp.replace(so)
    (staging / f["source_name"]).write_text(f["source"])
    (staging / f"{f['id']}.hlo.txt").write_text(f["hlo"])
    f["source_sha256"] = sha256_file(staging / f["source_name"])
    if sha256_file(so) != f["so_sha256"]:
        raise RuntimeError(f"kernel {f['so_path']} changed while staging it")
    return f


def kernel_assets(files: dict[str, dict], staging: Path, pool: dict[str, tf.saved_model.Asset] | None = None
                  ) -> tuple[dict[str, tf.saved_model.Asset], list]:
    """The Assets of staged kernels: ``{kernel id: Asset of its .so}`` and the Assets of their sources and HLO.
    ``pool`` (file name -> Asset) lends the Asset of a file already there and keeps those made here."""
    pool = {} if pool is None else pool

    def asset(name: str) -> tf.saved_model.Asset:
        if name not in pool:
            pool[name] = tf.saved_model.Asset(str(staging / name))
        return pool[name]

    kernels = {f["id"]: asset(f"{f['id']}.so") for f in files.values()}
    sources = [asset(name) for f in files.values() for name in (f["source_name"], f"{f['id']}.hlo.txt")]
    return kernels, sources


def wrap(src: str | Path, dst: str | Path, *, signatures: Sequence[str] | None = None, tag_set: str = "serve",
         backend: str = backends.DEFAULT, freeze: bool = False, jit_compile="auto",
         batch_tiles: Sequence[int] = (1, 8), progress: bool = True) -> WrapReport:
    """Compile the SavedModel at ``src`` and save the wrapped model at ``dst`` (see the module docstring).

    ``signatures``: names to wrap (default all); the others are left out of ``dst``.
    ``backend``: a name in ``backends.names()``: ``"cpu"`` or ``"cuda"`` (cuda needs nvcc here and a GPU where
    it runs).
    ``jit_compile``: ``"auto"`` leaves unsupported ops in TensorFlow, ``True`` requires every node to compile.
    ``batch_tiles``: the batch sizes kernels are compiled for when a signature has a ``None`` batch dim.
    ``progress``: a progress bar on stderr, shown only when stderr is a terminal.
    """
    from tqdm.auto import tqdm

    kernel_backend = backends.get(backend)
    kernel_backend.check()  # a missing toolchain (nvcc) is an error before any work
    if jit_compile not in (True, "auto"):
        raise ValueError(f"jit_compile must be True or \"auto\", got {jit_compile!r}")
    start = time.perf_counter()
    src, dst = Path(src), Path(dst)
    if not (src / "saved_model.pb").is_file():
        raise FileNotFoundError(f"{src} is not a SavedModel directory (no saved_model.pb)")
    if dst.exists() and any(dst.iterdir()):
        raise FileExistsError(f"{dst} exists and is not empty")
    tags = [t.strip() for t in tag_set.split(",") if t.strip()]
    loaded = tf.saved_model.load(str(src), tags=tags)
    available = list(loaded.signatures.keys())
    names = list(signatures) if signatures else available
    unknown = [n for n in names if n not in available]
    if unknown:
        raise ValueError(f"unknown signature(s) {unknown}; {src} has {available}")
    if not names:
        raise ValueError(f"{src} has no signatures to wrap")
    flags = dataclasses.replace(Flags.from_env(), backend=backend)
    compiled: list[CompiledSignature] = []
    with tqdm(names, desc="tfxla wrap", unit="signature", disable=None if progress else True) as bar:  # None: TTY only
        for name in bar:
            signature = cf = loaded.signatures[name]
            if freeze:
                from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

                cf = convert_variables_to_constants_v2(signature)
            compiled.append(_compile_signature(name, cf, signature, jit_compile=jit_compile, flags=flags,
                                               batch_tiles=batch_tiles, bar=bar))
    features = tuple(kernel_backend.target_features())
    with tempfile.TemporaryDirectory(prefix="tfxla_wrap_") as tmp:
        staging = Path(tmp)
        files: dict[str, dict] = {}
        for sig in compiled:
            for kernels in sig.kernels.values():
                for k in kernels:
                    if k.kernel_hash in files:
                        continue
                    files[k.kernel_hash] = stage_kernel(k, kernel_backend, staging)
        manifest = _manifest(src, compiled, files, features, freeze, jit_compile, kernel_backend)
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
        module = tf.Module()
        assets, sources = kernel_assets(files, staging)
        module.tfxla_kernels = list(assets.values())
        module.tfxla_sources = sources
        module.tfxla_manifest = tf.saved_model.Asset(str(staging / MANIFEST))
        variables = {}
        for sig in compiled:
            for v in sig.cf.variables:
                variables[id(v)] = v
        module.tfxla_variables = list(variables.values())
        functions = {}
        for sig in compiled:
            gd = launch_graph(sig, files, features, kernel_backend, strip_graphs=freeze)
            functions[sig.name] = _serving_function(sig, asset_importer(sig, gd, assets))
        module.tfxla_signatures = functions
        tf.saved_model.save(module, str(dst), signatures=functions)
    reports = [_report(sig) for sig in compiled]
    report = WrapReport(str(src), str(dst), reports, time.perf_counter() - start)
    log.info("%s", report)
    return report


def _report(sig: CompiledSignature) -> SignatureReport:
    data = summary_json(sig.compiled.analysis)
    kernels = [k for ks in sig.kernels.values() for k in ks]
    why = "" if sig.kernels else _why_no_cluster(sig)
    if why:
        log.warning("tfxla wrap: signature %r compiled no cluster (it runs in TensorFlow, uncompiled): %s",
                    sig.name, why)
    return SignatureReport(sig.name, len(sig.kernels), len(kernels), data["nodes_clustered"], data["nodes_total"],
                           sig.tiles, sum(k.compile_seconds for k in kernels), sig.notes, why)


def _why_no_cluster(sig: CompiledSignature) -> str:
    """Why a signature compiled no cluster, naming the inputs or the reasons nodes stayed in TensorFlow."""
    why = symbolic_dims_needed(sig.cf) if sig.compiled.symbolic is None else ""
    if why:
        return f"{why} (tfxla_plugin.function compiles such inputs per call shape)"
    if sig.notes:
        return "; ".join(f"cluster {name} {why}" for name, why in sig.notes.items())
    reasons = Counter(sig.compiled.analysis.unsupported().values()).most_common(3)
    if reasons:
        return "nodes stay in TensorFlow: " + "; ".join(f"{why} ({n} node(s))" for why, n in reasons)
    return "no cluster reached --min_cluster_size (TFXLA_FLAGS) or the signature has no compute nodes"


def _manifest(src: Path, compiled: list[CompiledSignature], files: dict, features, freeze: bool, jit_compile,
              backend: Backend) -> dict:
    """The manifest; each kernel's source is under the key of its suffix (``c``, ``cu``) and ``<key>_sha256``,
    the command that rebuilds it under ``rebuild_argv``."""
    key = backend.source_suffix.lstrip(".")
    signatures = {}
    kernels = {}
    for sig in compiled:
        inputs = sig.signature.structured_input_signature[1]
        outputs = sig.signature.structured_outputs
        clusters = []
        for spec in sig.compiled.analysis.clusters:
            ks = sig.kernels[spec.name]
            clusters.append({"name": spec.name, "hlo_ops": sum(1 for _ in ks[0].hlo.instructions()),
                             "batch_polymorphic": bool(sig.tiles), "note": "",
                             "kernels": [files[k.kernel_hash]["id"] for k in ks]})
            for tile, k in zip(sig.tiles or (None,), ks):
                f = files[k.kernel_hash]
                kernels[f["id"]] = {"signature": sig.name, "cluster": spec.name, "batch_tile": tile,
                                    "so": f"{f['id']}.so", "so_sha256": f["so_sha256"], key: f["source_name"],
                                    f"{key}_sha256": f["source_sha256"], "rebuild_argv": f["rebuild_argv"],
                                    "hlo": f"{f['id']}.hlo.txt",
                                    "compile_seconds": f["compile_seconds"]}
        clusters.extend({"name": name, "hlo_ops": 0, "batch_polymorphic": False, "note": why, "kernels": []}
                        for name, why in sig.notes.items())
        signatures[sig.name] = {
            "inputs": {k: _spec_json(v) for k, v in inputs.items()},
            "outputs": {k: _spec_json(tf.TensorSpec(v.shape, v.dtype)) for k, v in
                        (outputs.items() if isinstance(outputs, dict) else enumerate(tf.nest.flatten(outputs)))},
            "batch_tiles": list(sig.tiles),
            "clustering": summary_json(sig.compiled.analysis),
            "clusters": clusters,
        }
    return {"format": FORMAT, "tfxla_version": __version__, "tf_version": tf.__version__, "backend": backend.name,
            "source": str(src.resolve()), "frozen": freeze, "jit_compile": jit_compile,
            "cpu_features": list(features), "signatures": signatures, "kernels": kernels}
