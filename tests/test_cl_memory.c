/* test_cl_memory - buffers counted by category (current and peak), the cap and the max allocation
 * give clear errors naming the tensor and bytes, nothing is leaked, copies and maps round-trip;
 * an arena is cut into pieces of whole parts below a lowered max allocation, each byte found in
 * its piece, range copies and zeroing across pieces (blocking and not) match a host copy, and a
 * part above the limit is refused by name. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ct_cl.h"
#include "ct_test.h"
#include "ct_test_dev.h"

int main(void) {
    ct_err err = {0};
    ct_test_devices ds;
    if (ct_test_devices_find(&ds, NULL, 1)) return ct_test_end("test_cl_memory");
    const ct_device_info *list = ds.list;
    int pick = ds.pick[0];
    ct_device *d = NULL;
    ct_device_opts o = ct_device_opts_default();
    o.mem_cap = 8u << 20; /* 8 MiB */
    o.apply_tuning = 0;
    o.cache_dir = "";
    CT_ASSERT_OK(ct_device_open(&d, &list[pick], &o, &err), err.msg);
    if (!d) return ct_test_end("test_cl_memory");

    ct_buffer *p = NULL, *g = NULL, *a1 = NULL, *a2 = NULL, *big = NULL;
    CT_ASSERT_OK(ct_buffer_alloc(d, CT_MEM_PARAMS, "params", 1 << 20, &p), ct_device_errmsg(d));
    CT_ASSERT_OK(ct_buffer_alloc(d, CT_MEM_GRADS, "grads", 1 << 20, &g), ct_device_errmsg(d));
    CT_ASSERT_OK(ct_buffer_alloc(d, CT_MEM_ACTIVATIONS, "act1", 2 << 20, &a1), ct_device_errmsg(d));
    ct_mem_stats s;
    ct_device_mem_stats(d, &s);
    CT_ASSERT_EQ_INT(s.current[CT_MEM_PARAMS], 1 << 20);
    CT_ASSERT_EQ_INT(s.current[CT_MEM_GRADS], 1 << 20);
    CT_ASSERT_EQ_INT(s.current[CT_MEM_ACTIVATIONS], 2 << 20);
    CT_ASSERT_EQ_INT(s.current[CT_MEM_OPTIMIZER], 0);
    CT_ASSERT_EQ_INT(s.total_current, 4 << 20);
    CT_ASSERT_EQ_INT(s.live_buffers, 3);
    CT_ASSERT_EQ_INT(s.cap, 8u << 20);
    /* free one, allocate another: current follows, peak keeps the high-water mark */
    ct_buffer_free(a1);
    CT_ASSERT_OK(ct_buffer_alloc(d, CT_MEM_ACTIVATIONS, "act2", 1 << 20, &a2), ct_device_errmsg(d));
    ct_device_mem_stats(d, &s);
    CT_ASSERT_EQ_INT(s.current[CT_MEM_ACTIVATIONS], 1 << 20);
    CT_ASSERT_EQ_INT(s.peak[CT_MEM_ACTIVATIONS], 2 << 20);
    CT_ASSERT_EQ_INT(s.total_peak, 4 << 20);
    CT_ASSERT_EQ_INT(s.total_current, 3 << 20);
    /* over the cap: a clear error naming tensor, bytes and what is in use; nothing allocated */
    CT_ASSERT_EQ_INT(ct_buffer_alloc(d, CT_MEM_OPTIMIZER, "adam_m", 6 << 20, &big), CT_ERR_DEVICE_MEM);
    CT_ASSERT(big == NULL);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "adam_m");
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "6291456 bytes");
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "memory cap");
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "params 1.0 MiB");
    ct_device_mem_stats(d, &s);
    CT_ASSERT_EQ_INT(s.current[CT_MEM_OPTIMIZER], 0);
    CT_ASSERT_EQ_INT(s.live_buffers, 3);
    /* round trips: write/read with an offset, zero, map/unmap */
    float host[256], back[256];
    for (int i = 0; i < 256; i++) host[i] = (float)i * 0.5f - 3.0f;
    CT_ASSERT_OK(ct_buffer_write(p, 4096, host, sizeof host), ct_device_errmsg(d));
    memset(back, 0, sizeof back);
    CT_ASSERT_OK(ct_buffer_read(p, 4096, back, sizeof back), ct_device_errmsg(d));
    CT_ASSERT(memcmp(host, back, sizeof host) == 0);
    float head[4] = {1, 1, 1, 1};
    CT_ASSERT_OK(ct_buffer_read(p, 0, head, sizeof head), ct_device_errmsg(d));
    CT_ASSERT(head[0] == 0.0f && head[3] == 0.0f); /* new buffers are zeroed */
    void *m = NULL;
    CT_ASSERT_OK(ct_buffer_map(p, 4096, sizeof host, CL_MAP_READ | CL_MAP_WRITE, &m), ct_device_errmsg(d));
    if (m) {
        CT_ASSERT(memcmp(m, host, sizeof host) == 0);
        ((float *)m)[0] = 42.0f;
    }
    CT_ASSERT_OK(ct_buffer_unmap(p, m), ct_device_errmsg(d));
    CT_ASSERT_OK(ct_buffer_read(p, 4096, back, 4), ct_device_errmsg(d));
    CT_ASSERT(back[0] == 42.0f);
    CT_ASSERT_OK(ct_buffer_zero(p, 4096, sizeof host), ct_device_errmsg(d));
    CT_ASSERT_OK(ct_buffer_read(p, 4096, back, sizeof back), ct_device_errmsg(d));
    CT_ASSERT(back[0] == 0.0f && back[255] == 0.0f);
    /* out of range access is refused, not a crash */
    CT_ASSERT_EQ_INT(ct_buffer_write(p, (1 << 20) - 8, host, 64), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "outside its 1048576 bytes");
    ct_buffer_free(p), ct_buffer_free(g), ct_buffer_free(a2);
    ct_buffer_free(NULL);
    ct_device_mem_stats(d, &s);
    CT_ASSERT_EQ_INT(s.total_current, 0); /* nothing leaked */
    CT_ASSERT_EQ_INT(s.live_buffers, 0);
    ct_device_free(d);

    /* above CL_DEVICE_MAX_MEM_ALLOC_SIZE (cap raised so that is the limit that bites) */
    o.mem_cap = 0;
    CT_ASSERT_OK(ct_device_open(&d, &list[pick], &o, &err), err.msg);
    if (d) {
        size_t too_big = (size_t)list[pick].max_alloc_bytes + 4096;
        if (too_big <= list[pick].global_mem_bytes) {
            CT_ASSERT_EQ_INT(ct_buffer_alloc(d, CT_MEM_WORKSPACE, "huge", too_big, &big), CT_ERR_DEVICE_MEM);
            CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "CL_DEVICE_MAX_MEM_ALLOC_SIZE");
            CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "huge");
        }
        /* above the device's whole memory: the cap (= global memory) refuses it */
        CT_ASSERT_EQ_INT(ct_buffer_alloc(d, CT_MEM_WORKSPACE, "enormous",
                                         (size_t)list[pick].global_mem_bytes + 1, &big),
                         CT_ERR_DEVICE_MEM);
        CT_ASSERT(big == NULL);
        ct_device_mem_stats(d, &s);
        CT_ASSERT_EQ_INT(s.total_current, 0);
        CT_ASSERT_EQ_INT(s.live_buffers, 0);
    }
    ct_device_free(d);

    /* arenas: a logical allocation in pieces, each at most the (lowered) largest allocation */
    o.max_alloc = (uint64_t)list[pick].max_alloc_bytes * 2; /* above the device's: the device's */
    CT_ASSERT_OK(ct_device_open(&d, &list[pick], &o, &err), err.msg);
    if (d) CT_ASSERT_EQ_INT(ct_device_max_alloc(d), list[pick].max_alloc_bytes);
    ct_device_free(d);
    o.max_alloc = 1000;
    CT_ASSERT_OK(ct_device_open(&d, &list[pick], &o, &err), err.msg);
    if (d) {
        CT_ASSERT_EQ_INT(ct_device_max_alloc(d), 1000);
        CT_ASSERT_EQ_INT(ct_buffer_alloc(d, CT_MEM_WORKSPACE, "w", 1004, &big), CT_ERR_DEVICE_MEM);
        CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "lowered by the device options");
        /* parts of 100, 200, 400, 500, 300 and 500 bytes */
        static const size_t parts[] = {0, 100, 300, 700, 1200, 1500};
        static const char *const names[] = {"a", "b", "c", "d", "e", "f"};
        const size_t np_ = sizeof parts / sizeof *parts, total = 2000;
        ct_arena *a = NULL;
        CT_ASSERT_OK(ct_arena_alloc(d, CT_MEM_ACTIVATIONS, "acts", total, parts, names, np_, &a),
                     ct_device_errmsg(d));
        if (a) {
            int n_ = ct_arena_npieces(a);
            size_t start = 0, largest = 0;
            /* every piece: whole parts, at most the limit, and as long as the rule allows
             * (the next part would not have fitted) */
            for (int i = 0; i < n_; i++) {
                size_t in = 0;
                ct_buffer *b = ct_arena_at(a, start, &in);
                CT_ASSERT(b != NULL && in == 0);
                if (!b) break;
                size_t len = ct_buffer_bytes(b), end = start + len, k = 0;
                CT_ASSERT(len <= 1000);
                while (k < np_ && parts[k] < end) k++;
                CT_ASSERT(end == total || (k < np_ && parts[k] == end)); /* ends at a part */
                if (end < total) {
                    size_t next_end = k + 1 < np_ ? parts[k + 1] : total;
                    CT_ASSERT(next_end - start > 1000);
                }
                if (len > largest) largest = len;
                CT_ASSERT(ct_arena_piece_of(a, ct_buffer_mem(b)) == b);
                start = end;
            }
            CT_ASSERT_EQ_INT(start, total);
            CT_ASSERT_EQ_INT(n_, 3);
            CT_ASSERT_EQ_INT(ct_arena_largest_piece(a), largest);
            CT_ASSERT(ct_arena_piece_of(a, NULL) == NULL);
            /* each byte found in the piece that holds it: write the arena's bytes through the
             * lookup one part at a time, read them back piece by piece */
            unsigned char w[2000], r[2000];
            for (size_t i = 0; i < total; i++) w[i] = (unsigned char)(i * 7 + 3);
            for (size_t k = 0; k < np_; k++) {
                size_t in = 0, end = k + 1 < np_ ? parts[k + 1] : total;
                ct_buffer *b = ct_arena_at(a, parts[k], &in);
                CT_ASSERT_OK(ct_buffer_write(b, in, w + parts[k], end - parts[k]),
                             ct_device_errmsg(d));
            }
            for (size_t off = 0; off < total;) {
                size_t in = 0;
                ct_buffer *b = ct_arena_at(a, off, &in);
                CT_ASSERT_OK(ct_buffer_read(b, 0, r + off, ct_buffer_bytes(b)), ct_device_errmsg(d));
                CT_ASSERT_EQ_INT(in, 0);
                off += ct_buffer_bytes(b);
            }
            CT_ASSERT(memcmp(w, r, total) == 0);
            /* range copies across pieces (ct_arena_read/write/zero and the async forms) against
             * a host copy of the arena: ranges within one piece, across one boundary, across
             * all, empty, ending exactly at a boundary */
            static const size_t rg[][2] = {{0, 2000}, {50, 90},    {250, 800}, {299, 301},
                                           {700, 700}, {1200, 1700}, {1, 1999}, {1500, 2000}};
            unsigned char ref[2000], got[2000];
            memcpy(ref, w, total);
            for (size_t k = 0; k < sizeof rg / sizeof *rg; k++) {
                size_t lo = rg[k][0], nb = rg[k][1] - rg[k][0];
                unsigned char src[2000];
                for (size_t i = 0; i < nb; i++) src[i] = (unsigned char)(k * 31 + i);
                ct_event *ev = NULL;
                if (k % 3 == 0) {
                    CT_ASSERT_OK(ct_arena_write(a, lo, src, nb), ct_device_errmsg(d));
                    memcpy(ref + lo, src, nb);
                } else if (k % 3 == 1) {
                    CT_ASSERT_OK(ct_arena_write_async(a, lo, nb, src, &ev), ct_device_errmsg(d));
                    CT_ASSERT_OK(ct_event_wait_release(ev), ct_device_errmsg(d));
                    memcpy(ref + lo, src, nb);
                } else {
                    CT_ASSERT_OK(ct_arena_zero(a, lo, nb), ct_device_errmsg(d));
                    memset(ref + lo, 0, nb);
                }
                memset(got, 0xAA, sizeof got);
                if (k % 2) {
                    CT_ASSERT_OK(ct_arena_read(a, 0, got, total), ct_device_errmsg(d));
                } else { /* the last piece's event completes after the others (in-order queue) */
                    CT_ASSERT_OK(ct_arena_read_async(a, 0, total, got, &ev), ct_device_errmsg(d));
                    CT_ASSERT_OK(ct_event_wait_release(ev), ct_device_errmsg(d));
                }
                CT_ASSERT(memcmp(ref, got, total) == 0);
                memset(got, 0xAA, sizeof got);
                CT_ASSERT_OK(ct_arena_read(a, lo, got, nb), ct_device_errmsg(d));
                CT_ASSERT(memcmp(ref + lo, got, nb) == 0);
                size_t span = ct_arena_span(a, lo); /* to the end of lo's piece */
                size_t in2 = 0;
                ct_buffer *pb = ct_arena_at(a, lo, &in2);
                CT_ASSERT(pb != NULL && span == ct_buffer_bytes(pb) - in2);
            }
            CT_ASSERT_EQ_INT(ct_arena_span(a, total), 0);
            CT_ASSERT_EQ_INT(ct_arena_span(a, total + 1), 0);
            CT_ASSERT_EQ_INT(ct_arena_read(a, 1990, got, 11), CT_ERR_ARG);
            CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "outside its 2000 bytes");
            CT_ASSERT_EQ_INT(ct_arena_zero(a, 2001, 0), CT_ERR_ARG);
            size_t in = 1;
            CT_ASSERT(ct_arena_at(a, total, &in) != NULL && in == 500); /* the end: last piece's */
            CT_ASSERT(ct_arena_at(a, total + 1, &in) == NULL);
            ct_device_mem_stats(d, &s);
            CT_ASSERT_EQ_INT(s.current[CT_MEM_ACTIVATIONS], total);
            CT_ASSERT_EQ_INT(s.live_buffers, n_);
        }
        ct_arena_free(a);
        ct_arena_free(NULL);
        /* a part above the limit is refused by name, nothing left allocated */
        static const size_t two[] = {0, 100};
        CT_ASSERT_EQ_INT(ct_arena_alloc(d, CT_MEM_ACTIVATIONS, "acts", 1200, two, names, 2, &a),
                         CT_ERR_DEVICE_MEM);
        CT_ASSERT(a == NULL);
        CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "its part 'b' is");
        /* parts not starting at 0, or not increasing, or past the end */
        static const size_t bad1[] = {4, 100}, bad2[] = {0, 100, 100}, bad3[] = {0, 900};
        CT_ASSERT_EQ_INT(ct_arena_alloc(d, CT_MEM_ACTIVATIONS, "x", 500, bad1, NULL, 2, &a),
                         CT_ERR_ARG);
        CT_ASSERT_EQ_INT(ct_arena_alloc(d, CT_MEM_ACTIVATIONS, "x", 500, bad2, NULL, 3, &a),
                         CT_ERR_ARG);
        CT_ASSERT_EQ_INT(ct_arena_alloc(d, CT_MEM_ACTIVATIONS, "x", 500, bad3, NULL, 2, &a),
                         CT_ERR_ARG);
        ct_device_mem_stats(d, &s);
        CT_ASSERT_EQ_INT(s.total_current, 0);
        CT_ASSERT_EQ_INT(s.live_buffers, 0);
    }
    ct_device_free(d);
    ct_test_devices_free(&ds);
    return ct_test_end("test_cl_memory");
}
