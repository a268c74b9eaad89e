// gpu_check.h: the GPU tests' assertion macros (no Catch2 in device code builds): EXPECT counts a
// failure and prints where and why; CK checks a CUDA runtime call. Each test returns 1 if failures > 0.
#pragma once
#include <cstdio>

static int failures = 0;
#define EXPECT(cond, ...)                              \
  do {                                                 \
    if (!(cond)) {                                     \
      std::printf("FAIL %s:%d: ", __FILE__, __LINE__); \
      std::printf(__VA_ARGS__);                        \
      std::printf("\n");                               \
      ++failures;                                      \
    }                                                  \
  } while (0)
#define CK(call) EXPECT((call) == cudaSuccess, "%s", #call)
