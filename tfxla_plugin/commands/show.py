"""``tfxla show``: a SavedModel's tag-sets, signatures and ops in ``saved_model_cli show``'s text (the
same flags: ``smcli_format``) and, behind our own flags, a wrapped model's clusters, kernels and
coverage from its manifest (``--tfxla``), clustering summaries (``--clusters``) and JSON (``--format json``).

    tfxla show --dir D [--tag_set serve [--signature_def NAME]] [--all] [--list_ops]
               [--tfxla] [--clusters] [--format text|json]

Signatures are read from ``saved_model.pb`` without loading the model (so a wrapped model shows
even where its op library is missing). ``--clusters`` prints the clustering summary: the stored one
of a wrapped model, or, for a plain model, the summary of compiling the signature with
``tfxla_plugin.function(jit_compile="auto")`` at batch size 1 (this loads the model and compiles
its clusters). Also the shared SavedModel helpers of ``tfxla run`` (``read_signatures``,
``SavedModelError``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import backends
from tfxla_plugin.commands import smcli_format

INTERNAL_SIGNATURES = ("__saved_model_init_op",)  # not callable; saved_model_cli lists it, we do not
MANIFEST = os.path.join("assets", "tfxla_manifest.json")


class SavedModelError(Exception):
    """A problem with the user's SavedModel or arguments, reported as one line without a traceback."""


@dataclass(frozen=True)
class TensorInfo:
    dtype: str  # NumPy/TF name: "float32", "int32", ...
    shape: tuple[int | None, ...] | None  # None dims are unknown; None: unknown rank
    name: str  # the graph tensor, e.g. "serving_default_x:0"

    def shape_text(self) -> str:
        if self.shape is None:
            return "unknown rank"
        return "(" + ", ".join("-1" if d is None else str(d) for d in self.shape) + ("," if len(self.shape) == 1 else "") + ")"

    def to_json(self) -> dict:
        return {"dtype": self.dtype, "shape": None if self.shape is None else list(self.shape), "name": self.name}


@dataclass(frozen=True)
class SignatureInfo:
    name: str
    method: str
    inputs: dict[str, TensorInfo]
    outputs: dict[str, TensorInfo]

    def to_json(self) -> dict:
        return {"method": self.method, "inputs": {k: v.to_json() for k, v in self.inputs.items()},
                "outputs": {k: v.to_json() for k, v in self.outputs.items()}}


# --- reading a SavedModel -----------------------------------------------------------------------

def check_dir(path) -> Path:
    path = Path(path)
    if not path.is_dir():
        raise SavedModelError(f"--dir {path}: no such directory")
    if not (path / "saved_model.pb").is_file() and not (path / "saved_model.pbtxt").is_file():
        raise SavedModelError(f"--dir {path}: not a SavedModel (no saved_model.pb or saved_model.pbtxt)")
    return path


def read_saved_model(path):
    """The ``SavedModel`` proto of directory ``path``."""
    from tensorflow.core.protobuf import saved_model_pb2

    path = check_dir(path)
    proto = saved_model_pb2.SavedModel()
    try:
        if (path / "saved_model.pb").is_file():
            proto.ParseFromString((path / "saved_model.pb").read_bytes())
        else:
            from google.protobuf import text_format

            text_format.Parse((path / "saved_model.pbtxt").read_text(), proto)
    except Exception as e:  # noqa: BLE001  (a corrupt file is the user's problem, reported in one line)
        raise SavedModelError(f"--dir {path}: cannot parse the SavedModel: {e}") from None
    return proto


def tag_sets(proto) -> list[tuple[str, ...]]:
    return [tuple(mg.meta_info_def.tags) for mg in proto.meta_graphs]


def _tags(tag_set: str) -> set[str]:
    return {t.strip() for t in tag_set.split(",") if t.strip()}


def meta_graph(proto, tag_set: str, path=""):
    wanted = _tags(tag_set)
    for mg in proto.meta_graphs:
        if set(mg.meta_info_def.tags) == wanted:
            return mg
    known = "; ".join(",".join(t) for t in tag_sets(proto)) or "none"
    raise SavedModelError(f"--dir {path}: no MetaGraphDef with tag-set {tag_set!r}; tag-sets: {known}")


