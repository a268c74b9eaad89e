// gpu_test_ops.cu: the one GPU-vs-CPU driver of the kernels (fwht, cache prefill/append, decode, long-split
// and real-activation decode, the bf16 baseline, the C API's rejections), each case against its CPU twin;
// run `gpu_test_ops --help` for the selection flags and `--list` for the cases. The body is in
// gpu_test_ops_host.cpp (host compiler, lib's flags: the twins round there exactly as in test_twins); this
// nvcc-compiled part reports the device. Exits 77 (CTest: skipped) when no CUDA device is present.
// gpu_test_eval (oscar-eval's model-level GPU-vs-CPU check, through lib's GpuKvCache) stays its own executable.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#include "oscar_kernels.h"

int gpu_test_ops_main(int argc, char** argv);  // gpu_test_ops_host.cpp

int main(int argc, char** argv) {
  bool quiet = false;  // --list and --help print no device line
  for (int i = 1; i < argc; ++i) quiet |= !std::strcmp(argv[i], "--list") || !std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h");
  if (!quiet && oscar_device_count() > 0) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) std::printf("device: %s (%d SMs)\n", prop.name, prop.multiProcessorCount);
  }
  return gpu_test_ops_main(argc, argv);
}
