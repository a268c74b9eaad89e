// api_util.h: helpers for the C API: error reporting into oscar_error and checked CUDA calls.
#pragma once
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cuda_runtime.h>
#include "oscar_kernels.h"

namespace oscar::api {

inline oscar_status fail(oscar_error* err, oscar_status status, const char* fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
  }
  return status;
}

inline bool aligned(const void* p, std::uintptr_t bytes) {
  return (reinterpret_cast<std::uintptr_t>(p) % bytes) == 0;
}

// Checks the launch (and any earlier asynchronous error surfaced by it).
inline oscar_status check_launch(oscar_error* err, const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return fail(err, OSCAR_ERR_CUDA, "%s: CUDA error %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
  return OSCAR_OK;
}

}  // namespace oscar::api

#define OSCAR_CUDA_TRY(call, err, what)                                                              \
  do {                                                                                               \
    const cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess)                                                                           \
      return ::oscar::api::fail((err), OSCAR_ERR_CUDA, "%s: CUDA error %s (%s)", (what),            \
                                cudaGetErrorName(e_), cudaGetErrorString(e_));                       \
  } while (0)