def _tensor_info(info) -> TensorInfo:
    import tensorflow as tf

    dtype = tf.dtypes.as_dtype(info.dtype).name
    if info.tensor_shape.unknown_rank:
        return TensorInfo(dtype, None, info.name)
    return TensorInfo(dtype, tuple(None if d.size < 0 else d.size for d in info.tensor_shape.dim), info.name)


def read_signatures(path, tag_set: str = "serve") -> dict[str, SignatureInfo]:
    """Signature name -> its inputs and outputs, read from ``saved_model.pb`` (the model is not loaded)."""
    mg = meta_graph(read_saved_model(path), tag_set, path)
    return {name: SignatureInfo(name, sig.method_name, {k: _tensor_info(v) for k, v in sorted(sig.inputs.items())},
                                {k: _tensor_info(v) for k, v in sorted(sig.outputs.items())})
            for name, sig in sorted(mg.signature_def.items()) if name not in INTERNAL_SIGNATURES}


def select(signatures: dict, name: str | None, path="") -> dict:
    if name is None:
        return signatures
    if name not in signatures:
        raise SavedModelError(f"--dir {path}: no signature {name!r}; signatures: {', '.join(signatures) or 'none'}")
    return {name: signatures[name]}


def read_manifest(path) -> dict | None:
    """The checked manifest of a model wrapped by tfxla-plugin (``check_manifest``), or None (a plain
    SavedModel). Anything wrong with it is a ``SavedModelError`` of one line."""
    file = Path(path) / MANIFEST
    if not file.is_file():
        return None
    inside(path, file, MANIFEST)
    try:
        manifest = json.loads(file.read_text())
    except (OSError, ValueError) as e:  # ValueError: also bytes that are not UTF-8
        raise SavedModelError(f"--dir {path}: {MANIFEST} is not valid JSON: {e}") from None
    check_manifest(manifest, path)
    return manifest


def inside(path, file: Path, name: str) -> None:
    """Refuses ``file`` (``name`` in messages) when it resolves outside the model directory ``path``."""
    root = Path(path).resolve()
    if root not in file.resolve().parents:
        raise SavedModelError(f"--dir {path}: {name} leads outside the model directory (a link); not shown")


# --- checking the manifest ----------------------------------------------------------------------
# The shape of a manifest (tfxla_plugin/saved_model.py writes it), one table per object; a missing
# or null field is allowed. ``tfxla show`` reads nothing a manifest names outside ``assets/``.

@dataclass(frozen=True)
class ListOf:
    kind: object


@dataclass(frozen=True)
class MapOf:
    kind: object


class FileName:
    """A plain file name inside ``assets/``: no ``/``, not ``..``, not absolute."""


_CLUSTERING = {"nodes_clustered": int, "nodes_total": int, "percent_clustered": (int, float)}
_CLUSTER = {"name": str, "hlo_ops": int, "batch_polymorphic": bool, "note": str, "kernels": ListOf(str)}
_SIGNATURE = {"clustering": _CLUSTERING, "batch_tiles": ListOf(int), "clusters": ListOf(_CLUSTER),
              "inputs": dict, "outputs": dict}
_KERNEL = {"signature": str, "cluster": str, "batch_tile": int, "compile_seconds": (int, float),
           "so": FileName, "hlo": FileName, "so_sha256": str, "rebuild_argv": ListOf(str)}
_HEADER = {"format": str, "tfxla_version": str, "tf_version": str, "backend": str, "source": str, "frozen": bool,
           "jit_compile": (bool, str), "cpu_features": ListOf(str), "signatures": MapOf(_SIGNATURE)}


@cache
def _manifest_schema() -> dict:
    """``_HEADER`` and the kernels, whose source is under each backend's key (``source_key``)."""
    keys = [source_key(name) for name in backends.names()]
    kernel = {**_KERNEL, **{k: FileName for k in keys}, **{f"{k}_sha256": str for k in keys}}
    return {**_HEADER, "kernels": MapOf(kernel)}


def source_key(backend: str | None) -> str:
    """The manifest key of a kernel's source: its backend's source suffix (``c``, ``cu``); a manifest
    naming no known backend is read as the default backend's."""
    name = backend if backend in backends.names() else backends.DEFAULT
    return backends.get(name).source_suffix.lstrip(".")


