// decode/args.h: the per-call arguments of a split-KV decode step, shared by the decode kernels of both
// formats, the BF16 baseline and the merge. Plain struct (host and device), passed by value.
#pragma once
#include <cstdint>

#include "oscar/host_device.h"

namespace oscar::kernels {

constexpr float kLog2e = 1.4426950408889634f;  // natural-log logits -> the log2 units the decode kernels work in

// An in-kernel rotation (oscar_rotation of oscar_kv.h; rule in oscar/rotate_math.h): kind 0 none, 1 Hadamard,
// 2 matrix (key: R_K, value: R_V, [per_head ? Hkv : 1][HD][HD] float32 row-major).
struct RotArgs {
  int kind = 0, per_head = 0;
  const float* key = nullptr;
  const float* value = nullptr;
};

// The matrix of KV head h in m (per-head matrices are consecutive hd x hd blocks; one shared when per_head = 0).
OSCAR_HD const float* head_matrix(const float* m, int per_head, int h, int hd) {
  return m + (per_head ? static_cast<int64_t>(h) * hd * hd : 0);
}

struct DecodeArgs {
  const uint16_t* q;  // bf16 [B][Hq][head_dim]
  const int32_t* lens;
  int Hq, Hkv, G;     // G = Hq / Hkv query heads per KV head
  int QS;             // query slots per (bh, part) in the workspace: 8 * ceil(G / 8) (grid z = QS / 8)
  int nsplit;         // body splits (quantized) or splits (bf16)
  int nwin;           // quantized: blocks sharing the BF16 windows (parts nsplit .. nsplit + nwin - 1)
  int np;             // parts per (bh) = nsplit + nwin
  int64_t split_len;
  float sl2;          // softmax scale * log2(e)
  float* part_o;      // [BH][np][QS][head_dim]
  float* part_ml;     // [BH][np][QS][2] (max in log2 units, sum)
  RotArgs rot;        // the merge un-rotates the output by R_V when rot.kind != 0 (q was rotated before the decode grid)
  float cap2 = 0.f;   // soft-capping in log2 units: softcap * log2(e) (scores s -> cap2 tanh(s / cap2)); 0 = none
  const float* sinks = nullptr;  // [Hq] natural-log sink logits joining each query head's softmax denominator; null = none
  // One launch per decode (decode/unit_merge.cuh): the cache's arrival counters, one per (bh, query group), zero between
  // decodes; the last block of a unit merges its partials into out. Null: the merge runs as a kernel of its own.
  uint32_t* arrivals = nullptr;
  float* out = nullptr;  // float32 [B][Hq][head_dim] (the fused merge's output)
};

}  // namespace oscar::kernels
