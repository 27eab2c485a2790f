/* SPDX-License-Identifier: MIT */
/* How the decode kernels split the context into partitions (decode_plan.h). */
#include "decode_plan.h"

static uint32_t div_up(uint64_t a, uint64_t b)
{
    return (uint32_t)((a + b - 1) / b);
}

pkv__decode_plan pkv__decode_plan_make(uint32_t num_seqs,
                                       uint32_t num_kv_heads,
                                       uint32_t max_context,
                                       uint32_t sliding_window,
                                       uint32_t block_size,
                                       uint32_t compute_units,
                                       uint32_t max_partition)
{
    uint32_t bs = block_size > 0 ? block_size : 1;
    uint64_t span = max_context > 0 ? max_context : 1;
    /* Partitions start at the window start rounded down to a block, so a
     * window covers at most w + bs - 1 tokens of block-aligned span. */
    if (sliding_window > 0 && (uint64_t)sliding_window + bs - 1 < span)
        span = (uint64_t)sliding_window + bs - 1;
    uint32_t span_blocks = div_up(span, bs);
    uint64_t units = (uint64_t)(num_seqs > 0 ? num_seqs : 1) *
                     (num_kv_heads > 0 ? num_kv_heads : 1);
    uint64_t want = (uint64_t)(compute_units > 0 ? compute_units : 1) *
                    PKV__DECODE_ITEMS_PER_CU;
    uint32_t parts = units >= want ? 1u : div_up(want, units);
    uint32_t part_blocks = div_up(span_blocks, parts);
    uint32_t min_blocks = div_up(PKV__DECODE_MIN_PARTITION, bs);
    if (part_blocks < min_blocks)
        part_blocks = min_blocks;
    if (max_partition > 0 && part_blocks > max_partition / bs)
        part_blocks = max_partition / bs > 0 ? max_partition / bs : 1;
    if (part_blocks > span_blocks)
        part_blocks = span_blocks;
    pkv__decode_plan plan;
    plan.partition_size = part_blocks * bs;
    plan.num_partitions = div_up(span_blocks, part_blocks);
    return plan;
}
