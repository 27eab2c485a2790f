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
 *   u8:       token-major codes [token][channel], then the group parameters:
 *             per-channel: lo[head_dim] then scale[head_dim], as f16;
 *             per-token:   lo[block_size] then scale[block_size], as f16.
 * Every part is padded to PKV_LAYOUT_ALIGN bytes so that vector loads of a
 * part start aligned. A block is self-contained: codes and parameters move
 * together for copy-on-write, swap and eviction.
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
#define PKV_LAYOUT_PER_CHANNEL 1
#define PKV_LAYOUT_PER_TOKEN 2

/* Bytes of the u8 group parameters (f16 lo and scale) of one part. */
#define PKV_LAYOUT_U8_PARAM_BYTES(group, block_size, head_dim)         \
    ((group) == PKV_LAYOUT_PER_CHANNEL ? 2 * 2 * (head_dim)             \
                                       : 2 * 2 * (block_size))

/* Bytes of one K or V part of one kv head of one block. */
#define PKV_LAYOUT_PART_BYTES(dtype, group, block_size, head_dim)          \
    PKV_LAYOUT_ALIGN_UP(                                                   \
        (dtype) == PKV_LAYOUT_F32   ? 4 * (block_size) * (head_dim)        \
        : (dtype) == PKV_LAYOUT_F16 ? 2 * (block_size) * (head_dim)        \
                                    : (block_size) * (head_dim) +          \
              PKV_LAYOUT_U8_PARAM_BYTES(group, block_size, head_dim))

/* Groups of one u8 part: lo/scale pairs it holds. */
#define PKV_LAYOUT_U8_GROUPS(group, block_size, head_dim) \
    ((group) == PKV_LAYOUT_PER_CHANNEL ? (head_dim) : (block_size))

/* Byte offsets inside a u8 part: codes at 0, then lo[groups], then
 * scale[groups]. block_size * head_dim is even (head_dim is a multiple of
 * 4), so the f16 parameters are 2-byte aligned. */
#define PKV_LAYOUT_U8_LO_OFFSET(block_size, head_dim) \
    ((block_size) * (head_dim))
#define PKV_LAYOUT_U8_SCALE_OFFSET(group, block_size, head_dim) \
    ((block_size) * (head_dim) +                                \
     2 * PKV_LAYOUT_U8_GROUPS(group, block_size, head_dim))

/* Bytes of one kv head of one block: its K part then its V part. */
#define PKV_LAYOUT_HEAD_BYTES(dtype, key_group, value_group, block_size,    \
                              head_dim)                                     \
    (PKV_LAYOUT_PART_BYTES(dtype, key_group, block_size, head_dim) +        \
     PKV_LAYOUT_PART_BYTES(dtype, value_group, block_size, head_dim))

/* Bytes of one block in one layer's arena (all kv heads). The block b of a
 * layer starts at b * PKV_LAYOUT_LAYER_BLOCK_BYTES(...); the K part of kv
 * head h at h * PKV_LAYOUT_HEAD_BYTES(...) within it, the V part right after
 * the K part. */
#define PKV_LAYOUT_LAYER_BLOCK_BYTES(dtype, key_group, value_group,         \
                                     block_size, head_dim, num_kv_heads)    \
    ((num_kv_heads) * PKV_LAYOUT_HEAD_BYTES(dtype, key_group, value_group,  \
                                            block_size, head_dim))

#endif