_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", dict: "an object"}


def check_manifest(manifest, path="") -> None:
    """Raises ``SavedModelError`` naming the first field of ``manifest`` that does not fit the schema (``_manifest_schema``)."""
    _check(manifest, _manifest_schema(), "the manifest", path)


def _check(value, kind, where: str, path) -> None:
    def bad(expected: str):
        got = "null" if value is None else type(value).__name__
        raise SavedModelError(f"--dir {path}: {MANIFEST} is malformed: {where} must be {expected}, not {got}")

    if kind is FileName:
        if not isinstance(value, str):
            bad("a file name")
        if value in ("", ".", "..") or "/" in value or "\0" in value:
            raise SavedModelError(f"--dir {path}: {MANIFEST} is malformed: {where} is not a plain file name inside "
                                  f"assets/ (it is empty, '..', or has a '/')")
    elif isinstance(kind, dict):
        if not isinstance(value, dict):
            bad("an object")
        for key, sub in kind.items():
            if value.get(key) is not None:
                _check(value[key], sub, f"{where}.{key}" if where != "the manifest" else key, path)
    elif isinstance(kind, (ListOf, MapOf)):
        container = list if isinstance(kind, ListOf) else dict
        if not isinstance(value, container):
            bad("a list" if container is list else "an object")
        items = enumerate(value) if container is list else value.items()
        for key, item in items:
            _check(item, kind.kind, f"{where}[{key!r}]" if container is dict else f"{where}[{key}]", path)
    else:
        types = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) and bool not in types or not isinstance(value, types):
            bad(" or ".join(_NAMES[t] for t in types))


# --- the wrapped part ---------------------------------------------------------------------------

def _file_info(path, assets: Path, name: str | None, sha: str | None) -> dict:
    """Facts about asset ``name`` (a plain file name: ``check_manifest``); one that is a link out of the
    model directory is refused."""
    if not name:
        return {"file": None, "bytes": None, "sha256": sha}
    file = assets / name
    if file.is_symlink():
        inside(path, file, f"assets/{name}")
    return {"file": name, "bytes": file.stat().st_size if file.is_file() else None, "sha256": sha}


def wrapped_json(path, manifest: dict, signatures: list[str]) -> dict:
    """The manifest's facts for ``signatures`` with file sizes from the assets directory (None: missing)."""
    assets = Path(path) / "assets"
    kernels = manifest.get("kernels", {})
    source = source_key(manifest.get("backend"))
    out_signatures = {}
    for name in signatures:
        entry = manifest.get("signatures", {}).get(name)
        if entry is None:
            continue
        clustering = entry.get("clustering") or {}
        out_signatures[name] = {
            "nodes_clustered": clustering.get("nodes_clustered"), "nodes_total": clustering.get("nodes_total"),
            "percent_clustered": clustering.get("percent_clustered"), "batch_tiles": entry.get("batch_tiles", []),
            "clusters": [{**c, "kernels": list(c.get("kernels", []))} for c in entry.get("clusters", [])],
        }
    out_kernels = {}
    for key, k in sorted(kernels.items()):
        if k.get("signature") not in out_signatures:
            continue
        out_kernels[key] = {"signature": k.get("signature"), "cluster": k.get("cluster"),
                            "batch_tile": k.get("batch_tile"), "compile_seconds": k.get("compile_seconds"),
                            "so": _file_info(path, assets, k.get("so"), k.get("so_sha256")),
                            source: _file_info(path, assets, k.get(source), k.get(f"{source}_sha256")),
                            "rebuild_argv": k.get("rebuild_argv"),
                            "hlo": _file_info(path, assets, k.get("hlo"), None)}
    header = {k: manifest.get(k) for k in ("format", "tfxla_version", "tf_version", "backend", "source", "frozen",
                                           "jit_compile", "cpu_features")}
    return {**header, "signatures": out_signatures, "kernels": out_kernels}


def _size(n: int | None) -> str:
    if n is None:
        return "missing"
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KiB" if n < 1024 ** 2 else f"{n / 1024 ** 2:.1f} MiB"


def _short(sha: str | None) -> str:
    return sha[:12] if sha else "-"


