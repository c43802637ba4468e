"""The project's PEP 517 build backend (pyproject.toml's ``[build-system]``, loaded through ``backend-path``).

It builds the wheel, the sdist and the editable install from pyproject.toml with the standard library
alone, so a build needs nothing from an index: ``pip wheel .`` and ``pip install .`` work offline in
pip's isolated build environment, and ``--no-build-isolation`` works whatever setuptools is installed
(or none). What goes in: ``[project]`` (PEP 621) for the metadata, ``[tool.tfxla-build]`` for the files:

- ``packages``: top-level packages; every ``*.py`` of them and of their sub-packages (directories with an
  ``__init__.py``) is shipped;
- ``package-data``: per package, globs of the other files shipped (the TfxlaLaunch op's C++ sources);
- ``version``: the file whose ``__version__ = "..."`` is the version (``dynamic = ["version"]``).

The TfxlaLaunch op (docs/design.md §3, "Packaging"): a wheel always carries the op's sources, and the
first use builds the op against the TensorFlow installed then (``tfxla_plugin/_op.py``, cached per TF
version). When TensorFlow is importable while the wheel is built (``--no-build-isolation`` in an
environment with TensorFlow), the op is also built into the wheel, which is then tagged for this
platform (``py3-none-linux_x86_64``); ``_op.py`` uses that library only while its sidecar matches the
installed TensorFlow. The config setting ``op`` chooses: ``auto`` (the default), ``skip`` (a pure
wheel always: ``pip wheel . -C op=skip``), ``build`` (fail unless the op is built in).
"""

from __future__ import annotations

import ast
import base64
import csv
import glob
import hashlib
import importlib.util
import io
import os
import re
import sys
import sysconfig
import tarfile
import tempfile
import time
import tomllib
import zipfile
from pathlib import Path
from typing import Any, Callable

ROOT = Path.cwd()  # PEP 517: hooks run in the source tree
OP_SETTINGS = ("auto", "skip", "build")


class BackendError(RuntimeError):
    """pyproject.toml asks for something this backend does not do, or a setting is wrong."""


# --- the project -------------------------------------------------------------------------------------


class Project:
    """pyproject.toml read once: the distribution's name, version, metadata and files."""

    def __init__(self, root: Path = ROOT):
        self.root = root
        data = tomllib.loads((root / "pyproject.toml").read_text())
        self.meta: dict = data["project"]
        self.config: dict = data.get("tool", {}).get("tfxla-build", {})
        self.name: str = self.meta["name"]
        self.version = self._version()
        self.dist = f"{re.sub(r'[-_.]+', '_', self.name).lower()}-{self.version}"  # file-name form
        self.dist_info = f"{self.dist}.dist-info"

    def _version(self) -> str:
        if "version" in self.meta:
            return self.meta["version"]
        if "version" not in self.meta.get("dynamic", []) or "version" not in self.config:
            raise BackendError("pyproject.toml: no [project] version and no [tool.tfxla-build] version file")
        tree = ast.parse((self.root / self.config["version"]).read_text())
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in node.targets):
                return ast.literal_eval(node.value)
        raise BackendError(f"{self.config['version']} assigns no __version__")

    def package_files(self) -> list[str]:
        """The shipped files, as sorted paths relative to the root."""
        files: set[str] = set()
        for package in self.config.get("packages", []):
            top = self.root / package
            if not (top / "__init__.py").is_file():
                raise BackendError(f"[tool.tfxla-build] packages: {package} has no __init__.py")
            for path in top.rglob("*.py"):
                if "__pycache__" not in path.parts and _in_package(path.parent, top):
                    files.add(path.relative_to(self.root).as_posix())
        for package, patterns in self.config.get("package-data", {}).items():
            for pattern in patterns:
                base = self.root / package
                matched = [p for p in glob.glob(pattern, root_dir=base) if (base / p).is_file()]
                if not matched:
                    raise BackendError(f"[tool.tfxla-build] package-data: {package}/{pattern} matches no file")
                files.update(f"{package}/{p}" for p in matched)
        return sorted(files)

    def license_files(self) -> list[str]:
        patterns = self.meta.get("license-files", [])
        found = sorted({p for pattern in patterns for p in glob.glob(pattern, root_dir=self.root)})
        if patterns and not found:
            raise BackendError(f"pyproject.toml license-files {patterns} match no file")
        return found


def _in_package(directory: Path, top: Path) -> bool:
    """Whether every directory from ``top`` down to ``directory`` has an ``__init__.py``."""
    while True:
        if not (directory / "__init__.py").is_file():
            return False
        if directory == top:
            return True
        directory = directory.parent


# --- core metadata (https://packaging.python.org/specifications/core-metadata/), one writer per key ---

Field = tuple[str, str]  # (core-metadata key, value); key "" is the body (the README)


def _readme(project: Project, value) -> list[Field]:
    if isinstance(value, str):
        value = {"file": value}
    kind = value.get("content-type") or {".md": "text/markdown", ".rst": "text/x-rst"}.get(
        Path(value.get("file", "")).suffix, "text/plain")
    body = value["text"] if "text" in value else (project.root / value["file"]).read_text()
    return [("Description-Content-Type", kind), ("", body)]


