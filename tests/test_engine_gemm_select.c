/* test_engine_gemm_select.c - ct_gemm_select on a device whose tuning folder is a fresh temporary
 * one: auto times the bf16 paths the device runs and stores the fastest; the next call reads the
 * record; a damaged record, or one naming a path the device does not run, is measured again and
 * replaced; again = 1 measures even with a good record; a path asked for by name is taken, or
 * refused with cl/'s reason; fp32's path and unknown names are refused. On PoCL the mma path is
 * not NVIDIA's and must not be chosen. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_engine_gemm.h"
#include "ct_test.h"
#include "ct_test_dev.h"

static int file_has(const char *path, const char *what) {
    FILE *f = fopen(path, "rb");
    char buf[4096];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = '\0';
    return strstr(buf, what) != NULL;
}

int main(void) {
    ct_test_devices ds;
    char dir[] = "/tmp/ct_test_gemm_select_XXXXXX";
    CT_ASSERT(mkdtemp(dir) != NULL);
    ct_device_opts o = ct_device_opts_default();
    o.tune_dir = dir;
    ct_device *d = ct_test_device_open(&ds, &o);
    if (!d) return ct_test_end("test_engine_gemm_select");
    const ct_device_info *info = ct_device_get_info(d);
    printf("device: %s\n", info->name);
    char note[600], rec[1400];
    CT_ASSERT_OK(ct_tune_record_path(dir, info, "gemm", rec, sizeof rec), "record path");

    /* auto, nothing stored: measured and stored; a bf16 path the device runs, never emulated */
    ct_gemm_path p = CT_GEMM_CLBLAST, p2 = CT_GEMM_CLBLAST;
    CT_ASSERT_OK(ct_gemm_select(d, "auto", 0, &p, note, sizeof note), ct_device_errmsg(d));
    printf("auto: %s\n", note);
    CT_ASSERT(ct_gemm_path_bf16(p) && p != CT_GEMM_MMA_EMULATED);
    CT_ASSERT_EQ_INT(ct_gemm_path_check(d, p), CT_OK);
    CT_ASSERT_STR_CONTAINS(note, "measured now");
    CT_ASSERT_STR_CONTAINS(note, ct_gemm_path_str(p));
    CT_ASSERT(file_has(rec, "PATH"));
    if (!strstr(info->vendor, "NVIDIA")) CT_ASSERT(p != CT_GEMM_MMA);

    /* the record is read back, not measured */
    CT_ASSERT_OK(ct_gemm_select(d, "auto", 0, &p2, note, sizeof note), ct_device_errmsg(d));
    CT_ASSERT_EQ_INT((int)p2, (int)p);
    CT_ASSERT_STR_CONTAINS(note, "stored");
    CT_ASSERT(strstr(note, "measured now") == NULL);

    /* again = 1 measures even so */
    CT_ASSERT_OK(ct_gemm_select(d, "auto", 1, &p2, note, sizeof note), ct_device_errmsg(d));
    CT_ASSERT_STR_CONTAINS(note, "measured now");

    /* a damaged record is measured again and replaced by a readable one */
    FILE *f = fopen(rec, "wb");
    CT_ASSERT(f != NULL);
    if (f) fputs("this is not a tuning record\n\x01\x02", f), fclose(f);
    CT_ASSERT_OK(ct_gemm_select(d, "auto", 0, &p2, note, sizeof note), ct_device_errmsg(d));
    CT_ASSERT_STR_CONTAINS(note, "measured now");
    CT_ASSERT_OK(ct_gemm_select(d, "auto", 0, &p2, note, sizeof note), ct_device_errmsg(d));
    CT_ASSERT_STR_CONTAINS(note, "stored");

    /* a record naming a path this device does not run is not trusted */
    if (ct_gemm_path_check(d, CT_GEMM_MMA) != CT_OK) {
        ct_tune_set s;
        memset(&s, 0, sizeof s);
        snprintf(s.device, sizeof s.device, "%s", info->name);
        snprintf(s.driver, sizeof s.driver, "%s", info->driver_version);
        ct_tune_set_put(&s, "gemm_bf16", "PATH", (size_t)CT_GEMM_MMA);
        ct_err err = {0};
        CT_ASSERT_OK(ct_tune_record_store(dir, info, "gemm", &s, &err), err.msg);
        CT_ASSERT_OK(ct_gemm_select(d, "auto", 0, &p2, note, sizeof note), ct_device_errmsg(d));
        CT_ASSERT(p2 != CT_GEMM_MMA);
        CT_ASSERT_STR_CONTAINS(note, "measured now");
        /* asked for by name: refused with cl/'s reason */
        CT_ASSERT_EQ_INT(ct_gemm_select(d, "mma", 0, &p2, note, sizeof note),
                         CT_ERR_UNSUPPORTED);
        CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "NVIDIA");
    }
    CT_ASSERT_OK(ct_gemm_select(d, "portable", 0, &p2, note, sizeof note), ct_device_errmsg(d));
    CT_ASSERT_EQ_INT((int)p2, (int)CT_GEMM_PORTABLE);
    CT_ASSERT_STR_CONTAINS(note, "as asked");
    CT_ASSERT_EQ_INT(ct_gemm_select(d, "clblast", 0, &p2, note, sizeof note), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "auto, portable, mma");
    CT_ASSERT_EQ_INT(ct_gemm_select(d, "fastest", 0, &p2, note, sizeof note), CT_ERR_ARG);

    ct_device_free(d);
    ct_test_devices_free(&ds);
    remove(rec);
    rmdir(dir);
    return ct_test_end("test_engine_gemm_select");
}
