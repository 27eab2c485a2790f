/* SPDX-License-Identifier: MIT */
/*
 * How the split-K decode kernels (kernels/decode_common.cl) divide the
 * context: one work-item, subgroup or work-group per (partition, kv head,
 * sequence).
 *
 * The rule: a device wants at least PKV__DECODE_ITEMS_PER_CU work units
 * per compute unit so that every unit stays busy and a late one does not
 * hold the step; batch x kv heads gives some of them, the rest come from
 * splitting the context. A partition never goes below
 * PKV__DECODE_MIN_PARTITION tokens (rounded up to whole blocks): each one
 * writes head_dim floats per query head for the reduction, which stays a
 * few percent of the KV it reads at that length. Large batches therefore
 * get one partition and no reduction kernel.
 */
#ifndef PKV_DECODE_PLAN_H
#define PKV_DECODE_PLAN_H

#include <stdint.h>

#define PKV__DECODE_ITEMS_PER_CU 8u
#define PKV__DECODE_MIN_PARTITION 256u

typedef struct pkv__decode_plan {
    uint32_t partition_size; /* tokens, a multiple of block_size */
    uint32_t num_partitions; /* >= 1; 1 means no reduction kernel */
} pkv__decode_plan;

/* The plan for num_seqs decode rows over num_kv_heads kv heads, the longest
 * context max_context (>= 1), sliding_window (0: none), block_size, the
 * device's CL_DEVICE_MAX_COMPUTE_UNITS and the variant's longest partition
 * (tokens; 0: none; it overrides the minimum). Pure arithmetic, never
 * fails. */
pkv__decode_plan pkv__decode_plan_make(uint32_t num_seqs,
                                       uint32_t num_kv_heads,
                                       uint32_t max_context,
                                       uint32_t sliding_window,
                                       uint32_t block_size,
                                       uint32_t compute_units,
                                       uint32_t max_partition);

#endif
