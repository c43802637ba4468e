"""Flags from the ``TFXLA_FLAGS`` environment variable (ours; TF's ``TF_XLA_FLAGS`` is never touched).

    TFXLA_FLAGS="--dump_to=/tmp/dumps --min_cluster_size=2"

Unknown flags are an error that lists the known ones; values are typed and
checked. ``Flags.from_env()`` parses the current environment each time it is
called, so tests can set the variable and see the effect.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from dataclasses import dataclass

import backends


class FlagError(ValueError):
    pass


@dataclass(frozen=True)
class Flags:
    dump_to: str | None = None  # directory for XLA-style dumps
    dump_passes: bool = False  # also dump the module after every HLO pass
    min_cluster_size: int = 4  # auto-clustering only; must-compile uses 1
    max_cluster_size: int = 0  # 0: unlimited
    clustering_fuel: int = -1  # -1: unlimited; N: stop after N merges (bisecting)
    cache_dir: str | None = None  # kernel cache (default ~/.cache/tfxla_plugin/kernels)
    cache_max_bytes: int = 2 << 30  # kernel cache size limit (LRU eviction after a build); 0: unlimited
    backend: str = backends.DEFAULT  # a name in backends.names()
    # C compiler jobs per kernel (gcc -flto=N over its functions; measured +28% gcc CPU, no wall gain on a
    # loaded 2-core box, hence off); 0: the CPUs this process may use, shared
    # by the kernels compiling at once; 1: one compiler process per kernel
    compile_jobs: int = 1
    # false: skip the target-independent passes (simplify, fusion, layouts). The backend's kernel-shape passes
    # (``Backend.prepare``: oneDNN epilogues, column reductions, CUDA row programs) still run: they choose
    # its kernels, they are not optional optimizations.
    optimize: bool = True
    max_specializations: int = 16  # input shapes compiled per function; later new shapes run in TF; 0: unlimited
    # symbolic dims: the Nth eager call of one shape compiles static kernels for it (parallel, oneDNN), within
    # --max_specializations; 0: never (the symbolic kernels serve every shape)
    specialize_after: int = 3
    # false: no symbolic dims (a None dim other than a tiled batch is compiled per input shape, a wrapped
    # signature's such clusters stay in TensorFlow): for inputs whose unknown dims at one position are independent
    symbolic_dims: bool = True
    auto_jit: bool = False  # at import: tfxla_plugin.enable(), the graph-optimizer hook (docs/hook.md)

    @staticmethod
    def known() -> list[str]:
        return [f.name for f in dataclasses.fields(Flags)]

    @staticmethod
    def parse(text: str) -> "Flags":
        values: dict[str, object] = {}
        fields = {f.name: f for f in dataclasses.fields(Flags)}
        for token in shlex.split(text or ""):
            if not token.startswith("--"):
                raise FlagError(f"TFXLA_FLAGS: expected --name=value, got {token!r}")
            name, sep, raw = token[2:].partition("=")
            if name not in fields:
                raise FlagError(f"TFXLA_FLAGS: unknown flag --{name}; known flags: "
                                + ", ".join(f"--{k}" for k in Flags.known()))
            values[name] = _convert(name, fields[name].type, raw if sep else None)
        flags = Flags(**values)
        if flags.backend not in backends.names():
            raise FlagError(f"TFXLA_FLAGS: --backend must be {' or '.join(backends.names())}, got {flags.backend!r}")
        return flags

    @staticmethod
    def from_env() -> "Flags":
        return Flags.parse(os.environ.get("TFXLA_FLAGS", ""))


def _convert(name: str, type_name, raw: str | None):
    type_text = str(type_name)
    if "bool" in type_text:
        if raw is None or raw.lower() in ("1", "true", "yes"):
            return True
        if raw.lower() in ("0", "false", "no"):
            return False
        raise FlagError(f"TFXLA_FLAGS: --{name} takes true or false, got {raw!r}")
    if raw is None:
        raise FlagError(f"TFXLA_FLAGS: --{name} needs a value (--{name}=...)")
    if "int" in type_text:
        try:
            return int(raw)
        except ValueError:
            raise FlagError(f"TFXLA_FLAGS: --{name} takes an integer, got {raw!r}") from None
    return raw
