/* SPDX-License-Identifier: MIT */
/* The per-tenant block map (src/tenant.h) against a plain array, under
 * random adds and removals that crowd a small map with collisions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tenant.h"
#include "test_util.h"

#define TENANTS 24 /* ids 0..23, spread over 1000 * id to collide */

static void test_map_matches_a_recount(void **state)
{
    (void)state;
    pkv__allocator a = test_allocator();
    pkv__tenant_map map;
    assert_int_equal(pkv__tenant_map_init(&map, &a, TENANTS), PKV_OK);
    uint64_t want[TENANTS] = {0};
    uint64_t rng = 7;
    for (int op = 0; op < 200000; op++) {
        uint32_t t = (uint32_t)(test_rand(&rng) % TENANTS);
        int64_t delta = (int64_t)(test_rand(&rng) % 5) - 2;
        if ((int64_t)want[t] + delta < 0)
            delta = -(int64_t)want[t];
        pkv__tenant_add(&map, t * 1000, delta);
        want[t] = (uint64_t)((int64_t)want[t] + delta);
        if (op % 97 == 0) {
            uint32_t entries = 0, holders = 0;
            for (uint32_t i = 0; i <= map.mask; i++)
                entries += map.blocks[i] != 0;
            for (uint32_t i = 0; i < TENANTS; i++) {
                assert_int_equal(pkv__tenant_blocks(&map, i * 1000), want[i]);
                holders += want[i] != 0;
            }
            assert_int_equal(entries, holders);
        }
    }
    assert_int_equal(pkv__tenant_blocks(&map, 12345), 0);
    pkv__tenant_map_release(&map, &a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_map_matches_a_recount),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
