"""Compiled functions in SavedModels: the kernels of a ``tfxla_plugin.function`` as SavedModel Assets.

``AssetRunner(compiled_graph)`` stores the kernels of one compiled signature the way ``tfxla wrap`` does
(``saved_model.stage_kernel``: ``k_<hash>.so``, its source ``k_<hash>.c`` and optimized HLO
``k_<hash>.hlo.txt``) in this process's staging directory, makes an Asset of each and records in the
launch nodes what ``wrap`` records (``saved_model.launch_graph``: kernel and source hashes, the rebuild
commands, the CPU features). Called in a graph being traced, it imports the rewritten graph with each
kernel path fed from its Asset, so ``tf.saved_model.save`` copies the kernels into the model's
``assets/`` and the saved function finds them wherever the directory moves (``asset_importer``).

The staging directory (``mkdtemp``: private to this user) lives as long as the process; Assets name
files in it until ``tf.saved_model.save`` copies them.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

import tensorflow as tf
from tensorflow.python.trackable.resource import TrackableResource

import backends
from tfxla_plugin.saved_model import CompiledSignature, asset_importer, kernel_assets, launch_graph, stage_kernel

_STAGING: list[Path] = []  # the process's staging directory, made on first use


def staging_dir() -> Path:
    """This process's directory of staged kernels (made once, removed at exit)."""
    if not _STAGING:
        path = Path(tempfile.mkdtemp(prefix="tfxla_assets_"))
        atexit.register(shutil.rmtree, path, ignore_errors=True)
        _STAGING.append(path)
    return _STAGING[0]


class KernelAssets(TrackableResource):
    """The Assets of a compiled function's kernels, by file name (``assets``), as one trackable object that the
    function's instance tracks. A resource, so that Keras's ``model.export`` keeps it: its ``ExportArchive``
    saves the variables and the ``TrackableResource``s it finds under the model, nothing else. The resource
    itself is an unused scalar variable handle; the Assets are its children in a SavedModel."""

    def __init__(self):
        super().__init__()
        self.assets: dict[str, tf.saved_model.Asset] = {}

    def _create_resource(self):
        return tf.raw_ops.VarHandleOp(dtype=tf.int32, shape=[], shared_name="")

    def _initialize(self):
        pass

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        children = super()._trackable_children(save_type, **kwargs)
        if save_type != "checkpoint":
            children.update({f"asset_{name}": asset for name, asset in self.assets.items()})
        return children


class AssetRunner:
    """Runs one ``CompiledGraph`` inside a graph being traced, its kernels read from Assets (module docstring).
    Build it eagerly (under ``tf.init_scope()``): it writes files and makes the Assets.
    Assets are trackable objects: whatever saves the traces must reach them (``CompiledFunction`` has the
    instance it is a method of track the pool's Assets)."""

    def __init__(self, compiled, pool: dict[str, tf.saved_model.Asset]):
        """``pool``: file name -> Asset, shared by the runners of one function (one Asset per file: a
        function's traces may share kernels); this runner's Assets are added to it."""
        backend = backends.get(compiled.flags.backend)
        staging = staging_dir()
        sig = CompiledSignature(str(compiled.concrete_function.name), compiled.concrete_function, compiled)
        files: dict[str, dict] = {}
        for kernels in sig.kernels.values():
            for kernel in kernels:
                if kernel.kernel_hash not in files:
                    files[kernel.kernel_hash] = stage_kernel(kernel, backend, staging)
        kernel_paths, _ = kernel_assets(files, staging, pool)  # {kernel id: Asset of its .so}
        graph_def = launch_graph(sig, files, backend.target_features(), backend)
        self._run = asset_importer(sig, graph_def, kernel_paths)

    def __call__(self, flat: list) -> list:
        return self._run(flat)


__all__ = ["AssetRunner", "KernelAssets", "staging_dir"]