def _license(project: Project, value) -> list[Field]:
    if not isinstance(value, str):
        raise BackendError("pyproject.toml license: write an SPDX expression (PEP 639), not a table")
    return [("License-Expression", value)]


def _people(role: str) -> Callable[[Project, list[dict]], list[Field]]:
    def write(project: Project, people: list[dict]) -> list[Field]:
        named = [p["name"] for p in people if "name" in p and "email" not in p]
        emails = [f"{p['name']} <{p['email']}>" if "name" in p else p["email"] for p in people if "email" in p]
        fields = [(role, ", ".join(named))] if named else []
        return fields + ([(f"{role}-email", ", ".join(emails))] if emails else [])
    return write


def _extras(project: Project, extras: dict[str, list[str]]) -> list[Field]:
    fields = []
    for extra, requirements in extras.items():
        name = re.sub(r"[-_.]+", "-", extra).lower()  # PEP 685
        fields.append(("Provides-Extra", name))
        for requirement in requirements:
            req, _, marker = requirement.partition(";")
            marker = f"({marker.strip()}) and extra == {name!r}" if marker.strip() else f"extra == {name!r}"
            fields.append(("Requires-Dist", f"{req.strip()}; {marker}".replace("'", '"')))
    return fields


def _each(key: str) -> Callable[[Project, list[str]], list[Field]]:
    return lambda project, values: [(key, v) for v in values]


def _one(key: str) -> Callable[[Project, str], list[Field]]:
    return lambda project, value: [(key, value)]


def _not_metadata(project: Project, value) -> list[Field]:
    return []  # written elsewhere: name and version first, the scripts as entry_points.txt

METADATA_FIELDS: dict[str, Callable[[Project, Any], list[Field]]] = {  # [project] key: its writer
    "name": _not_metadata, "version": _not_metadata, "dynamic": _not_metadata,
    "description": _one("Summary"),
    "requires-python": _one("Requires-Python"),
    "license": _license,
    "license-files": lambda project, _: [("License-File", p) for p in project.license_files()],
    "keywords": lambda project, words: [("Keywords", ",".join(words))],
    "authors": _people("Author"),
    "maintainers": _people("Maintainer"),
    "classifiers": _each("Classifier"),
    "urls": lambda project, urls: [("Project-URL", f"{label}, {url}") for label, url in urls.items()],
    "dependencies": _each("Requires-Dist"),
    "optional-dependencies": _extras,
    "scripts": _not_metadata, "gui-scripts": _not_metadata, "entry-points": _not_metadata,
    "readme": _readme,  # last: its body ends the file
}


def core_metadata(project: Project) -> str:
    unknown = set(project.meta) - set(METADATA_FIELDS)
    if unknown:
        raise BackendError(f"pyproject.toml [project] {sorted(unknown)}: not supported by {Path(__file__).name}")
    fields = [("Metadata-Version", "2.4"), ("Name", project.name), ("Version", project.version)]
    for key, write in METADATA_FIELDS.items():
        if key in project.meta:
            fields += write(project, project.meta[key])
    head = "".join(f"{k}: {v}\n" for k, v in fields if k)
    body = "".join(v for k, v in fields if not k)
    return head + ("\n" + body if body else "")


def entry_points(project: Project) -> str:
    groups = {"console_scripts": project.meta.get("scripts", {}), "gui_scripts": project.meta.get("gui-scripts", {}),
              **project.meta.get("entry-points", {})}
    return "".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items()) + "\n"
                   for group, entries in groups.items() if entries)


# --- archives ----------------------------------------------------------------------------------------


def _timestamp() -> float:
    return max(float(os.environ.get("SOURCE_DATE_EPOCH", 315532800)), 315532800)  # zip's floor: 1980


class WheelWriter:
    """A wheel: files added with their RECORD line, then the dist-info and RECORD on ``close``."""

    def __init__(self, path: Path, project: Project, tag: str):
        self.project, self.tag = project, tag
        self.zip = zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED)
        self.records: list[tuple[str, str, str]] = []

    def _write(self, name: str, data: bytes, mode: int) -> None:
        info = zipfile.ZipInfo(name, time.gmtime(_timestamp())[:6])
        info.external_attr, info.compress_type = (0o100000 | mode) << 16, zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)

    def add(self, name: str, data: bytes, mode: int = 0o644) -> None:
        self._write(name, data, mode)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.records.append((name, f"sha256={digest}", str(len(data))))

    def close(self) -> None:
        for name, data in dist_info_files(self.project, self.tag).items():
            self.add(f"{self.project.dist_info}/{name}", data)
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows([*self.records, (f"{self.project.dist_info}/RECORD", "", "")])
        self._write(f"{self.project.dist_info}/RECORD", out.getvalue().encode(), 0o644)
        self.zip.close()


