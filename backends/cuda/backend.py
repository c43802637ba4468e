"""The CUDA backend's ``Backend`` object (``backends.get("cuda")``): every cluster is a host launcher
(``host_launcher.py``) compiled by nvcc into a shared object with the kernel ABI; with TensorFlow's
tensors in host memory, each call copies the inputs to the device and the outputs back."""

from __future__ import annotations

from pathlib import Path

from backends import OUTPUT, SOURCE, BackendBase, CompileOptions, Executable
from hlo.ir import HloModule


class CudaBackend(BackendBase):
    name = "cuda"
    source_suffix = ".cu"
    source_language = "cuda"
    pipeline_module = "backends.cuda.pipeline"  # the shared passes, then RowPrograms

    def check(self) -> None:
        from backends.cuda.compiler import require_nvcc

        require_nvcc()

    def compile(self, module: HloModule, options: CompileOptions | None = None) -> Executable:
        from backends.cuda.host_launcher import LauncherOptions, compile_launcher

        options = options or CompileOptions()
        compiled = compile_launcher(module, LauncherOptions(cache_dir=options.cache_dir, prepared=options.prepared))
        generated = compiled.generated
        assert generated is not None  # compile_launcher keeps what it generated
        assignment = (f"device scratch arena: {generated.program.scratch_bytes} bytes (offsets below are into it)\n"
                      f"host program:\n{generated.program_text}\n")
        return Executable(self.name, Path(compiled.path), compiled.source, compiled.cache_hit, compiled.signature,
                          assignment, compiled)

    def rebuild_command(self, source: str) -> list[str]:
        """nvcc's shared-object build of a host launcher (the nvcc found here: ``$TFXLA_NVCC``, the PATH or
        /usr/local/cuda/bin), the same command ``compile`` ran."""
        from backends.cuda.compiler import NvccOptions, require_nvcc

        return NvccOptions(nvcc=require_nvcc()).shared_command(SOURCE, OUTPUT)


BACKEND = CudaBackend()
