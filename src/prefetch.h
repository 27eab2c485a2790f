/* SPDX-License-Identifier: MIT */
/*
 * Prefetching ahead in the step's loops over sequences. A cold step (the
 * host's forward pass evicted the engine's state) is bound by chains of
 * misses per sequence: its pointer, then its fields, then its table's
 * last block id, then that block's pool entry. The out-of-order window
 * holds only about two sequences' work, so the loops prefetch each link
 * a few sequences ahead (docs/performance.md, "Prefetching ahead").
 */
#ifndef PKV_PREFETCH_H
#define PKV_PREFETCH_H

#if defined(__GNUC__) || defined(__clang__)
#define PKV__PREFETCH(address) __builtin_prefetch(address)
#define PKV__PREFETCH_WRITE(address) __builtin_prefetch((address), 1)
#else
#define PKV__PREFETCH(address) ((void)(address))
#define PKV__PREFETCH_WRITE(address) ((void)(address))
#endif

/* How many sequences ahead a loop prefetches a sequence's fields; the
 * next link of its chain comes half as far ahead, once they arrived. 8,
 * 16 and 32 measured about the same; 16 covers a miss to memory (about
 * 100 ns) in step_end's loop, the shortest. */
#define PKV__PREFETCH_AHEAD 16

#endif
