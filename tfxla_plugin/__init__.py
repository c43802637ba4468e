"""tfxla_plugin: the public API of tfxla-plugin (an XLA-style JIT compiler for TensorFlow).

Importing this package registers the ``TfxlaLaunch`` op with TensorFlow whenever TensorFlow is
installed (so SavedModels containing the op load after ``import tfxla_plugin``); this imports
TensorFlow, and the first import for a TF version may build the op library (a few seconds, once,
cached). Without TensorFlow the import stays cheap and the HLO layer works on its own.
"""

from tfxla_plugin._version import __version__


def _register_launch_op() -> None:
    import importlib.util

    if importlib.util.find_spec("tensorflow") is None:
        return
    import warnings

    from tfxla_plugin import _op

    try:
        _op.load_op_library()
        from tfxla_plugin import gradient  # noqa: F401  (registers the TfxlaLaunch gradient)
    except Exception as e:  # noqa: BLE001  (import must not fail; using the op re-raises the error)
        warnings.warn(f"tfxla_plugin: the TfxlaLaunch op is not available: {e}", RuntimeWarning, stacklevel=3)


_register_launch_op()

_LAZY = {
    "function": ("tfxla_plugin.api", "function"),
    "CompiledFunction": ("tfxla_plugin.api", "CompiledFunction"),
    "UnsupportedGraphError": ("tfxla_plugin.errors", "UnsupportedGraphError"),
    "Flags": ("tfxla_plugin.flags", "Flags"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'tfxla_plugin' has no attribute {name!r}")


__all__ = ["__version__", "function", "CompiledFunction", "UnsupportedGraphError", "Flags"]
