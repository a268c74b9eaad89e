// status.cu: status names and device discovery for the C API.
#include <cuda_runtime.h>
#include "oscar_kernels.h"

extern "C" const char* oscar_status_name(oscar_status status) {
  switch (status) {
    case OSCAR_OK: return "OSCAR_OK";
    case OSCAR_ERR_INVALID_ARGUMENT: return "OSCAR_ERR_INVALID_ARGUMENT";
    case OSCAR_ERR_UNSUPPORTED: return "OSCAR_ERR_UNSUPPORTED";
    case OSCAR_ERR_MISALIGNED: return "OSCAR_ERR_MISALIGNED";
    case OSCAR_ERR_CUDA: return "OSCAR_ERR_CUDA";
    case OSCAR_ERR_NO_DEVICE: return "OSCAR_ERR_NO_DEVICE";
  }
  return "OSCAR_ERR_UNKNOWN";
}

extern "C" int oscar_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  return n;
}
