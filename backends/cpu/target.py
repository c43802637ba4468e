"""The CPU the kernels are compiled for: its ISA feature flags, as ``/proc/cpuinfo`` names them.

Kernels are compiled with ``-march=native``, so a kernel stored in a SavedModel records the ISA
extensions of the machine that built it (``target_features``); a machine lacking any of them
rebuilds the kernel from its C source (``tfxla_plugin/ops/rebuild.h``).
"""

from __future__ import annotations

import functools

# ISA extensions GCC's -march=native may use (cpuinfo spelling: GCC's -mavx512vbmi2 is cpuinfo's
# avx512_vbmi2, -msse3 is pni, -mlzcnt is abm, -mprfchw is 3dnowprefetch). tests/test_cpu_target.py checks
# every extension GCC enables on the machine running the tests against this table.
ISA_FLAGS = frozenset({
    "sse", "sse2", "pni", "ssse3", "sse4_1", "sse4_2", "sse4a", "popcnt", "abm", "movbe", "aes",
    "pclmulqdq", "avx", "avx2", "fma", "fma4", "xop", "f16c", "bmi1", "bmi2", "adx", "sha_ni", "gfni", "vaes",
    "vpclmulqdq", "rdrand", "rdseed", "rdpid", "cx16", "3dnowprefetch", "fsgsbase", "xsave", "xsavec", "xsaveopt",
    "xsaves", "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl", "avx512ifma", "avx512vbmi", "avx512_vbmi2",
    "avx512_vnni", "avx512_bitalg", "avx512_vpopcntdq", "avx512_bf16", "avx512_fp16", "avx512_vp2intersect",
    "avx_vnni", "avx_ifma", "avx_vnni_int8", "avx_ne_convert", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16",
    "serialize", "movdiri", "movdir64b", "waitpkg", "clwb", "clflushopt", "cldemote", "wbnoinvd", "pku",
})


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The ``flags`` of the first processor in ``/proc/cpuinfo`` (empty when it cannot be read)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            return frozenset()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


@functools.lru_cache(maxsize=1)
def target_features() -> tuple[str, ...]:
    """The ISA extensions of this machine that native kernels may depend on, sorted."""
    return tuple(sorted(cpu_flags() & ISA_FLAGS))
