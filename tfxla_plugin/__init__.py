"""tfxla_plugin: the public API of tfxla-plugin (an XLA-style JIT compiler for TensorFlow).

Importing this package is cheap: TensorFlow is imported only by the pieces that need it.
"""

from tfxla_plugin._version import __version__

__all__ = ["__version__"]
