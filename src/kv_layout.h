/* SPDX-License-Identifier: MIT */
/*
 * Byte layout of one KV cache block, shared by the C code and the OpenCL
 * kernels (this file is valid C11 and OpenCL C 1.2: macros only).
 *
 * Each layer has one arena of num_blocks blocks. Within a block, kv heads
 * follow each other; within a kv head, the K part then the V part:
 *
 *   block b of layer l:  [ head 0: K part | V part ][ head 1: ... ] ...
 *
 * A part holds block_size tokens of head_dim channels:
 *   f32, f16: token-major elements, [token][channel].
 *   u8, u4:   token-major codes [token][channel] (u4: two a byte, channel
 *             2i in the low nibble of byte i of the row, 2i + 1 in the
 *             high one), then the group parameters, as f16:
 *             per-channel: lo[head_dim] then scale[head_dim];
 *             per-token:   lo[block_size][groups of a row] then scale[...],
 *             a row's groups being head_dim (u8: one) or u4_group
 *             channels each (u4).
 * A cache of dtype PKV_LAYOUT_U8K_U4V stores its K parts as u8 and its V
 * parts as u4. Every part is padded to PKV_LAYOUT_ALIGN bytes so that
 * vector loads of a part start aligned. A block is self-contained: codes
 * and parameters move together for copy-on-write, swap and eviction.
 *
 * In the macros below `pd` is a part's own dtype (PKV_LAYOUT_KEY_DTYPE or
 * _VALUE_DTYPE of the cache's), `group` its pkv_quant_group and `u4g` the
 * cache's u4 group width (ignored by every other part).
 */
#ifndef PKV_KV_LAYOUT_H
#define PKV_KV_LAYOUT_H

#define PKV_LAYOUT_ALIGN 16
#define PKV_LAYOUT_ALIGN_UP(bytes) \
    (((bytes) + PKV_LAYOUT_ALIGN - 1) / PKV_LAYOUT_ALIGN * PKV_LAYOUT_ALIGN)

/* Geometry limits every backend and kernel may size fixed arrays by. */
#define PKV_LAYOUT_MAX_HEAD_DIM 512
#define PKV_LAYOUT_MAX_BLOCK_SIZE 256

/* Values of pkv_kv_dtype and pkv_quant_group (pkv.h), for the kernels. */
#define PKV_LAYOUT_F32 0
#define PKV_LAYOUT_F16 1
#define PKV_LAYOUT_U8 2
#define PKV_LAYOUT_U4 3
#define PKV_LAYOUT_U8K_U4V 4
#define PKV_LAYOUT_PER_CHANNEL 1
#define PKV_LAYOUT_PER_TOKEN 2

/* The dtype of a cache's K parts and of its V parts. */
#define PKV_LAYOUT_KEY_DTYPE(dtype) \
    ((dtype) == PKV_LAYOUT_U8K_U4V ? PKV_LAYOUT_U8 : (dtype))
#define PKV_LAYOUT_VALUE_DTYPE(dtype) \
    ((dtype) == PKV_LAYOUT_U8K_U4V ? PKV_LAYOUT_U4 : (dtype))

/* Whether a cache's blocks are quantized when full (u8, u4, u8k_u4v):
 * such caches keep the last block's rows in an f32 staging tail. */
#define PKV_LAYOUT_QUANTIZED(dtype) ((dtype) >= PKV_LAYOUT_U8)

/* The largest code of a quantized part: codes are 0..levels. */
#define PKV_LAYOUT_Q_LEVELS(pd) ((pd) == PKV_LAYOUT_U4 ? 15 : 255)

/* Channels of one per-token group of a quantized part. */
#define PKV_LAYOUT_Q_WIDTH(pd, u4g, head_dim) \
    ((pd) == PKV_LAYOUT_U4 ? (u4g) : (head_dim))

/* lo/scale pairs of one quantized part. */
#define PKV_LAYOUT_Q_GROUPS(pd, group, u4g, block_size, head_dim)          \
    ((group) == PKV_LAYOUT_PER_CHANNEL                                     \
         ? (head_dim)                                                      \
         : (block_size) * ((head_dim) /                                    \
                           PKV_LAYOUT_Q_WIDTH(pd, u4g, head_dim)))

/* Bytes of the codes of one quantized part; block_size * head_dim is a
 * multiple of 4 (head_dim is), so the f16 parameters after them are
 * 2-byte aligned. */
#define PKV_LAYOUT_Q_CODE_BYTES(pd, block_size, head_dim) \
    ((pd) == PKV_LAYOUT_U4 ? (block_size) * (head_dim) / 2 \
                           : (block_size) * (head_dim))

/* Byte offsets inside a quantized part: codes at 0, then lo[groups], then
 * scale[groups]. */
#define PKV_LAYOUT_Q_LO_OFFSET(pd, block_size, head_dim) \
    PKV_LAYOUT_Q_CODE_BYTES(pd, block_size, head_dim)
#define PKV_LAYOUT_Q_SCALE_OFFSET(pd, group, u4g, block_size, head_dim) \
    (PKV_LAYOUT_Q_CODE_BYTES(pd, block_size, head_dim) +                \
     2 * PKV_LAYOUT_Q_GROUPS(pd, group, u4g, block_size, head_dim))

/* Bytes of one K or V part of one kv head of one block. */
#define PKV_LAYOUT_PART_BYTES(pd, group, u4g, block_size, head_dim)        \
    PKV_LAYOUT_ALIGN_UP(                                                   \
        (pd) == PKV_LAYOUT_F32   ? 4 * (block_size) * (head_dim)           \
        : (pd) == PKV_LAYOUT_F16 ? 2 * (block_size) * (head_dim)           \
                                 : PKV_LAYOUT_Q_CODE_BYTES(pd, block_size, \
                                                           head_dim) +     \
              4 * PKV_LAYOUT_Q_GROUPS(pd, group, u4g, block_size, head_dim))

/* Bytes of one kv head of one block: its K part then its V part. */
#define PKV_LAYOUT_HEAD_BYTES(dtype, key_group, value_group, u4g,          \
                              block_size, head_dim)                        \
    (PKV_LAYOUT_PART_BYTES(PKV_LAYOUT_KEY_DTYPE(dtype), key_group, u4g,    \
                           block_size, head_dim) +                         \
     PKV_LAYOUT_PART_BYTES(PKV_LAYOUT_VALUE_DTYPE(dtype), value_group, u4g, \
                           block_size, head_dim))

/* Bytes of one block in one layer's arena (all kv heads). The block b of a
 * layer starts at b * PKV_LAYOUT_LAYER_BLOCK_BYTES(...); the K part of kv
 * head h at h * PKV_LAYOUT_HEAD_BYTES(...) within it, the V part right after
 * the K part. */
#define PKV_LAYOUT_LAYER_BLOCK_BYTES(dtype, key_group, value_group, u4g,    \
                                     block_size, head_dim, num_kv_heads)    \
    ((num_kv_heads) * PKV_LAYOUT_HEAD_BYTES(dtype, key_group, value_group,  \
                                            u4g, block_size, head_dim))

#endif