def dist_info_files(project: Project, tag: str) -> dict[str, bytes]:
    files = {"METADATA": core_metadata(project).encode(),
             "WHEEL": (f"Wheel-Version: 1.0\nGenerator: {Path(__file__).stem}\n"
                       f"Root-Is-Purelib: {'true' if tag.endswith('-any') else 'false'}\nTag: {tag}\n").encode()}
    if entry_points(project):
        files["entry_points.txt"] = entry_points(project).encode()
    for name in project.license_files():
        files[f"licenses/{name}"] = (project.root / name).read_bytes()
    return files


# --- the TfxlaLaunch op ------------------------------------------------------------------------------


def _op_setting(config_settings: dict | None) -> str:
    setting = (config_settings or {}).get("op", "auto")
    if setting not in OP_SETTINGS:
        raise BackendError(f"config setting op={setting!r}: expected one of {', '.join(OP_SETTINGS)}")
    return setting


def build_op(project: Project, setting: str, staging: Path) -> dict[str, Path]:
    """The op library and its sidecar built for the TensorFlow importable here, as ``{wheel path: file}``;
    ``{}`` when there is none to build against (or ``skip``). Says which on stderr."""
    later = "the wheel carries the op's sources; the first `import tfxla_plugin` builds it (cached)"
    if setting == "skip":
        return {}
    op_path = project.root / "tfxla_plugin" / "_op.py"
    spec = importlib.util.spec_from_file_location("_tfxla_op_build", op_path)
    assert spec is not None and spec.loader is not None, op_path
    op = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(op)  # standard library only at import time
    try:
        if importlib.util.find_spec("tensorflow") is None:
            raise ImportError("no module named 'tensorflow' in this build environment")
        info = op.tf_build_info()
        target = staging / op.PACKAGED_SO
        print(f"{Path(__file__).stem}: building the TfxlaLaunch op for TensorFlow {info['tf_version']} into the wheel",
              file=sys.stderr)
        op.build(target, info)
    except (ImportError, op.OpBuildError) as e:
        if setting == "build":
            raise BackendError(f"config setting op=build: cannot build the TfxlaLaunch op: {e}") from e
        print(f"{Path(__file__).stem}: TfxlaLaunch not built into the wheel ({str(e).splitlines()[0]}): {later}",
              file=sys.stderr)
        return {}
    return {f"tfxla_plugin/{op.PACKAGED_SO}": target, f"tfxla_plugin/{op.SIDECAR}": target.with_suffix(".json")}


def platform_tag() -> str:
    return re.sub(r"[-.]", "_", sysconfig.get_platform())


# --- PEP 517 / PEP 660 hooks -------------------------------------------------------------------------


def get_requires_for_build_wheel(config_settings=None) -> list[str]:
    return []


get_requires_for_build_sdist = get_requires_for_build_editable = get_requires_for_build_wheel


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None) -> str:
    project = Project()
    for name, data in dist_info_files(project, "py3-none-any").items():
        path = Path(metadata_directory) / project.dist_info / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return project.dist_info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None) -> str:
    project, setting = Project(), _op_setting(config_settings)
    with tempfile.TemporaryDirectory() as staging:
        op_files = build_op(project, setting, Path(staging))
        tag = f"py3-none-{platform_tag()}" if op_files else "py3-none-any"
        name = f"{project.dist}-{tag}.whl"
        wheel = WheelWriter(Path(wheel_directory) / name, project, tag)
        for path in project.package_files():
            wheel.add(path, (project.root / path).read_bytes())
        for path, file in op_files.items():
            wheel.add(path, file.read_bytes(), 0o755 if path.endswith(".so") else 0o644)
        wheel.close()
    return name


def build_editable(wheel_directory, config_settings=None, metadata_directory=None) -> str:
    """A wheel whose ``.pth`` puts the source tree on ``sys.path`` (the op is built on first use)."""
    project = Project()
    name = f"{project.dist}-py3-none-any.whl"
    wheel = WheelWriter(Path(wheel_directory) / name, project, "py3-none-any")
    wheel.add(f"_{project.dist.partition('-')[0]}_editable.pth", f"{project.root.resolve()}\n".encode())
    wheel.close()
    return name


def build_sdist(sdist_directory, config_settings=None) -> str:
    """``<dist>.tar.gz``: pyproject.toml, the README and license files, this backend, the shipped files,
    and PKG-INFO."""
    project = Project()
    readme = project.meta.get("readme", {})
    readme = [readme] if isinstance(readme, str) else [readme["file"]] if "file" in readme else []
    backend = [Path(p).relative_to(project.root).as_posix() for p in (project.root / "build_backend").glob("*.py")]
    files = sorted({"pyproject.toml", *readme, *project.license_files(), *backend, *project.package_files()})
    name = f"{project.dist}.tar.gz"
    with tarfile.open(Path(sdist_directory) / name, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for path, data in [(p, (project.root / p).read_bytes()) for p in files] + [
                ("PKG-INFO", core_metadata(project).encode())]:
            info = tarfile.TarInfo(f"{project.dist}/{path}")
            info.size, info.mtime, info.mode = len(data), int(_timestamp()), 0o644
            tar.addfile(info, io.BytesIO(data))
    return name
