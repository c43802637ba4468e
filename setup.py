"""Installs tfxla-plugin: the packages tfxla_plugin, graph_passes, hlo, backends and the `tfxla` CLI.

TensorFlow is deliberately not a hard requirement: on CPU-only machines install
`tensorflow-cpu==2.21.*` next to this package (see README.md) so pip does not
pull the multi-GB GPU build of `tensorflow`.
"""

import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
VERSION = re.search(r'__version__ = "([^"]+)"', (HERE / "tfxla_plugin" / "_version.py").read_text()).group(1)

setup(
    name="tfxla-plugin",
    version=VERSION,
    description="An XLA-style JIT compiler for TensorFlow, written in Python",
    long_description=(HERE / "README.md").read_text(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["tfxla_plugin*", "graph_passes*", "hlo*", "backends*"]),
    install_requires=["numpy>=1.26", "ml_dtypes>=0.4"],
    extras_require={
        "test": ["pytest>=8", "hypothesis>=6.100"],
        "cuda": ["pycuda>=2024.1"],
    },
    entry_points={"console_scripts": ["tfxla=tfxla_plugin.cli:main"]},
)
