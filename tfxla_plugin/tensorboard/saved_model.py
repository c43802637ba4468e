"""TensorBoard runs for a SavedModel (what ``tfxla tensorboard --dir D --logdir L`` writes).

- A plain SavedModel: the signature's concrete function is compiled as ``tfxla_plugin.function(...,
  jit_compile="auto")`` would compile it, at a concrete batch size (each ``None`` dimension becomes
  ``batch``), and written like ``tfxla_plugin.tensorboard.write`` (``<name>/original``, ``/rewritten``,
  ``/hlo/<cluster>``).
- A wrapped SavedModel (``assets/tfxla_manifest.json`` present): the signature's graph as loaded, its
  function calls inlined so the ``TfxlaLaunch`` nodes show, as ``<name>/rewritten``, with the manifest's
  clustering summary as text.
- ``jit=True`` (``--jit``, a plain SavedModel): what ``tfxla serve --jit`` runs: the model loaded and its
  signature called once (zeros, ``batch``) with the Grappler hook on, and the hook's record of it written
  (``tensorboard.write_hooked``): with ``None`` dims, that call runs the signature's twin traced for
  ``batch`` (docs/hook.md, "Shapes"), whose record is written.

``name`` defaults to the signature name.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import backends

MANIFEST = os.path.join("assets", "tfxla_manifest.json")


class SavedModelError(ValueError):
    """A SavedModel directory, tag set or signature that cannot be used; the message says which."""


def load_signature(directory: str | os.PathLike, signature_def: str = "serving_default",
                   tag_set: str = "serve"):
    """``tf.saved_model.load(directory, tags)`` (after ``import tfxla_plugin``) and its signature."""
    import tensorflow as tf

    import tfxla_plugin  # noqa: F401  (registers TfxlaLaunch so wrapped models load)

    path = Path(directory)
    if not path.is_dir():
        raise SavedModelError(f"SavedModel directory {directory} does not exist")
    if not (path / "saved_model.pb").exists() and not (path / "saved_model.pbtxt").exists():
        raise SavedModelError(f"{directory} is not a SavedModel (no saved_model.pb)")
    tags = [t for t in tag_set.split(",") if t] if tag_set else None
    try:
        loaded = tf.saved_model.load(str(path), tags=tags)
    except (RuntimeError, ValueError) as e:
        raise SavedModelError(f"cannot load SavedModel {directory} with tag set {tag_set!r}: {e}") from e
    signatures = dict(getattr(loaded, "signatures", {}) or {})
    if signature_def not in signatures:
        known = ", ".join(sorted(signatures)) or "none"
        raise SavedModelError(f"SavedModel {directory} has no signature {signature_def!r}; signatures: {known}")
    return loaded, signatures[signature_def]


def concrete_inputs(signature, batch: int = 1) -> dict:
    """Zero tensors for the signature's keyword inputs, each ``None`` dimension replaced by ``batch``."""
    import tensorflow as tf

    if batch < 1:
        raise SavedModelError(f"--batch must be at least 1, got {batch}")
    _, specs = signature.structured_input_signature
    inputs = {}
    for key, spec in specs.items():
        if spec.shape.rank is None:
            raise SavedModelError(f"signature input {key!r} has unknown rank; cannot pick a concrete shape")
        shape = [batch if d is None else d for d in spec.shape.as_list()]
        inputs[key] = tf.fill(shape, "") if spec.dtype == tf.string else tf.zeros(shape, spec.dtype)
    return inputs


def manifest_launch_info(manifest: dict, signature_def: str) -> dict[str, dict[str, object]]:
    """Cluster name -> short launch attrs (TF op count, HLO op count, backend) from a wrapped model's manifest."""
    entry = manifest.get("signatures", {}).get(signature_def, {})
    info: dict[str, dict[str, object]] = {}
    for c in (entry.get("clustering") or {}).get("clusters", []):
        info.setdefault(c["name"], {})["op_count"] = int(c.get("nodes", 0))
    for c in entry.get("clusters", []):
        if "hlo_ops" in c:
            info.setdefault(c["name"], {})["hlo_op_count"] = int(c["hlo_ops"])
    for attrs in info.values():
        attrs["backend"] = str(manifest.get("backend", backends.DEFAULT))
    return info


def _inlined_graph(signature):
    from graph_passes.inline import inline_calls
    from hlo.lowering.tensor_names import control

    graph = signature.graph
    fetches = [t.name for t in graph.outputs] + [control(op.name) for op in graph.control_outputs]
    return inline_calls(graph.as_graph_def(), fetches).graph_def


def write_saved_model(directory: str | os.PathLike, logdir: str | os.PathLike, *,
                      signature_def: str = "serving_default", tag_set: str = "serve", batch: int = 1,
                      name: str | None = None, overwrite: bool = False, jit: bool = False):
    """Write the TensorBoard runs of one signature of a SavedModel; returns ``tensorboard.Written``."""
    import tfxla_plugin
    from tfxla_plugin import tensorboard

    from tfxla_plugin.saved_model import read_manifest

    loaded, signature = load_signature(directory, signature_def, tag_set)
    name = name or signature_def
    try:
        manifest = read_manifest(directory)
    except json.JSONDecodeError as e:
        raise SavedModelError(f"{Path(directory) / MANIFEST} is not valid JSON: {e}") from e
    if manifest is not None and jit:
        raise SavedModelError(f"{directory} is a wrapped SavedModel (it runs its own kernels); --jit is for a plain one")
    if jit:
        return _write_hooked(directory, logdir, signature_def, tag_set, batch, name, overwrite)
    if manifest is not None:
        entry = manifest.get("signatures", {}).get(signature_def, {})
        clustering = entry.get("clustering")
        return tensorboard.write_graph_def(_inlined_graph(signature), logdir, name, clustering=clustering,
                                           launch=manifest_launch_info(manifest, signature_def),
                                           overwrite=overwrite)
    inputs = concrete_inputs(signature, batch)
    f = tfxla_plugin.function(lambda **kw: signature(**kw), jit_compile="auto")
    compiled = f.compiled_graph(**inputs)
    del loaded  # kept alive until compiled: the signature's variables belong to it
    return tensorboard.write_compiled_graph(compiled, logdir, name, overwrite=overwrite)


def _write_hooked(directory, logdir, signature_def: str, tag_set: str, batch: int, name: str, overwrite: bool):
    import tfxla_plugin
    from tfxla_plugin import tensorboard

    with tfxla_plugin.enabled():  # before the load: TF keeps the graph a function was first instantiated with
        loaded, signature = load_signature(directory, signature_def, tag_set)
        signature(**concrete_inputs(signature, batch))
    written = tensorboard.write_hooked(signature, logdir=logdir, name=name, overwrite=overwrite)
    del loaded
    return written


__all__ = ["MANIFEST", "SavedModelError", "concrete_inputs", "load_signature", "manifest_launch_info",
           "write_saved_model"]
