/* oscar_kernels.h: the C API of oscar-kv's production CUDA library.
 * Contract: every entry point returns an oscar_status; on failure it also fills *err (when err is not
 * NULL) with a one-line message naming the argument at fault. Device pointers must be cudaMalloc'ed
 * memory; streams are passed as void* (a cudaStream_t, or NULL for the default stream) so that C,
 * C++ and Python (ctypes) callers need no CUDA headers. The library keeps no global state. */
#ifndef OSCAR_KERNELS_H
#define OSCAR_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum oscar_status {
  OSCAR_OK = 0,
  OSCAR_ERR_INVALID_ARGUMENT = 1, /* null pointer, negative length, length beyond capacity */
  OSCAR_ERR_UNSUPPORTED = 2,      /* head_dim or bit width with no compiled kernel */
  OSCAR_ERR_MISALIGNED = 3,       /* pointer not aligned as the kernel's vector loads need */
  OSCAR_ERR_CUDA = 4,             /* a CUDA runtime call or kernel launch failed */
  OSCAR_ERR_NO_DEVICE = 5         /* no CUDA device is visible */
} oscar_status;

typedef struct oscar_error {
  char message[512];
} oscar_error;

/* Human-readable name of a status code (static string). */
const char* oscar_status_name(oscar_status status);

/* Number of visible CUDA devices (0 when none or when the driver is missing); never fails. */
int oscar_device_count(void);

/* In-place fast Walsh-Hadamard transform of `rows` contiguous float32 vectors of length head_dim
 * (a power of two in [32, 512]), in natural (Sylvester) order; scaled by 1/sqrt(head_dim) when
 * normalize != 0, which makes it orthonormal and self-inverse. Bit-identical to oscar::fwht_inplace
 * (oscar/fwht_math.h) on the CPU. `data` must be 16-byte aligned. Asynchronous on `stream`. */
oscar_status oscar_fwht_f32(float* data, int64_t rows, int32_t head_dim, int32_t normalize,
                            void* stream, oscar_error* err);

/* The same transform on `rows` contiguous bf16 vectors (raw uint16 bf16 bits), in place: each row is
 * widened to float32, transformed exactly as oscar_fwht_f32 does (same head_dim range, same normalize
 * flag), and rounded back to bf16 to nearest, ties to even (NaN stays NaN). Bit-identical to
 * oscar::fwht_inplace on the widened row followed by oscar::float_to_bf16_bits (oscar/float_formats.h).
 * `data` must be 16-byte aligned. Asynchronous on `stream`. */
oscar_status oscar_fwht_bf16(void* data, int64_t rows, int32_t head_dim, int32_t normalize,
                             void* stream, oscar_error* err);

#ifdef __cplusplus
}
#endif

#endif /* OSCAR_KERNELS_H */
