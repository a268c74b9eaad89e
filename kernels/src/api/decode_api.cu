// api/decode_api.cu: the C entry points every decode shares (oscar_kv.h): the workspace size of each format's decode
// and the largest query group.
#include "decode/checks.h"
#include "decode/rotate_q.h"
#include "decode/split_plan.h"
#include "oscar_kv.h"

using namespace oscar;

extern "C" int oscar_max_query_group(void) { return kernels::kMaxQueryGroup; }

extern "C" size_t oscar_decode_workspace_bytes(int32_t batch, int32_t num_q_heads, int32_t num_kv_heads, int32_t head_dim,
                                               int32_t max_seq_len, int32_t quantized) {
  namespace plan = kernels::plan;
  if (batch <= 0 || num_kv_heads <= 0 || num_q_heads <= 0 || num_q_heads % num_kv_heads != 0 || max_seq_len < 0 || head_dim <= 0)
    return 0;
  const int64_t bh = static_cast<int64_t>(batch) * num_kv_heads;
  const int groups = plan::query_groups(num_q_heads / num_kv_heads);
  const int64_t units = bh * groups;
  const int sms = plan::sm_count();
  const int np = quantized ? plan::quant_parts_bound(units, max_seq_len, plan::blocks_per_sm(head_dim), sms)
                           : plan::bf16_plan(units, max_seq_len, sms).parts();
  // quantized: room for the rotated queries of a rotated decode after the partials
  return plan::workspace_bytes(bh, np, 8 * groups, head_dim) + (quantized ? kernels::rotated_q_bytes(batch, num_q_heads, head_dim) : 0);
}
