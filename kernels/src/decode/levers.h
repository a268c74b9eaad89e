// decode/levers.h: compile-time switches of the decode kernels' instruction-count levers, all on by default; an
// ablation build turns one off with -DOSCAR_LEVER_X=0 (experiments/device/decode_ablation.sh measures each alone).
//   LOP3   one lop3.b32 per code pair in the magic-number dequantization (decode/mma.cuh), bit-identical
//   EX2    the softmax's 2^x as one ex2.approx.ftz (decode/warp_state.cuh) instead of exp2f's four instructions
//   SCORE  oscar-cov scores as one FMA: the MMA accumulator starts at -qbias, the softmax scale folded into the key
//          scale and sum(q), masking only in a split's partial last chunk, P' rounded to bf16 once
//   LAZY   the online softmax (oscar-cov, oscar-omni) rescales only when the running max grows by more than 2^8 (warp vote)
//   DENSE  oscar-cov, query groups of at most 4 heads: two 16-token sub-tiles per QK MMA (block-diagonal query
//          fragments), so that no score is padding and the softmax does half the work
//   FENCE  the in-grid merge's arrival (decode/unit_merge.cuh) as one release/acquire atomic of thread 0 after the
//          block's barrier, instead of a __threadfence() by every thread before it
#pragma once
#ifndef OSCAR_LEVER_LOP3
#define OSCAR_LEVER_LOP3 1
#endif
#ifndef OSCAR_LEVER_EX2
#define OSCAR_LEVER_EX2 1
#endif
#ifndef OSCAR_LEVER_SCORE
#define OSCAR_LEVER_SCORE 1
#endif
#ifndef OSCAR_LEVER_LAZY
#define OSCAR_LEVER_LAZY 1
#endif
#ifndef OSCAR_LEVER_DENSE
#define OSCAR_LEVER_DENSE 1
#endif
#ifndef OSCAR_LEVER_FENCE
#define OSCAR_LEVER_FENCE 1
#endif
