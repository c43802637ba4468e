"""Installs tfxla-plugin: the packages tfxla_plugin, graph_passes, hlo, backends and the `tfxla` CLI.

TensorFlow is deliberately not a hard requirement: on CPU-only machines install
`tensorflow-cpu==2.21.*` next to this package (see README.md) so pip does not
pull the multi-GB GPU build of `tensorflow`.
"""

import importlib.util
import re
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).parent
VERSION = re.search(r'__version__ = "([^"]+)"', (HERE / "tfxla_plugin" / "_version.py").read_text()).group(1)


class BuildPyWithOp(build_py):
    """Also compiles the TfxlaLaunch op (tfxla_plugin/ops/tfxla_launch.cc) into the built package.

    Only where TensorFlow is importable while building (pip's --no-build-isolation, or a plain
    `setup.py build`); otherwise, and for editable installs, `import tfxla_plugin` builds it on
    first use into the user cache.
    """

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False) or self.dry_run:
            return
        spec = importlib.util.spec_from_file_location("_tfxla_op_build", HERE / "tfxla_plugin" / "_op.py")
        op = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(op)
        try:
            info = op.tf_build_info()
        except Exception as e:  # noqa: BLE001  (no TensorFlow in this build environment)
            self.announce(f"TensorFlow not importable ({e}); TfxlaLaunch will be built on first import", 2)
            return
        target = Path(self.build_lib) / "tfxla_plugin" / op.PACKAGED_SO
        self.announce(f"building the TfxlaLaunch op for TensorFlow {info['tf_version']} -> {target}", 2)
        try:
            op.build(target, info)
        except op.OpBuildError as e:
            self.warn(f"could not build the TfxlaLaunch op now (it will be built on first import): {e}")


setup(
    name="tfxla-plugin",
    version=VERSION,
    description="An XLA-style JIT compiler for TensorFlow, written in Python",
    long_description=(HERE / "README.md").read_text(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["tfxla_plugin*", "graph_passes*", "hlo*", "backends*", "saved_models*"]),
    package_data={"tfxla_plugin": ["ops/*.cc", "ops/*.h"]},
    cmdclass={"build_py": BuildPyWithOp},
    install_requires=["numpy>=1.26", "ml_dtypes>=0.4", "onednn-cpu-gomp==2023.2.0", "onednn-devel-cpu-gomp==2023.2.0",
                      "tqdm>=4.60", "starlette>=0.40", "uvicorn>=0.30"],
    extras_require={
        "test": ["pytest>=8", "hypothesis>=6.100", "tensorboard==2.21.*", "selenium>=4.20", "httpx>=0.27",
                 "mypy==2.4.*"],
        "cuda": ["pycuda>=2024.1"],
    },
    entry_points={"console_scripts": ["tfxla=tfxla_plugin.cli:main"]},
)
