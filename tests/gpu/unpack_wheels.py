"""Unpack the wheels of a folder that suit this Python into a target folder (no pip, no network).

    python tests/gpu/unpack_wheels.py WHEELS_DIR TARGET_DIR

A wheel is a zip of importable files: pure ones (``py3-none-any``) always suit, binary ones when
their ``cpXY`` tag is this interpreter's; of several versions of a project the newest that suits is
taken. Put TARGET_DIR on PYTHONPATH afterwards.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path


def suits(name: str) -> bool:
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    parts = name[:-4].split("-")
    python, abi = parts[-3], parts[-2]
    return (python.startswith("py3") and abi == "none") or python == tag


def version_key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("."))


def main(src: str, dst: str) -> None:
    best: dict[str, tuple] = {}
    for wheel in sorted(Path(src).glob("*.whl")):
        if not suits(wheel.name):
            continue
        project, version = wheel.name.split("-")[:2]
        if project not in best or version_key(version) > version_key(best[project][0]):
            best[project] = (version, wheel)
    Path(dst).mkdir(parents=True, exist_ok=True)
    for project, (version, wheel) in sorted(best.items()):
        zipfile.ZipFile(wheel).extractall(dst)
        print(f"unpacked {wheel.name}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
