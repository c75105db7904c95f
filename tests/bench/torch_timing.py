"""What the PyTorch step benchmarks (torch_step.py, torch_cnn_step.py) share: the timing of a
step and the line that says what the process ran with. compare_step.sh reads their "ms/step"
lines."""
import ctypes
import os
import time


def blas_in_use():
    """The OpenBLAS kernel this process runs its matmuls on (PyTorch loads Debian's OpenBLAS)."""
    with open("/proc/self/maps") as maps:
        paths = sorted({line.split()[-1] for line in maps if "libopenblas" in line})
    if not paths:
        return "no OpenBLAS loaded"
    lib = ctypes.CDLL(paths[0])
    lib.openblas_get_corename.restype = ctypes.c_char_p
    return f"OpenBLAS core {lib.openblas_get_corename().decode()} ({os.path.basename(paths[0])})"


def median_step(step, wait=lambda: None, warmup=5, timed=30):
    """Runs step() warmup times, then times it `timed` times (wait() before the clock starts and
    before it stops, for a device's asynchronous kernels); prints the median and the best."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(timed):
        wait()
        t0 = time.perf_counter()
        step()
        wait()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    print(f"ms/step {times[len(times) // 2]:.2f} (best {times[0]:.2f})")


def print_environment(*notes):
    """The OpenBLAS kernel, any notes, and the allocator, OpenBLAS and OpenMP variables set."""
    variables = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items())
                         if k.startswith(("MALLOC_", "GLIBC_", "OPENBLAS_", "OMP_")))
    print("environment: " + "; ".join(
        [blas_in_use(), *notes, variables or "no MALLOC_/GLIBC_/OPENBLAS_/OMP_ variables"]))
