/* test_cl_device - device listing and selection: by index, P:D, type, name, lists; bad specs give
 * clear errors. Run with POCL_DEVICES="pthread pthread" so at least two devices exist. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ct_cl.h"
#include "ct_test.h"

int main(void) {
    ct_err err = {0};
    ct_device_info *list = NULL;
    int n = 0, idx[16], ni = 0;
    CT_ASSERT_OK(ct_device_list(&list, &n, &err), err.msg);
    if (!list) return ct_test_end("test_cl_device");
    CT_ASSERT(n >= 2); /* the test environment sets POCL_DEVICES="pthread pthread" */
    for (int i = 0; i < n; i++) {
        CT_ASSERT_EQ_INT(list[i].index, i);
        CT_ASSERT(list[i].name[0] != '\0');
        CT_ASSERT(list[i].global_mem_bytes > 0);
        CT_ASSERT(list[i].max_alloc_bytes > 0 && list[i].max_alloc_bytes <= list[i].global_mem_bytes);
        CT_ASSERT(list[i].compute_units > 0);
    }
    /* by flat index */
    CT_ASSERT_OK(ct_device_select(list, n, "1", 1, idx, &ni, &err), err.msg);
    CT_ASSERT_EQ_INT(ni, 1);
    CT_ASSERT_EQ_INT(idx[0], 1);
    /* by P:D */
    char pd[32];
    snprintf(pd, sizeof pd, "%d:%d", list[n - 1].platform_index, list[n - 1].device_index);
    CT_ASSERT_OK(ct_device_select(list, n, pd, 1, idx, &ni, &err), err.msg);
    CT_ASSERT_EQ_INT(idx[0], n - 1);
    /* by type: every selected device has that type, in index order */
    const char *type = ct_device_type_str(list[0].type);
    CT_ASSERT_OK(ct_device_select(list, n, type, 0, idx, &ni, &err), err.msg);
    int expect = 0;
    for (int i = 0; i < n; i++) expect += !strcmp(ct_device_type_str(list[i].type), type);
    CT_ASSERT_EQ_INT(ni, expect);
    for (int i = 1; i < ni; i++) CT_ASSERT(idx[i] > idx[i - 1]);
    /* auto: the best type present (gpu before accelerator before cpu) */
    CT_ASSERT_OK(ct_device_select(list, n, NULL, 1, idx, &ni, &err), err.msg);
    int has_gpu = 0;
    for (int i = 0; i < n; i++) has_gpu |= (list[i].type & CL_DEVICE_TYPE_GPU) != 0;
    if (has_gpu) CT_ASSERT((list[idx[0]].type & CL_DEVICE_TYPE_GPU) != 0);
    /* by a name substring, case-insensitive */
    char sub[8];
    snprintf(sub, sizeof sub, "%.5s", list[0].name);
    for (char *p = sub; *p; p++) *p = (char)((*p >= 'a' && *p <= 'z') ? *p - 32 : *p);
    CT_ASSERT_OK(ct_device_select(list, n, sub, 1, idx, &ni, &err), err.msg);
    CT_ASSERT(strncmp(list[idx[0]].name, list[0].name, 5) == 0);
    /* a comma list, two devices */
    CT_ASSERT_OK(ct_device_select(list, n, "1,0", 2, idx, &ni, &err), err.msg);
    CT_ASSERT_EQ_INT(ni, 2);
    CT_ASSERT_EQ_INT(idx[0], 1);
    CT_ASSERT_EQ_INT(idx[1], 0);
    /* errors: an index out of range, a name matching nothing, a malformed P:D, too few devices */
    CT_ASSERT_EQ_INT(ct_device_select(list, n, "99", 1, idx, &ni, &err), CT_ERR_NOT_FOUND);
    CT_ASSERT_STR_CONTAINS(err.msg, "no device matches '99'");
    CT_ASSERT_STR_CONTAINS(err.msg, list[0].name); /* lists what exists */
    CT_ASSERT_EQ_INT(ct_device_select(list, n, "no-such-device-xyz", 1, idx, &ni, &err), CT_ERR_NOT_FOUND);
    CT_ASSERT_STR_CONTAINS(err.msg, "no-such-device-xyz");
    CT_ASSERT_EQ_INT(ct_device_select(list, n, "0:x", 1, idx, &ni, &err), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(err.msg, "malformed device spec");
    CT_ASSERT_EQ_INT(ct_device_select(list, n, "0", 2, idx, &ni, &err), CT_ERR_NOT_FOUND);
    CT_ASSERT_STR_CONTAINS(err.msg, "are needed");
    /* opening a device gives a context and queue; tuning source is reported */
    ct_device *d = NULL;
    ct_device_opts o = ct_device_opts_default();
    o.cache_dir = "";
    CT_ASSERT_OK(ct_device_open(&d, &list[0], &o, &err), err.msg);
    if (d) {
        CT_ASSERT(ct_device_context(d) != NULL && ct_device_queue(d) != NULL);
        CT_ASSERT(ct_device_tuning_source(d)[0] != '\0');
        CT_ASSERT_OK(ct_device_finish(d), ct_device_errmsg(d));
    }
    /* freeing the process's last device leaves nothing holding its context: CLBlast caches a
     * compiled routine per context, and its programs kept every freed context alive (on an
     * NVIDIA driver, clCreateContext failed after about a hundred open/free cycles) */
    cl_context ctx = d ? ct_device_context(d) : NULL;
    if (d) {
        ct_buffer *a = NULL, *b = NULL, *c = NULL;
        float ones[64];
        for (int i = 0; i < 64; i++) ones[i] = 1.0f;
        CT_ASSERT_OK(ct_buffer_alloc(d, CT_MEM_ACTIVATIONS, "a", sizeof ones, &a), ct_device_errmsg(d));
        CT_ASSERT_OK(ct_buffer_alloc(d, CT_MEM_ACTIVATIONS, "b", sizeof ones, &b), ct_device_errmsg(d));
        CT_ASSERT_OK(ct_buffer_alloc(d, CT_MEM_ACTIVATIONS, "c", sizeof ones, &c), ct_device_errmsg(d));
        if (a && b && c) {
            CT_ASSERT_OK(ct_buffer_write(a, 0, ones, sizeof ones), ct_device_errmsg(d));
            CT_ASSERT_OK(ct_buffer_write(b, 0, ones, sizeof ones), ct_device_errmsg(d));
            CT_ASSERT_OK(ct_gemm(d, 0, 0, 8, 8, 8, 1.0f, ct_buffer_mem(a), 0, 8, ct_buffer_mem(b), 0,
                                 8, 0.0f, ct_buffer_mem(c), 0, 8, NULL),
                         ct_device_errmsg(d));
            CT_ASSERT_OK(ct_device_finish(d), ct_device_errmsg(d));
        }
        ct_buffer_free(a);
        ct_buffer_free(b);
        ct_buffer_free(c);
        clRetainContext(ctx);
    }
    ct_device_free(d);
    if (ctx) {
        /* a driver may drop its own references (a finished command's queue, a built program)
         * a little after the calls return, so wait up to 20 s for them; CLBlast's never went */
        cl_uint refs = 0;
        cl_int rc = CL_SUCCESS;
        double t0 = ct_time_now();
        do {
            rc = clGetContextInfo(ctx, CL_CONTEXT_REFERENCE_COUNT, sizeof refs, &refs, NULL);
            if (rc != CL_SUCCESS || refs == 1) break;
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        } while (ct_time_now() - t0 < 20.0);
        CT_ASSERT_EQ_INT(rc, CL_SUCCESS);
        CT_ASSERT_EQ_INT((int)refs, 1); /* ours only */
        if (refs != 1) fprintf(stderr, "context still has %u references after 20 s\n", refs);
        clReleaseContext(ctx);
    }
    ct_device_free(NULL); /* no-op */
    ct_device_list_free(list);
    return ct_test_end("test_cl_device");
}
