// decode/shapes.h: THE list of compiled (head_dim, bits) shapes of the quantized formats. It drives the
// explicit instantiations of every kernel and each format's dispatch table, so a new shape is one line here.
// Query heads per KV head: 1 .. kMaxQueryGroup (decode/checks.h), any shape.
#pragma once

// X(head_dim, bits) for every compiled shape.
#define OSCAR_KV_SHAPES(X) \
  X(64, 2)                 \
  X(64, 4)                 \
  X(128, 2)                \
  X(128, 4)                \
  X(256, 2)                \
  X(256, 4)

// X(head_dim) for every compiled head_dim of the BF16 baseline and the merge.
#define OSCAR_KV_HEAD_DIMS(X) \
  X(64)                       \
  X(128)                      \
  X(256)

#define OSCAR_KV_SHAPES_TEXT "head_dim 64, 128 or 256 with bits 2 or 4"