def wrapped_text(data: dict) -> list[str]:
    frozen = "frozen" if data.get("frozen") else "kept as variables"
    lines = [f"Wrapped by tfxla-plugin {data.get('tfxla_version')} ({data.get('format')}): TF {data.get('tf_version')}, "
             f"backend {data.get('backend')}, jit_compile {data.get('jit_compile')}, variables {frozen}",
             f"  source: {data.get('source')}",
             f"  cpu features: {' '.join(data.get('cpu_features') or []) or '-'}"]
    for name, sig in data["signatures"].items():
        clusters = sig["clusters"]
        coverage = (f"{sig['nodes_clustered']} of {sig['nodes_total']} nodes clustered ({sig['percent_clustered']}%)"
                    if sig["nodes_total"] is not None else "coverage unknown")
        lines.append(f"signature_def['{name}']: {len(clusters)} cluster(s), {coverage}, batch tiles "
                     f"{sig['batch_tiles']}")
        for c in clusters:
            poly = "batch-polymorphic" if c.get("batch_polymorphic") else "fixed batch"
            note = f" ({c['note']})" if c.get("note") else ""
            lines.append(f"  {c.get('name')}: {c.get('hlo_ops')} HLO ops, {poly}, {len(c['kernels'])} kernel(s){note}")
            for key in c["kernels"]:
                k = data["kernels"].get(key)
                if k is None:
                    lines.append(f"    {key}: not in the manifest's kernels")
                    continue
                seconds = k.get("compile_seconds")
                took = f", compiled in {seconds:.2f} s" if isinstance(seconds, (int, float)) else ""
                s = source_key(data.get("backend"))
                sources = f", .{s} {_size(k[s]['bytes'])} sha256 {_short(k[s]['sha256'])}"
                lines.append(f"    {key}: batch tile {k['batch_tile']}, .so {_size(k['so']['bytes'])} "
                             f"sha256 {_short(k['so']['sha256'])}{sources}, .hlo.txt {_size(k['hlo']['bytes'])}{took}")
                argv = k.get("rebuild_argv")
                lines.append(f"      rebuilt where it cannot be used with: {' '.join(argv)}" if argv else
                             "      no rebuild command (wrapped by an older tfxla-plugin: re-wrap it to let the "
                             "op rebuild its kernels)")
    return lines


# --- the clustering summary ---------------------------------------------------------------------

def render_clustering(clustering: dict, where: str = "") -> str:
    """A stored ``summary_json`` dict, rendered as ``graph_passes.pipeline.summary`` renders a result."""
    from graph_passes import pipeline

    render = getattr(pipeline, "render", None)
    if render is None:  # until graph_passes.pipeline.render(summary_json dict) lands
        return "clustering summary (raw; graph_passes.pipeline.render is not available):\n" + \
            json.dumps(clustering, indent=2)
    try:
        return render(clustering)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise SavedModelError(f"{where}{MANIFEST} is malformed: its clustering summary cannot be rendered "
                              f"({type(e).__name__}: {_first_line(e)})") from None


def analyze_plain(path, tag_set: str, name: str, signature: SignatureInfo, fmt: str):
    """Compile ``name`` of a plain SavedModel with ``jit_compile="auto"`` at batch size 1 and explain it."""
    import numpy as np
    import tensorflow as tf

    import tfxla_plugin
    from tfxla_plugin import explain

    try:
        loaded = tf.saved_model.load(str(path), tags=sorted(_tags(tag_set)))
    except Exception as e:  # noqa: BLE001  (reported in one line)
        raise SavedModelError(f"--dir {path}: cannot load the SavedModel: {_first_line(e)}") from None
    cf = loaded.signatures[name]
    feeds = {}
    for key, info in signature.inputs.items():
        if info.shape is None:
            raise SavedModelError(f"--clusters: input {key!r} of {name!r} has unknown rank; cannot analyze")
        feeds[key] = tf.zeros([1 if d is None else d for d in info.shape], dtype=np.dtype(info.dtype))
    try:
        compiled = tfxla_plugin.function(lambda **kw: cf(**kw), jit_compile="auto").compiled_graph(**feeds)
    except Exception as e:  # noqa: BLE001  (a compiler failure is reported, not a traceback)
        raise SavedModelError(f"--clusters: compiling signature {name!r} failed: {type(e).__name__}: "
                              f"{_first_line(e)}") from None
    return explain.explain_json(compiled) if fmt == "json" else explain.explain_text(compiled)


