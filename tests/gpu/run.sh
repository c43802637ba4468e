#!/usr/bin/env bash
# The GPU check of the CUDA backend, for a GPU machine with no internet and no TensorFlow (JAX + CUDA).
#
#   bash tests/gpu/run.sh            # report in $OUT (the device tool's output folder) or tests/gpu/out
#
# 1. Makes PyCUDA importable without a network: unpacks the wheels carried in tests/gpu/wheels
#    (pure-Python dependencies, and binary ones for this Python) into a build folder, and builds
#    the PyCUDA sdist there in place (configure.py against this machine's CUDA, all cores).
# 2. Runs tests/gpu/check.py: hand-written modules and the corpus on the GPU vs the evaluator, the
#    benchmarks (bench/cuda_bench.py, vs jax.jit and copy bandwidth), the host launchers the
#    TfxlaLaunch op loads (through ctypes, vs the evaluator), then the GPU pytest tests.
# Everything is bounded to finish in about 8 minutes. tests/gpu/README.md says how to refill wheels/.
set -u
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
OUT_DIR="${OUT:-$ROOT/tests/gpu/out}"
mkdir -p "$OUT_DIR"
PY="${PYTHON:-python3}"
WORK="${TFXLA_GPU_WORK:-/tmp/tfxla_gpu_check}"
mkdir -p "$WORK"
export TFXLA_CACHE_DIR="$WORK/kernels"
export XLA_PYTHON_CLIENT_PREALLOCATE=false
START=$(date +%s)
log() { echo "[run.sh $(( $(date +%s) - START ))s] $*" | tee -a "$OUT_DIR/run.log"; }

if ! "$PY" -c "import pycuda.driver" 2>/dev/null; then
  log "installing PyCUDA from tests/gpu/wheels"
  "$PY" tests/gpu/unpack_wheels.py tests/gpu/wheels "$WORK/deps" >> "$OUT_DIR/run.log" 2>&1
  export PYTHONPATH="$WORK/deps${PYTHONPATH:+:$PYTHONPATH}"
  SDIST=$(ls tests/gpu/wheels/pycuda-*.tar.gz | head -1)
  SRC="$WORK/$(basename "$SDIST" .tar.gz)"
  if [ ! -d "$SRC" ]; then tar xzf "$SDIST" -C "$WORK"; fi
  CUDA_ROOT="${CUDA_ROOT:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")")}"
  # The link needs libcuda.so; containers often mount only the driver's libcuda.so.1: link against that.
  LIBDIR="$WORK/cudalib"
  mkdir -p "$LIBDIR"
  LIBCUDA=$( (ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 /{print $NF; exit}') )
  for f in "$LIBCUDA" /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib64/libcuda.so.1 "$CUDA_ROOT/lib64/stubs/libcuda.so"; do
    if [ -n "$f" ] && [ -e "$f" ]; then ln -sf "$f" "$LIBDIR/libcuda.so"; break; fi
  done
  log "CUDA root $CUDA_ROOT; libcuda for the link: $(readlink "$LIBDIR/libcuda.so" || echo none)"
  (cd "$SRC" && rm -f siteconf.py && "$PY" configure.py --cuda-root="$CUDA_ROOT" --no-cuda-enable-curand \
      --cudadrv-lib-dir="$LIBDIR,$CUDA_ROOT/lib64,$CUDA_ROOT/lib64/stubs,$CUDA_ROOT/lib" \
      && timeout 300 "$PY" setup.py build_ext --inplace -j "$(nproc)") > "$OUT_DIR/pycuda_build.log" 2>&1
  log "PyCUDA build exit $? (log: pycuda_build.log)"
  export PYTHONPATH="$SRC:$PYTHONPATH"
fi
if ! "$PY" -c "import pycuda.driver" >> "$OUT_DIR/run.log" 2>&1; then
  log "PyCUDA is still not importable: see pycuda_build.log"
  tail -30 "$OUT_DIR/pycuda_build.log" >> "$OUT_DIR/run.log" 2>/dev/null
fi
ELAPSED=$(( $(date +%s) - START ))
BUDGET=$(( 450 - ELAPSED ))
log "running tests/gpu/check.py with a budget of ${BUDGET}s"
timeout $(( BUDGET + 30 )) "$PY" -m tests.gpu.check --out "$OUT_DIR" --budget "$BUDGET" 2>&1 | tee -a "$OUT_DIR/run.log"
log "done"
