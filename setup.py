"""The one build step pyproject.toml cannot declare: compiling the TfxlaLaunch op into the built package.

All metadata (name, version, dependencies, extras, the `tfxla` script, packages) is in pyproject.toml.
"""

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).parent


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


setup(cmdclass={"build_py": BuildPyWithOp})
