/* SPDX-License-Identifier: MIT */
/*
 * Copy one unit (a block of one layer's arena, or a staging tail) from one
 * buffer to another, or within one: copy-on-write of a block a fork
 * shares, a u8 fork's staging tail, and swap-in and stage-in from the
 * host's bytes, which the backend first writes whole into a transfer
 * buffer (a host write never lands in the middle of an arena). Units are
 * whole multiples of 16 bytes (kv_layout.h pads every part). Work-item i
 * copies the i-th 16 bytes, so consecutive work-items stream consecutive
 * memory.
 */
__kernel void pkv_block_copy(__global uint4 *dst, ulong dst_unit,
                             __global const uint4 *src, ulong src_unit,
                             uint unit_words4)
{
    uint i = (uint)get_global_id(0);
    if (i >= unit_words4)
        return;
    dst[dst_unit * unit_words4 + i] = src[src_unit * unit_words4 + i];
}
