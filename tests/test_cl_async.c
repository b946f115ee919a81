/* test_cl_async - asynchronous device work through cl/: non-blocking reads and writes at offsets
 * round-trip with several in flight and their events waited in any order; the NULL-event forms
 * complete by a finish; device-side copies at offsets, between buffers and on raw memory objects;
 * out-of-range or overlapping ranges are refused with CT_ERR_ARG naming the buffer; markers, event
 * queries, profiling timestamps, a kernel's largest work-group and launch event, the wall clock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_cl.h"
#include "ct_test.h"
#include "ct_test_dev.h"

static const char kSrcText[] = "__kernel void add1(__global float *x, const unsigned n) {\n"
                               "    size_t i = get_global_id(0);\n"
                               "    if (i < n) x[i] += 1.0f;\n"
                               "}\n";
static const ct_cl_source kSrc = {"test_add1", kSrcText, sizeof kSrcText - 1};

enum { NCHUNK = 8, CHUNK = 4096 }; /* floats per chunk */

static float val(int c, int i) { return (float)(c * 100000 + i) * 0.25f; }

int main(void) {
    ct_err err = {0};
    ct_test_devices ds;
    if (ct_test_devices_find(&ds, NULL, 1)) return ct_test_end("test_cl_async");
    const ct_device_info *list = ds.list;
    int pick = ds.pick[0];
    ct_device *d = NULL, *d2 = NULL;
    ct_device_opts o = ct_device_opts_default();
    o.apply_tuning = 0;
    o.cache_dir = "";
    CT_ASSERT_OK(ct_device_open(&d, &list[pick], &o, &err), err.msg);
    o.profiling = 1; /* a second handle on the same device, with timestamps */
    CT_ASSERT_OK(ct_device_open(&d2, &list[pick], &o, &err), err.msg);
    if (!d || !d2) return ct_test_end("test_cl_async");

    /* 1. writes at offsets, all in flight at once, waited in reverse order */
    const size_t bytes = (size_t)NCHUNK * CHUNK * sizeof(float) + 64;
    ct_buffer *a = NULL, *b = NULL;
    CT_ASSERT_OK(ct_buffer_alloc(d, CT_MEM_WORKSPACE, "stage_a", bytes, &a), ct_device_errmsg(d));
    CT_ASSERT_OK(ct_buffer_alloc(d, CT_MEM_WORKSPACE, "stage_b", bytes, &b), ct_device_errmsg(d));
    if (!a || !b) return ct_test_end("test_cl_async");
    float *host = malloc((size_t)NCHUNK * CHUNK * sizeof(float));
    float *back = malloc((size_t)NCHUNK * CHUNK * sizeof(float));
    if (!host || !back) return ct_test_end("test_cl_async");
    for (int c = 0; c < NCHUNK; c++)
        for (int i = 0; i < CHUNK; i++) host[(size_t)c * CHUNK + i] = val(c, i);
    ct_event *ev[NCHUNK] = {0};
    /* chunk c lands at byte 64 + c * CHUNK * 4: every transfer at a non-zero offset */
    for (int c = 0; c < NCHUNK; c++)
        CT_ASSERT_OK(ct_buffer_write_async(a, 64 + (size_t)c * CHUNK * 4, CHUNK * 4,
                                           host + (size_t)c * CHUNK, &ev[c]),
                     ct_device_errmsg(d));
    CT_ASSERT_OK(ct_device_flush(d), ct_device_errmsg(d));
    for (int c = NCHUNK - 1; c >= 0; c--) {
        CT_ASSERT(ev[c] != NULL);
        CT_ASSERT_OK(ct_event_wait(ev[c]), ct_device_errmsg(d));
        CT_ASSERT_OK(ct_event_wait(ev[c]), ct_device_errmsg(d)); /* again: still fine */
        int done = 0;
        CT_ASSERT_OK(ct_event_query(ev[c], &done), ct_device_errmsg(d));
        CT_ASSERT_EQ_INT(done, 1);
        ct_event_release(ev[c]);
        ev[c] = NULL;
    }

    /* 2. reads at offsets, all in flight, waited in a shuffled order */
    memset(back, 0, (size_t)NCHUNK * CHUNK * sizeof(float));
    for (int c = 0; c < NCHUNK; c++)
        CT_ASSERT_OK(ct_buffer_read_async(a, 64 + (size_t)c * CHUNK * 4, CHUNK * 4,
                                          back + (size_t)c * CHUNK, &ev[c]),
                     ct_device_errmsg(d));
    CT_ASSERT_OK(ct_device_flush(d), ct_device_errmsg(d));
    static const int order[NCHUNK] = {5, 2, 7, 0, 3, 6, 1, 4};
    for (int j = 0; j < NCHUNK; j++) {
        int c = order[j];
        CT_ASSERT_OK(ct_event_wait_release(ev[c]), ct_device_errmsg(d));
        /* once waited, this chunk is in host memory whatever the others are doing */
        CT_ASSERT_MSG(memcmp(back + (size_t)c * CHUNK, host + (size_t)c * CHUNK, CHUNK * 4) == 0,
                      "chunk %d read back differs", c);
    }

    /* 3. NULL events: the caller promises to finish before touching host memory */
    float small[16], small_back[16];
    for (int i = 0; i < 16; i++) small[i] = (float)i - 7.5f;
    CT_ASSERT_OK(ct_buffer_write_async(b, 4, sizeof small, small, NULL), ct_device_errmsg(d));
    memset(small_back, 0, sizeof small_back);
    CT_ASSERT_OK(ct_buffer_read_async(b, 4, sizeof small_back, small_back, NULL), ct_device_errmsg(d));
    CT_ASSERT_OK(ct_device_finish(d), ct_device_errmsg(d));
    CT_ASSERT(memcmp(small, small_back, sizeof small) == 0);
    /* an empty range is fine and still gives an event to wait on */
    ct_event *e0 = NULL;
    CT_ASSERT_OK(ct_buffer_read_async(b, bytes, 0, small_back, &e0), ct_device_errmsg(d));
    CT_ASSERT(e0 != NULL);
    CT_ASSERT_OK(ct_event_wait_release(e0), ct_device_errmsg(d));
    /* NULL is a no-op everywhere */
    ct_event_release(NULL);
    CT_ASSERT_OK(ct_event_wait(NULL), "wait(NULL)");
    CT_ASSERT_OK(ct_event_wait_release(NULL), "wait_release(NULL)");

    /* 4. out of range: refused before anything is enqueued, naming the buffer; *ev stays NULL */
    ct_event *bad = (ct_event *)&err; /* any non-NULL junk: must be overwritten with NULL */
    CT_ASSERT_EQ_INT(ct_buffer_read_async(a, bytes - 8, 16, back, &bad), CT_ERR_ARG);
    CT_ASSERT(bad == NULL);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "'stage_a'");
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "outside its");
    bad = (ct_event *)&err;
    CT_ASSERT_EQ_INT(ct_buffer_write_async(b, bytes + 4, 4, small, &bad), CT_ERR_ARG);
    CT_ASSERT(bad == NULL);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "'stage_b'");
    CT_ASSERT_EQ_INT(ct_buffer_write_async(b, (size_t)-4, 8, small, NULL), CT_ERR_ARG); /* wraps */
    CT_ASSERT_EQ_INT(ct_buffer_read_async(b, 0, 4, NULL, NULL), CT_ERR_ARG);

    /* 5. device-side copies at offsets */
    /* a[64 + 4*CHUNK*4 .. +CHUNK*4) (chunk 4) -> b at byte 128 */
    CT_ASSERT_OK(ct_buffer_copy(a, 64 + (size_t)4 * CHUNK * 4, b, 128, CHUNK * 4), ct_device_errmsg(d));
    /* within one buffer, apart: chunk 0 of a over chunk 7 of a */
    CT_ASSERT_OK(ct_buffer_copy(a, 64, a, 64 + (size_t)7 * CHUNK * 4, CHUNK * 4), ct_device_errmsg(d));
    /* raw memory objects, as the engine's views use them: b[128..) -> b[128 + CHUNK*4 + 4 ..) */
    CT_ASSERT_OK(ct_mem_copy(d, ct_buffer_mem(b), 128, ct_buffer_mem(b), 128 + CHUNK * 4 + 4, CHUNK * 4),
                 ct_device_errmsg(d));
    ct_event *mk = NULL;
    CT_ASSERT_OK(ct_device_marker(d, &mk), ct_device_errmsg(d));
    CT_ASSERT_OK(ct_event_wait_release(mk), ct_device_errmsg(d));
    CT_ASSERT_OK(ct_buffer_read(b, 128, back, CHUNK * 4), ct_device_errmsg(d));
    CT_ASSERT(memcmp(back, host + (size_t)4 * CHUNK, CHUNK * 4) == 0);
    CT_ASSERT_OK(ct_buffer_read(b, 128 + CHUNK * 4 + 4, back, CHUNK * 4), ct_device_errmsg(d));
    CT_ASSERT(memcmp(back, host + (size_t)4 * CHUNK, CHUNK * 4) == 0);
    CT_ASSERT_OK(ct_buffer_read(a, 64 + (size_t)7 * CHUNK * 4, back, CHUNK * 4), ct_device_errmsg(d));
    CT_ASSERT(memcmp(back, host, CHUNK * 4) == 0);
    CT_ASSERT_OK(ct_buffer_copy(a, 0, b, 0, 0), ct_device_errmsg(d)); /* empty: nothing */
    /* refused: out of range on either side, overlap, two devices, NULL objects */
    CT_ASSERT_EQ_INT(ct_buffer_copy(a, bytes - 4, b, 0, 8), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "copy from buffer 'stage_a'");
    CT_ASSERT_EQ_INT(ct_buffer_copy(a, 0, b, bytes - 4, 8), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "copy to buffer 'stage_b'");
    CT_ASSERT_EQ_INT(ct_buffer_copy(a, 0, a, 4, 8), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "overlap");
    CT_ASSERT_EQ_INT(ct_mem_copy(d, ct_buffer_mem(a), bytes, ct_buffer_mem(b), 0, 4), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "outside its");
    CT_ASSERT_EQ_INT(ct_mem_copy(d, NULL, 0, ct_buffer_mem(b), 0, 4), CT_ERR_ARG);
    ct_buffer *other = NULL;
    CT_ASSERT_OK(ct_buffer_alloc(d2, CT_MEM_WORKSPACE, "elsewhere", 256, &other), ct_device_errmsg(d2));
    if (other) {
        CT_ASSERT_EQ_INT(ct_buffer_copy(a, 0, other, 0, 16), CT_ERR_ARG);
        CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "two devices");
    }

    /* 6. a kernel: its largest work-group, a launch event, timestamps on the profiling handle */
    cl_kernel k = NULL;
    CT_ASSERT_OK(ct_kernel_get(d2, &kSrc, "", "add1", &k), ct_device_errmsg(d2));
    if (k && other) {
        size_t wg = 0;
        CT_ASSERT_OK(ct_kernel_max_work_group(d2, k, &wg), ct_device_errmsg(d2));
        CT_ASSERT(wg >= 1);
        cl_mem m = ct_buffer_mem(other);
        unsigned nn = 64;
        size_t global = 64, local = wg >= 64 ? 64 : 1;
        ct_event *ke = NULL;
        CT_ASSERT_OK(ct_kernel_set_arg(d2, k, 0, sizeof m, &m), ct_device_errmsg(d2));
        CT_ASSERT_OK(ct_kernel_set_arg(d2, k, 1, sizeof nn, &nn), ct_device_errmsg(d2));
        CT_ASSERT_OK(ct_kernel_launch(d2, k, 1, &global, &local, &ke), ct_device_errmsg(d2));
        CT_ASSERT_OK(ct_event_wait(ke), ct_device_errmsg(d2));
        uint64_t t0 = 0, t1 = 0;
        CT_ASSERT_OK(ct_event_times(ke, &t0, &t1), ct_device_errmsg(d2));
        CT_ASSERT(t1 >= t0 && t0 > 0);
        ct_event_release(ke);
        float x[64];
        CT_ASSERT_OK(ct_buffer_read(other, 0, x, sizeof x), ct_device_errmsg(d2));
        CT_ASSERT(x[0] == 1.0f && x[63] == 1.0f);
    }
    /* no timestamps without profiling: a clear CT_ERR_STATE */
    CT_ASSERT_OK(ct_device_marker(d, &mk), ct_device_errmsg(d));
    CT_ASSERT_OK(ct_event_wait(mk), ct_device_errmsg(d));
    uint64_t s0, s1;
    CT_ASSERT_EQ_INT(ct_event_times(mk, &s0, &s1), CT_ERR_STATE);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "profiling");
    ct_event_release(mk);
    CT_ASSERT_OK(ct_device_marker(d, NULL), ct_device_errmsg(d)); /* a marker nobody wants */

    /* 7. a GEMM's event, and an empty GEMM's (a marker) */
    ct_event *ge = NULL;
    CT_ASSERT_OK(ct_gemm(d, 0, 0, 0, 4, 4, 1.0f, ct_buffer_mem(b), 0, 4, ct_buffer_mem(b), 0, 4,
                         0.0f, ct_buffer_mem(b), 0, 4, &ge),
                 ct_device_errmsg(d));
    CT_ASSERT(ge != NULL);
    CT_ASSERT_OK(ct_event_wait_release(ge), ct_device_errmsg(d));

    /* 8. the wall clock is monotonic and in seconds */
    double w0 = ct_time_now(), w1 = ct_time_now();
    CT_ASSERT(w0 > 0 && w1 >= w0); /* no bound on the gap: this machine may be busy */

    ct_buffer_free(other);
    ct_buffer_free(a), ct_buffer_free(b);
    ct_mem_stats ms;
    ct_device_mem_stats(d, &ms);
    CT_ASSERT_EQ_INT(ms.live_buffers, 0);
    free(host), free(back);
    ct_device_free(d), ct_device_free(d2);
    ct_test_devices_free(&ds);
    return ct_test_end("test_cl_async");
}