def _first_line(e: BaseException) -> str:
    text = (getattr(e, "message", None) or str(e)).strip()
    return text.splitlines()[0] if text else type(e).__name__


# --- the command --------------------------------------------------------------------------------

def show(args: argparse.Namespace) -> int:
    path = check_dir(args.dir)
    proto = read_saved_model(path)
    tag_set = args.tag_set or "serve"  # our extras read one tag-set
    ours = args.tfxla or args.clusters or args.format == "json"
    if ours:
        signatures = select(read_signatures(path, tag_set), args.signature_def, path)
    elif args.signature_def is not None and args.tag_set is not None and not args.all:
        select(meta_graph(proto, args.tag_set, path).signature_def, args.signature_def, path)
    lines = [] if args.format == "json" else smcli_format.show_lines(proto, args, meta_graph, path)
    if not ours:
        print("\n".join(lines))
        return 0
    manifest = read_manifest(path)
    wrapped = wrapped_json(path, manifest, list(signatures)) if manifest is not None else None
    clusters = {}
    if args.clusters:
        for name, sig in signatures.items():
            stored = (manifest or {}).get("signatures", {}).get(name, {}).get("clustering")
            if manifest is not None:
                clusters[name] = stored if args.format == "json" else (
                    render_clustering(stored, f"--dir {path}: signature {name!r}: ") if stored
                    else "no clustering summary stored for this signature")
            else:
                clusters[name] = analyze_plain(path, tag_set, name, sig, args.format)
    if args.format == "json":
        doc = {"dir": str(path), "tag_sets": [list(t) for t in tag_sets(proto)], "tag_set": tag_set,
               "signatures": {k: v.to_json() for k, v in signatures.items()}, "wrapped": wrapped}
        if args.clusters:
            doc["clusters"] = clusters
        print(json.dumps(doc, indent=2))
        return 0
    if args.tfxla:
        lines.append("")
        lines.extend(wrapped_text(wrapped) if wrapped is not None else
                     [f"Not wrapped by tfxla-plugin (no {MANIFEST})"])
    for name, text in clusters.items():
        lines.append("")
        lines.append(f"Clusters of signature_def['{name}']" + ("" if manifest is not None else
                                                               " (compiled here with jit_compile=\"auto\", batch 1)")
                     + ":")
        lines.append(text)
    print("\n".join(lines))
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        return show(args)
    except SavedModelError as e:
        print(f"tfxla show: {e}", file=sys.stderr)
        return 1


def register(sub) -> None:
    p = sub.add_parser("show", help="show a SavedModel's tag-sets, signatures and ops (like saved_model_cli show); "
                                    "--tfxla: a wrapped model's clusters, kernels and coverage",
                       description="Show a SavedModel's tag-sets, signatures and ops with saved_model_cli show's "
                                   "flags and text. Our extras: --tfxla (a wrapped model's manifest: clusters, "
                                   "kernels, coverage), --clusters, --format json.")
    p.add_argument("--dir", required=True, help="the SavedModel directory")
    p.add_argument("--tag_set", default=None,
                   help="tag-set of the MetaGraphDef, comma-separated: list its SignatureDef keys (without it: "
                        "list the tag-sets; our extras read serve)")
    p.add_argument("--signature_def", default=None, help="with --tag_set: this SignatureDef's inputs and outputs")
    p.add_argument("--all", action="store_true", help="every tag-set, SignatureDef and op (saved_model_cli show --all)")
    p.add_argument("--list_ops", action="store_true", help="with --tag_set or --all: the ops the MetaGraph uses")
    p.add_argument("--tfxla", action="store_true",
                   help="tfxla-plugin's extra: after saved_model_cli's text, a wrapped model's manifest (checked): "
                        "backend, clusters, kernels and coverage")
    p.add_argument("--clusters", action="store_true",
                   help="print the clustering summary: stored (wrapped model) or computed by compiling the "
                        "signature with jit_compile=auto at batch 1 (plain model)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or one JSON document")
    p.set_defaults(func=run)
