"""backends: code generators, compilers, kernel caches and runtimes (CPU C kernels, CUDA kernels)."""
