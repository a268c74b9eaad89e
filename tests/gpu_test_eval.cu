// gpu_test_eval.cu: oscar-eval --gpu end to end on the bundled head_dim-128 model: the CUDA decode
// kernels (GpuKvCache) against the CPU reference cache (QuantizedKvCache) for oscar-cov at 2 and 4 bits.
// This file checks the device and the CUDA state; the comparisons, which need lib/'s C++20 headers, are
// in gpu_test_eval_host.cpp (tolerances justified there). Exits 77 (CTest: skipped) when no GPU is present.
#include <cuda_runtime.h>

#include <cstdio>
#include <exception>

#include "oscar_kernels.h"

#include "gpu_check.h"

int gpu_test_eval_host();  // gpu_test_eval_host.cpp: number of failed checks

int main() {
  if (oscar_device_count() == 0) {
    std::printf("SKIPPED: no CUDA device visible; run the GPU tests on a GPU machine (ctest -L gpu)\n");
    return 77;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (%d SMs)\n", prop.name, prop.multiProcessorCount);
  int host_failures = 0;
  try {
    host_failures = gpu_test_eval_host();
  } catch (const std::exception& e) {
    std::printf("FAIL: unexpected exception: %s\n", e.what());
    host_failures = 1;
  }
  failures += host_failures;
  CK(cudaDeviceSynchronize());
  CK(cudaGetLastError());  // no sticky error left behind by the caches
  std::printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
