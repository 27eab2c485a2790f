/* SPDX-License-Identifier: MIT */
/* The scheduler's sequence lists (src/seq.h) against a plain array, under
 * random insertions and removals at either end and in the middle, with the
 * list full (so that an insertion must slide the array back to its base)
 * and growing as the engine reserves it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "seq.h"
#include "mem_util.h"
#include "rng.h"

#include <string.h>

#define MAX 200

static void test_seq_list_matches_an_array(void **state)
{
    (void)state;
    pkv__allocator a = plain_allocator();
    pkv__seq seqs[MAX];
    pkv__seq *want[MAX];
    uint32_t n = 0;
    pkv__seq_list list;
    memset(&list, 0, sizeof list);
    uint64_t rng = 3;
    for (int op = 0; op < 200000; op++) {
        uint64_t r = test_rand(&rng);
        /* Mostly the ends, where the scheduler works; the middle too. */
        uint32_t where = (uint32_t)(r >> 8) % 4;
        if (r % 2 == 0 && n < MAX) {
            uint32_t at = where == 0   ? 0
                          : where == 1 ? n
                                       : (uint32_t)((r >> 16) % (n + 1));
            /* As the engine does: room reserved before the insertion. */
            assert_int_equal(pkv__seq_list_reserve(&list, &a, n + 1),
                             PKV_OK);
            memmove(want + at + 1, want + at, (n - at) * sizeof *want);
            want[at] = &seqs[op % MAX];
            pkv__seq_list_insert(&list, at, want[at]);
            n++;
        } else if (n > 0) {
            uint32_t at = where == 0   ? 0
                          : where == 1 ? n - 1
                                       : (uint32_t)((r >> 16) % n);
            memmove(want + at, want + at + 1, (n - at - 1) * sizeof *want);
            pkv__seq_list_remove_at(&list, at);
            n--;
        }
        assert_int_equal(list.count, n);
        assert_true(list.items >= list.base &&
                    list.items + list.count <= list.base + list.capacity);
        assert_memory_equal(list.items, want, n * sizeof *want);
    }
    pkv__seq_list_release(&list, &a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seq_list_matches_an_array),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
