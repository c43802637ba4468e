"""The CPU features a kernel records (``backends/cpu/target.py``) cover what ``-march=native`` may use here.

A kernel shipped in a SavedModel is rebuilt on a machine lacking any recorded feature, so a feature GCC
enables but the table misses (a misspelt cpuinfo name, an AMD-only extension such as SSE4a) would let a
kernel run on a CPU without it. The check asks GCC itself which ISA extensions ``-march=native`` turns on
and maps each to its /proc/cpuinfo name; it runs on whatever x86 machine runs the suite.
"""

from __future__ import annotations

import platform
import re
import shutil
import subprocess

import pytest

from backends.toolchain import CompilerOptions
from backends.cpu.target import ISA_FLAGS, cpu_flags, target_features

# GCC -m option -> cpuinfo flag, where the spellings differ (the rest are spelled alike)
GCC_TO_CPUINFO = {
    "sse3": "pni", "sse4.1": "sse4_1", "sse4.2": "sse4_2", "lzcnt": "abm", "pclmul": "pclmulqdq", "rdrnd": "rdrand",
    "sha": "sha_ni", "prfchw": "3dnowprefetch", "bmi": "bmi1", "avx512vbmi2": "avx512_vbmi2",
    "avx512vnni": "avx512_vnni", "avx512bitalg": "avx512_bitalg", "avx512vpopcntdq": "avx512_vpopcntdq",
    "avx512bf16": "avx512_bf16", "avx512fp16": "avx512_fp16", "avx512vp2intersect": "avx512_vp2intersect",
    "avxvnni": "avx_vnni", "avxifma": "avx_ifma", "avxvnniint8": "avx_vnni_int8", "avxneconvert": "avx_ne_convert",
    "amx-tile": "amx_tile", "amx-bf16": "amx_bf16", "amx-int8": "amx_int8", "amx-fp16": "amx_fp16",
}
# instruction-set extensions that compiled arithmetic may contain (not OS/system ones such as -mxsave)
COMPUTE = re.compile(r"^(sse|ssse3|avx|fma|xop|f16c|bmi|lzcnt|popcnt|adx|sha|gfni|vaes|vpclmulqdq|pclmul|aes|"
                     r"movbe|amx|rdrnd|rdseed|prfchw)")


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 feature names")
@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc")
def test_every_extension_native_kernels_may_use_is_recorded() -> None:
    flags = CompilerOptions().target_flags
    out = subprocess.run(["gcc", *flags, "-Q", "--help=target"], capture_output=True, text=True, check=True).stdout
    enabled = {m.group(1) for m in re.finditer(r"^\s+-m([\w.-]+)\s+\[enabled\]", out, re.M)}
    have = cpu_flags()
    assert have, "/proc/cpuinfo has no flags line"
    unrecorded = []
    for opt in sorted(o for o in enabled if COMPUTE.match(o) and o != "sse4"):  # -msse4 = -msse4.1 + -msse4.2
        name = GCC_TO_CPUINFO.get(opt, opt.replace(".", "_"))
        if name in have and name not in target_features():
            unrecorded.append(f"-m{opt} (cpuinfo {name})")
    assert not unrecorded, f"enabled by {flags} but not recorded in ISA_FLAGS: {unrecorded}"


def test_recorded_names_are_cpuinfo_spellings() -> None:
    """GCC's spellings that differ from cpuinfo's never appear in the table (they would never match)."""
    gcc_only = {g.replace(".", "_") for g, c in GCC_TO_CPUINFO.items() if g.replace(".", "_") != c}
    assert not (ISA_FLAGS & gcc_only), sorted(ISA_FLAGS & gcc_only)


def test_features_come_from_the_flags_line() -> None:
    cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx512f avx512_vbmi2 sse4a xyz\n"
    assert cpu_flags(cpuinfo) & ISA_FLAGS == {"sse2", "avx512f", "avx512_vbmi2", "sse4a"}


def test_cache_key_depends_on_what_native_means(monkeypatch) -> None:
    """The same source and command line on a CPU where -march=native resolves differently is another
    kernel: a cache shared between machines must not hand one CPU's code to another."""
    from backends import toolchain as compiler

    options = CompilerOptions()
    here = compiler.cache_key("int f(void) { return 1; }", options)
    assert compiler.native_target(options.cc, options.target_flags), "gcc resolved -march=native to nothing"
    monkeypatch.setattr(compiler, "native_target", lambda cc, flags: "-mavx2 [enabled]\n-mavx512f [disabled]\n")
    assert compiler.cache_key("int f(void) { return 1; }", options) != here
    fixed = CompilerOptions(target_flags=("-march=x86-64-v3",))
    monkeypatch.undo()
    assert compiler.native_target(fixed.cc, fixed.target_flags) == ""  # nothing machine-dependent to add
