// gpu_test_fwht.cu: the FWHT kernel against its CPU twin (bit for bit) on random data, every
// supported head_dim, and the C API's errors. Exits 77 (CTest: skipped) when no GPU is present.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "oscar/fwht_math.h"
#include "oscar_kernels.h"

#include "gpu_check.h"

int main() {
  if (oscar_device_count() == 0) {
    std::printf("SKIPPED: no CUDA device visible; run the GPU tests on a GPU machine (ctest -L gpu)\n");
    return 77;
  }
  std::mt19937 rng(1234);
  std::normal_distribution<float> nd(0.f, 3.f);
  for (int hd : {32, 64, 128, 256, 512}) {
    for (int64_t rows : {1L, 7L, 1000L, 33333L}) {
      for (int norm : {0, 1}) {
        std::vector<float> x(static_cast<size_t>(rows) * hd), want, got(x.size());
        for (auto& v : x) v = nd(rng);
        want = x;
        for (int64_t r = 0; r < rows; ++r) oscar::fwht_inplace(want.data() + r * hd, hd, norm != 0);
        float* d = nullptr;
        cudaMalloc(&d, x.size() * 4);
        cudaMemcpy(d, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
        oscar_error err{};
        const oscar_status s = oscar_fwht_f32(d, rows, hd, norm, nullptr, &err);
        EXPECT(s == OSCAR_OK, "hd=%d rows=%lld: %s %s", hd, (long long)rows, oscar_status_name(s), err.message);
        EXPECT(cudaDeviceSynchronize() == cudaSuccess, "sync");
        cudaMemcpy(got.data(), d, x.size() * 4, cudaMemcpyDeviceToHost);
        cudaFree(d);
        EXPECT(std::memcmp(got.data(), want.data(), x.size() * 4) == 0, "hd=%d rows=%lld norm=%d: GPU differs from CPU twin",
               hd, (long long)rows, norm);
      }
    }
  }
  // Bad input: an error code and a message, never a silent wrong answer.
  oscar_error err{};
  float* d = nullptr;
  cudaMalloc(&d, 1024 * 4);
  EXPECT(oscar_fwht_f32(d, 4, 96, 1, nullptr, &err) == OSCAR_ERR_UNSUPPORTED && std::strstr(err.message, "head_dim=96"), "hd 96");
  EXPECT(oscar_fwht_f32(nullptr, 4, 128, 1, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT, "null");
  EXPECT(oscar_fwht_f32(d + 1, 4, 128, 1, nullptr, &err) == OSCAR_ERR_MISALIGNED, "misaligned");
  EXPECT(oscar_fwht_f32(d, -1, 128, 1, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT, "negative rows");
  cudaFree(d);
  std::printf("%s: %d failures\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
