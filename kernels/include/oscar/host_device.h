// host_device.h: OSCAR_HD marks functions shared by the CPU reference (lib/) and the CUDA kernels.
#pragma once
#if defined(__CUDACC__)
#define OSCAR_HD __host__ __device__ __forceinline__
#else
#define OSCAR_HD inline
#endif
