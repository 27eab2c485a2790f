/* SPDX-License-Identifier: MIT */
/* The engine's hash map (src/map.h) against a plain array, under random
 * puts, removals and growth, with keys chosen to collide. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "map.h"
#include "mem_util.h"
#include "rng.h"

#define KEYS 300

static void test_map_matches_an_array(void **state)
{
    (void)state;
    pkv__allocator a = plain_allocator();
    pkv__map map;
    pkv__map_init(&map);
    assert_int_equal(pkv__map_get(&map, 5), 0);
    pkv__map_put(&map, 5, 0); /* removing from an empty map: nothing */
    uint64_t want[KEYS] = {0};
    uint64_t rng = 11;
    uint32_t live = 0;
    for (int op = 0; op < 300000; op++) {
        uint32_t k = (uint32_t)(test_rand(&rng) % KEYS);
        /* Keys 1 << 32 apart: the same low bits, as tenant ids or
         * sequence ids of one run are not. */
        uint64_t key = ((uint64_t)k << 32) | 7u;
        uint64_t value = test_rand(&rng) % 3 == 0 ? 0 : test_rand(&rng) | 1;
        if (want[k] == 0 && value != 0) {
            /* Grow in steps, as the engine reserves for its live count. */
            assert_int_equal(pkv__map_reserve(&map, &a, live + 1), PKV_OK);
            live++;
        } else if (want[k] != 0 && value == 0) {
            live--;
        }
        pkv__map_put(&map, key, value);
        want[k] = value;
        assert_int_equal(map.count, live);
        if (op % 101 == 0)
            for (uint32_t i = 0; i < KEYS; i++)
                assert_int_equal(pkv__map_get(&map, ((uint64_t)i << 32) | 7u),
                                 want[i]);
    }
    pkv__map_release(&map, &a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_map_matches_an_array),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
