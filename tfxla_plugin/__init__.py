"""tfxla_plugin: the public API of tfxla-plugin (an XLA-style JIT compiler for TensorFlow).

Importing this package registers the ``TfxlaLaunch`` op with TensorFlow whenever TensorFlow is
installed (so SavedModels containing the op load after ``import tfxla_plugin``): at once when
TensorFlow is imported already, else right after ``import tensorflow`` finishes (a one-shot import
hook, ``_AfterTensorFlowImport``), so importing the package never imports TensorFlow itself and the
``tfxla`` command line answers ``--help`` without it. The first registration for a TF version may
build the op library (a few seconds, once, cached). Without TensorFlow the HLO layer works on its own,
and ``tfxla_plugin.function`` & co. raise an ImportError naming the package to install.

With ``TFXLA_FLAGS=--auto_jit=1`` the same one-shot registration also turns the graph-optimizer hook
on (``tfxla_plugin.enable()``, ``hook/``): every CPU graph TF runs is then compiled, no code changes.
"""

import importlib.abc
import importlib.util
import os
import sys

from tfxla_plugin._version import __version__


def _register_launch_op() -> None:
    import warnings

    from tfxla_plugin import _op

    try:
        _op.load_op_library()
        from tfxla_plugin import gradient  # noqa: F401  (registers the TfxlaLaunch gradient)
    except Exception as e:  # noqa: BLE001  (import must not fail; using the op re-raises the error)
        warnings.warn(f"tfxla_plugin: the TfxlaLaunch op is not available: {e}", RuntimeWarning, stacklevel=3)
        return
    if "--auto_jit" not in os.environ.get("TFXLA_FLAGS", ""):
        return  # (other flags are read, and their errors raised, where they are used)
    try:
        from tfxla_plugin.flags import Flags

        if Flags.from_env().auto_jit:
            from tfxla_plugin import hook

            hook.enable()
    except Exception as e:  # noqa: BLE001  (as above: import must not fail)
        warnings.warn(f"tfxla_plugin: TFXLA_FLAGS=--auto_jit: the graph-optimizer hook is not enabled: {e}",
                      RuntimeWarning, stacklevel=3)


class _AfterTensorFlowImport(importlib.abc.MetaPathFinder):
    """Finds ``tensorflow`` through the other finders and registers the op once its module has run."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "tensorflow":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # one shot; the lookup below then uses the other finders
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            run_module = spec.loader.exec_module

            def exec_module(module) -> None:
                run_module(module)
                _register_launch_op()

            spec.loader.exec_module = exec_module  # this spec's own loader instance
        return spec


if "tensorflow" in sys.modules:
    _register_launch_op()
elif importlib.util.find_spec("tensorflow") is not None:
    sys.meta_path.insert(0, _AfterTensorFlowImport())

_LAZY = {
    "function": ("tfxla_plugin.api", "function"),
    "CompiledFunction": ("tfxla_plugin.api", "CompiledFunction"),
    "UnsupportedGraphError": ("tfxla_plugin.errors", "UnsupportedGraphError"),
    "Flags": ("tfxla_plugin.flags", "Flags"),
    "enable": ("tfxla_plugin.hook", "enable"),
    "disable": ("tfxla_plugin.hook", "disable"),
    "enabled": ("tfxla_plugin.hook", "enabled"),
    "is_enabled": ("tfxla_plugin.hook", "is_enabled"),
    "stats": ("tfxla_plugin.hook", "stats"),
    "reset_stats": ("tfxla_plugin.hook", "reset_stats"),
    "explain_hooked": ("tfxla_plugin.explain", "explain_hooked"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        try:
            return getattr(importlib.import_module(module), attr)
        except ImportError as e:
            from tfxla_plugin import _requirements

            if _requirements.is_tensorflow_missing(e):
                raise _requirements.tensorflow_missing(f"tfxla_plugin.{name}") from e
            raise
    raise AttributeError(f"module 'tfxla_plugin' has no attribute {name!r}")


__all__ = ["__version__", "function", "CompiledFunction", "UnsupportedGraphError", "Flags", "enable", "disable",
           "enabled", "is_enabled", "stats", "reset_stats", "explain_hooked"]
