// test_fwht_api.cpp: the FWHT entry points of the C API (oscar_fwht_f32, oscar_fwht_bf16) reject bad input
// with a status and a message naming the function and the argument, before any launch, so these checks run
// on CPU-only machines. Pointers are host addresses that are never dereferenced.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>

#include "oscar_kernels.h"

namespace {

bool says(const oscar_error& e, const char* what) { return std::strstr(e.message, what) != nullptr; }

struct Fake {
  alignas(256) unsigned char bytes[1024];
};

}  // namespace

TEST_CASE("oscar_fwht_bf16 rejects bad input with a message", "[fwht][api]") {
  Fake f;
  void* d = f.bytes;
  oscar_error err{};
  CHECK(oscar_fwht_bf16(nullptr, 4, 128, 1, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "oscar_fwht_bf16: data is NULL"));
  CHECK(oscar_fwht_bf16(f.bytes + 2, 4, 128, 1, nullptr, &err) == OSCAR_ERR_MISALIGNED);
  CHECK(says(err, "oscar_fwht_bf16: data"));
  CHECK(says(err, "16-byte aligned"));
  CHECK(oscar_fwht_bf16(d, -1, 128, 1, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "rows=-1"));
  for (int hd : {0, 16, 96, 100, 1024, -128}) {
    std::memset(err.message, 0, sizeof err.message);
    CHECK(oscar_fwht_bf16(d, 4, hd, 0, nullptr, &err) == OSCAR_ERR_UNSUPPORTED);
    CHECK(says(err, "oscar_fwht_bf16: head_dim="));
  }
  // No rows: nothing to do, whatever the pointer (the transform of an empty batch is a no-op).
  CHECK(oscar_fwht_bf16(nullptr, 0, 128, 1, nullptr, &err) == OSCAR_OK);
  // A NULL err is allowed: the status alone reports the fault.
  CHECK(oscar_fwht_bf16(nullptr, 4, 128, 1, nullptr, nullptr) == OSCAR_ERR_INVALID_ARGUMENT);
}

TEST_CASE("oscar_fwht_f32 keeps its checks and names itself", "[fwht][api]") {
  Fake f;
  auto* d = reinterpret_cast<float*>(f.bytes);
  oscar_error err{};
  CHECK(oscar_fwht_f32(nullptr, 4, 128, 1, nullptr, &err) == OSCAR_ERR_INVALID_ARGUMENT);
  CHECK(says(err, "oscar_fwht_f32: data is NULL"));
  CHECK(oscar_fwht_f32(d + 1, 4, 128, 1, nullptr, &err) == OSCAR_ERR_MISALIGNED);
  CHECK(oscar_fwht_f32(d, 4, 96, 1, nullptr, &err) == OSCAR_ERR_UNSUPPORTED);
  CHECK(says(err, "oscar_fwht_f32: head_dim=96"));
}

TEST_CASE("oscar_fwht_bf16 on valid input without a GPU fails as a CUDA error", "[fwht][api]") {
  if (oscar_device_count() > 0) return;  // with a GPU the launch would touch the (host) pointer
  Fake f;
  oscar_error err{};
  const oscar_status s = oscar_fwht_bf16(f.bytes, 4, 128, 1, nullptr, &err);
  CHECK(s == OSCAR_ERR_CUDA);
  CHECK(says(err, "oscar_fwht_bf16: CUDA error"));
}
