"""What to install when an optional dependency is missing: one clear ImportError per package.

TensorFlow and TensorBoard are optional dependencies of tfxla-plugin (see pyproject.toml): the HLO layer
works without them. The features that need them call these checks first, so the user reads which
package to install instead of a bare ``No module named 'tensorflow'`` from deep inside an import, or a
``TBNotInstalledError`` after half a TensorBoard log directory is written. Standard library only.
"""

from __future__ import annotations

import importlib.util

TENSORFLOW_INSTALL = 'pip install "tensorflow-cpu==2.21.*"  (or "tensorflow==2.21.*" for the GPU build)'
TENSORBOARD_INSTALL = 'pip install "tensorboard==2.21.*"  (or the extra: pip install "tfxla-plugin[tensorboard]")'


class MissingDependencyError(ImportError):
    """An optional dependency a feature needs is not installed; the message says what to install."""


def tensorflow_missing(feature: str) -> MissingDependencyError:
    return MissingDependencyError(f"{feature} needs TensorFlow, which is not installed: {TENSORFLOW_INSTALL}")


def is_tensorflow_missing(error: ImportError) -> bool:
    """Whether ``error`` is the import of TensorFlow itself failing (not an error inside TensorFlow)."""
    return isinstance(error, ModuleNotFoundError) and (error.name or "").split(".")[0] == "tensorflow"


def require_tensorboard(feature: str) -> None:
    """Raise ``MissingDependencyError`` unless the ``tensorboard`` package (tf.summary's writers) is importable."""
    try:
        found = importlib.util.find_spec("tensorboard") is not None
    except ValueError:  # a module in sys.modules without a spec
        found = True
    if not found:
        raise MissingDependencyError(f"{feature} needs the tensorboard package, which is not installed: "
                                     f"{TENSORBOARD_INSTALL}")


__all__ = ["MissingDependencyError", "TENSORBOARD_INSTALL", "TENSORFLOW_INSTALL", "is_tensorflow_missing",
           "require_tensorboard", "tensorflow_missing"]
