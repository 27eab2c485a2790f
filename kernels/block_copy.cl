/* SPDX-License-Identifier: MIT */
/*
 * Copy a list of units (blocks of one layer's arena, or staging tails) from
 * one buffer to another, or within one, in one launch: copy-on-write of the
 * blocks forks share, a u8 fork's staging tail, swap-out through a
 * transfer buffer the host then reads whole, and swap-in and stage-in from
 * the host's bytes, which the backend first writes whole into that buffer
 * (a host write never lands in the middle of an arena).
 *
 * units[2 p] and units[2 p + 1] are pair p's destination and source units,
 * each offset by dst_add / src_add (so one list serves every layer of a
 * swap). No unit is written twice or both written and read by one launch
 * (the backend checks). Units are whole multiples of 16 bytes (kv_layout.h
 * pads every part). Work-item (i, p) copies the i-th 16 bytes of pair p,
 * so consecutive work-items stream consecutive memory.
 */
__kernel void pkv_block_copy(__global uint4 *dst, uint dst_add,
                             __global const uint4 *src, uint src_add,
                             __global const uint *units, uint unit_words4)
{
    uint i = (uint)get_global_id(0);
    uint p = (uint)get_global_id(1);
    if (i >= unit_words4)
        return;
    size_t d = (size_t)(units[2 * p] + dst_add) * unit_words4 + i;
    size_t s = (size_t)(units[2 * p + 1] + src_add) * unit_words4 + i;
    dst[d] = src[s];
}
