/* fuzz_select.c - fuzz target: the collective selector's table (parallel/select.c,
 * ct__select_parse: files given to ct_topo_load_select_table, e.g. from bench_allreduce
 * --write-table). A table that parses has at most CT__SELECT_MAX rows, each naming an algorithm
 * of its collective with sane group sizes. */
#include "fuzz_util.h"
#include "parallel_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    CT_FUZZ_REQUIRE(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    ct_err err = {0};
    ct__select_row rows[CT__SELECT_MAX + 1];
    memset(rows, 0x5a, sizeof rows);
    int n = -1;
    ct_status st = ct__select_parse(text, rows, CT__SELECT_MAX, &n, &err);
    if (st != CT_OK) {
        ct_fuzz_check_fail(st, &err);
        CT_FUZZ_REQUIRE(n == 0);
    } else {
        CT_FUZZ_REQUIRE(n >= 0 && n <= CT__SELECT_MAX);
        for (int i = 0; i < n; i++) {
            const ct__select_row *r = &rows[i];
            CT_FUZZ_REQUIRE(ct__algo_find(r->coll, r->algo) != NULL);
            CT_FUZZ_REQUIRE(r->nmin >= 1 && (r->nmax == 0 || r->nmax >= r->nmin));
            CT_FUZZ_REQUIRE(r->local >= -1 && r->local <= 2);
        }
    }
    /* the guard row past the end is never written */
    unsigned char guard[sizeof rows[0]];
    memset(guard, 0x5a, sizeof guard);
    CT_FUZZ_REQUIRE(!memcmp(&rows[CT__SELECT_MAX], guard, sizeof guard));
    free(text);
    return 0;
}
