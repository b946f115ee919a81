/* ct_test_dev.h - the OpenCL devices a test runs on, found and opened one way: the devices
 * CT_DEVICE names (ct_device_spec_env, the one place it is read), else the test's fallback spec
 * (NULL: the first device). No device is a failure with its reason, never a skip.
 *
 *     ct_test_devices ds;
 *     ct_device *dev = ct_test_device_open(&ds, NULL);     // CT_DEVICE, else the first device
 *     if (!dev) return ct_test_end("test_example");        // the FAIL line says why
 *     printf("device: %s\n", ds.list[ds.pick[0]].name);
 *     ...
 *     ct_device_free(dev);
 *     ct_test_devices_free(&ds);
 */
#ifndef CT_TEST_DEV_H
#define CT_TEST_DEV_H

#include "ct_cl.h"
#include "ct_test.h"

#define CT_TEST_MAX_DEVICES 64

typedef struct ct_test_devices {
    ct_device_info *list; /* every device, n of them */
    int n;
    int pick[CT_TEST_MAX_DEVICES]; /* the chosen ones: indices into list */
    int npick;
} ct_test_devices;

static inline void ct_test_devices_free(ct_test_devices *d) {
    ct_device_list_free(d->list);
    memset(d, 0, sizeof *d);
}

/* The first `want` devices (0: every match) of CT_DEVICE's spec, else of `fallback`. Returns
 * 0, or 1 after a FAIL line naming the spec and what exists (d is then empty). */
static inline int ct_test_devices_find(ct_test_devices *d, const char *fallback, int want) {
    ct_err err = {0};
    memset(d, 0, sizeof *d);
    const char *spec = ct_device_spec_env();
    if (!spec) spec = fallback;
    CT_TEST_CHECK();
    if (ct_device_list(&d->list, &d->n, &err) != CT_OK || d->n > CT_TEST_MAX_DEVICES ||
        ct_device_select(d->list, d->n, spec, want, d->pick, &d->npick, &err) != CT_OK ||
        d->npick < 1) {
        CT__FAIL("no OpenCL device%s%s (of %d): %s", spec ? " matching " : "", spec ? spec : "",
                 d->n, err.msg[0] ? err.msg : "too many devices");
        ct_test_devices_free(d);
        return 1;
    }
    return 0;
}

/* The device a one-device test runs on (ct_test_devices_find(d, NULL, 1)), opened with o (NULL:
 * ct_device_opts_default). NULL after a FAIL line when there is none or it does not open. */
static inline ct_device *ct_test_device_open(ct_test_devices *d, const ct_device_opts *o) {
    if (ct_test_devices_find(d, NULL, 1)) return NULL;
    ct_device_opts def = ct_device_opts_default();
    ct_device *dev = NULL;
    ct_err err = {0};
    CT_TEST_CHECK();
    if (ct_device_open(&dev, &d->list[d->pick[0]], o ? o : &def, &err) != CT_OK) {
        CT__FAIL("opening the device %s failed: %s", d->list[d->pick[0]].name, err.msg);
        return NULL;
    }
    return dev;
}

#endif /* CT_TEST_DEV_H */
