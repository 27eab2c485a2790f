/* SPDX-License-Identifier: MIT */
/*
 * Copy one unit (a block of one layer's arena, or a staging tail) to
 * another within the same buffer: copy-on-write of a block a fork shares,
 * and a u8 fork's staging tail. Units are whole multiples of 16 bytes
 * (kv_layout.h pads every part). Work-item i copies the i-th 16 bytes, so
 * consecutive work-items stream consecutive memory.
 */
__kernel void pkv_block_copy(__global uint4 *buf, ulong src_unit,
                             ulong dst_unit, uint unit_words4)
{
    uint i = (uint)get_global_id(0);
    if (i >= unit_words4)
        return;
    buf[dst_unit * unit_words4 + i] = buf[src_unit * unit_words4 + i];
}
