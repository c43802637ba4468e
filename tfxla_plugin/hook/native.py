"""Building and loading the graph-optimizer plugin (``graph_optimizer.cc``), once per process.

The library is built as the op library is (``tfxla_plugin._op``: TF's compile and link flags, plus the
Python include directory for ``Python.h``; the user cache, a file lock, an atomic write, a recorded
sha256 checked before loading, a sealed memfd as the path loaded) and registered with
``load_pluggable_device_library``. TF keeps one graph optimizer per device type: a second CPU graph
plugin aborts the process, so ``load()`` loads ours at most once per process and never unloads it
(``tfxla_plugin.disable()`` turns the Python side off instead).
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

from tfxla_plugin import _op

SOURCE = Path(__file__).resolve().parent / "graph_optimizer.cc"
LABEL = "the tfxla graph-optimizer plugin"

def build_info() -> dict:
    """``_op.tf_build_info()`` with the Python headers the plugin includes."""
    info = _op.tf_build_info()
    return {**info, "compile_flags": [*info["compile_flags"], "-I" + sysconfig.get_paths()["include"]]}


def load() -> Path:
    """The plugin's cache path, built and loaded first if this process has not loaded it yet (a failure
    is kept: never retry a failing build or a half-done registration)."""
    return _LOADED()


def loaded() -> bool:
    return _LOADED.value is not None


def _load() -> Path:
    from tensorflow.python.framework import load_library

    from backends.shared_object import sealed_copy

    so, data = _op.cached_library(build_info(), SOURCE, LABEL)
    fd = sealed_copy(data, so.name)
    _op._library_fds.append(fd)  # never closed, as the op library's (TF knows the library by this name)
    load_library.load_pluggable_device_library(f"/proc/self/fd/{fd}")
    return so


_LOADED = _op.Once(_load)

__all__ = ["LABEL", "SOURCE", "build_info", "load", "loaded"]
