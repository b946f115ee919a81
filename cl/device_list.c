/* device_list.c - discovery and selection of OpenCL devices: what exists, described once.
 *
 * Promises: ct_device_list sees every device of every platform in a stable order (platform order,
 * then device order), so a flat index means the same device in every process on a machine;
 * ct_device_select never guesses: a spec that matches nothing is an error listing what exists. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_cl_impl.h"

const char *ct_device_type_str(cl_device_type t) {
    if (t & CL_DEVICE_TYPE_GPU) return "gpu";
    if (t & CL_DEVICE_TYPE_ACCELERATOR) return "accelerator";
    if (t & CL_DEVICE_TYPE_CPU) return "cpu";
    return "other";
}

const char *ct_device_spec_env(void) {
    const char *s = getenv("CT_DEVICE");
    return (s && *s) ? s : NULL;
}

static void trim(char *s) {
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    size_t i = 0;
    while (s[i] && isspace((unsigned char)s[i])) i++;
    if (i) memmove(s, s + i, n - i + 1);
}

static void dev_str(cl_device_id d, cl_device_info what, char *buf, size_t len) {
    buf[0] = '\0';
    if (clGetDeviceInfo(d, what, len, buf, NULL) != CL_SUCCESS) buf[0] = '\0';
    buf[len - 1] = '\0';
    trim(buf);
}

static void fill_info(ct_device_info *di, cl_platform_id p, cl_device_id d) {
    memset(di, 0, sizeof *di);
    di->platform_id = p;
    di->device_id = d;
    clGetPlatformInfo(p, CL_PLATFORM_NAME, sizeof di->platform, di->platform, NULL);
    clGetPlatformInfo(p, CL_PLATFORM_VERSION, sizeof di->platform_version, di->platform_version,
                      NULL);
    di->platform[sizeof di->platform - 1] = di->platform_version[sizeof di->platform_version - 1] = 0;
    trim(di->platform);
    dev_str(d, CL_DEVICE_VENDOR, di->vendor, sizeof di->vendor);
    dev_str(d, CL_DEVICE_NAME, di->name, sizeof di->name);
    dev_str(d, CL_DEVICE_VERSION, di->version, sizeof di->version);
    dev_str(d, CL_DRIVER_VERSION, di->driver_version, sizeof di->driver_version);
    cl_device_type t = 0;
    clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof t, &t, NULL);
    di->type = t;
    cl_uint u = 0;
    clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof u, &u, NULL);
    di->compute_units = u;
    u = 0;
    clGetDeviceInfo(d, CL_DEVICE_MAX_CLOCK_FREQUENCY, sizeof u, &u, NULL);
    di->clock_mhz = u;
    cl_ulong l = 0;
    clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof l, &l, NULL);
    di->global_mem_bytes = l;
    l = 0;
    clGetDeviceInfo(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof l, &l, NULL);
    di->max_alloc_bytes = l;
    l = 0;
    clGetDeviceInfo(d, CL_DEVICE_LOCAL_MEM_SIZE, sizeof l, &l, NULL);
    di->local_mem_bytes = l;
    char ext[8192];
    dev_str(d, CL_DEVICE_EXTENSIONS, ext, sizeof ext);
    di->fp16 = strstr(ext, "cl_khr_fp16") != NULL;
    di->fp64 = strstr(ext, "cl_khr_fp64") != NULL;
    if (strstr(ext, "cl_nv_device_attribute_query")) {
        /* CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV / _MINOR_NV (cl_ext.h's values, spelt here so no
         * vendor header is needed) */
        cl_uint major = 0, minor = 0;
        if (clGetDeviceInfo(d, 0x4000, sizeof major, &major, NULL) == CL_SUCCESS &&
            clGetDeviceInfo(d, 0x4001, sizeof minor, &minor, NULL) == CL_SUCCESS) {
            di->nv_cc_major = (int)major;
            di->nv_cc_minor = (int)minor;
        }
    }
}

ct_status ct_device_list(ct_device_info **out, int *n, ct_err *err) {
    *out = NULL;
    *n = 0;
    cl_uint np = 0;
    cl_int rc = clGetPlatformIDs(0, NULL, &np);
    if (rc == -1001 /* CL_PLATFORM_NOT_FOUND_KHR */ || (rc == CL_SUCCESS && np == 0))
        return CT_ERR(err, CT_ERR_NOT_FOUND,
                      "no OpenCL platform found (the ICD loader found no driver). Hint: install a "
                      "driver, e.g. `apt-get install pocl-opencl-icd` for CPUs, and check `clinfo -l`");
    if (rc != CL_SUCCESS) return CT_CL_FAIL(err, rc, "clGetPlatformIDs");
    cl_platform_id *plats = ct_calloc(np, sizeof *plats);
    if (!plats) return CT_ERR(err, CT_ERR_NOMEM, "out of host memory listing platforms");
    clGetPlatformIDs(np, plats, NULL);
    ct_device_info *list = NULL;
    int count = 0, cap = 0;
    for (cl_uint p = 0; p < np; p++) {
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) != CL_SUCCESS || nd == 0)
            continue;
        cl_device_id *devs = ct_calloc(nd, sizeof *devs);
        if (!devs) break;
        clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, nd, devs, NULL);
        for (cl_uint d = 0; d < nd; d++) {
            if (count == cap) {
                cap = cap ? 2 * cap : 8;
                ct_device_info *nl = ct_realloc(list, (size_t)cap * sizeof *nl);
                if (!nl) break;
                list = nl;
            }
            fill_info(&list[count], plats[p], devs[d]);
            list[count].index = count;
            list[count].platform_index = (int)p;
            list[count].device_index = (int)d;
            count++;
        }
        free(devs);
    }
    free(plats);
    if (count == 0) {
        free(list);
        return CT_ERR(err, CT_ERR_NOT_FOUND,
                      "OpenCL platforms exist but expose no device. Hint: for PoCL, check "
                      "POCL_DEVICES (e.g. POCL_DEVICES=\"pthread pthread\")");
    }
    *out = list;
    *n = count;
    return CT_OK;
}

void ct_device_list_free(ct_device_info *list) { free(list); }

static int type_rank(cl_device_type t) {
    if (t & CL_DEVICE_TYPE_GPU) return 0;
    if (t & CL_DEVICE_TYPE_ACCELERATOR) return 1;
    if (t & CL_DEVICE_TYPE_CPU) return 2;
    return 3;
}

static int icontains(const char *hay, const char *needle) {
    size_t nl = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < nl && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == nl) return 1;
    }
    return nl == 0;
}

static void list_summary(const ct_device_info *list, int n, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used + 1 < len; i++) {
        int w = snprintf(buf + used, len - used, "%s  %d (%d:%d): %s, %s", i ? "\n" : "", i,
                         list[i].platform_index, list[i].device_index,
                         ct_device_type_str(list[i].type), list[i].name);
        if (w < 0) break;
        used += (size_t)w;
    }
}

/* Matches of one spec item, appended to idx (skipping duplicates). Returns the number added or
 * -1 for a malformed item. */
static int match_item(const ct_device_info *list, int n, const char *item, int *idx, int *nidx,
                      int room) {
    int added = 0;
    char *end = NULL;
    if (!*item || !strcmp(item, "auto")) {
        int best = 3;
        for (int i = 0; i < n; i++)
            if (type_rank(list[i].type) < best) best = type_rank(list[i].type);
        for (int i = 0; i < n && *nidx < room; i++)
            if (type_rank(list[i].type) == best) idx[(*nidx)++] = i, added++;
        return added;
    }
    long a = strtol(item, &end, 10);
    if (end != item && *end == '\0') {
        if (a >= 0 && a < n && *nidx < room) idx[(*nidx)++] = (int)a, added++;
        return added;
    }
    if (end != item && *end == ':') {
        char *end2 = NULL;
        long b = strtol(end + 1, &end2, 10);
        if (end2 == end + 1 || *end2 != '\0') return -1;
        for (int i = 0; i < n && *nidx < room; i++)
            if (list[i].platform_index == a && list[i].device_index == b)
                idx[(*nidx)++] = i, added++;
        return added;
    }
    cl_device_type want = 0;
    if (!strcmp(item, "gpu")) want = CL_DEVICE_TYPE_GPU;
    else if (!strcmp(item, "cpu")) want = CL_DEVICE_TYPE_CPU;
    else if (!strcmp(item, "accelerator") || !strcmp(item, "acc")) want = CL_DEVICE_TYPE_ACCELERATOR;
    for (int i = 0; i < n && *nidx < room; i++) {
        int hit = want ? (list[i].type & want) != 0
                       : (icontains(list[i].name, item) || icontains(list[i].vendor, item) ||
                          icontains(list[i].platform, item));
        if (hit) idx[(*nidx)++] = i, added++;
    }
    return added;
}

ct_status ct_device_select(const ct_device_info *list, int n, const char *spec, int want, int *idx,
                           int *nidx, ct_err *err) {
    *nidx = 0;
    if (!list || n <= 0) return CT_ERR(err, CT_ERR_ARG, "device selection: empty device list");
    const char *s = spec ? spec : "";
    int room = want > 0 ? want : n;
    char summary[2048];
    list_summary(list, n, summary, sizeof summary);
    char item[256];
    const char *p = s;
    do {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len >= sizeof item) return CT_ERR(err, CT_ERR_ARG, "device spec item too long: '%s'", p);
        memcpy(item, p, len);
        item[len] = '\0';
        trim(item);
        int got = match_item(list, n, item, idx, nidx, room);
        if (got < 0)
            return CT_ERR(err, CT_ERR_ARG,
                          "malformed device spec '%s' (use an index, P:D, gpu|cpu|accelerator or a "
                          "name substring). Devices:\n%s",
                          item, summary);
        if (got == 0 && *nidx < room)
            return CT_ERR(err, CT_ERR_NOT_FOUND, "no device matches '%s'. Devices:\n%s", item,
                          summary);
        p = comma ? comma + 1 : NULL;
    } while (p && *nidx < room);
    if (want > 0 && *nidx < want)
        return CT_ERR(err, CT_ERR_NOT_FOUND,
                      "device spec '%s' selects %d device(s) but %d are needed. Devices:\n%s%s", s,
                      *nidx, want, summary,
                      (list[0].platform[0] && strstr(list[0].platform, "Portable"))
                          ? "\nHint: PoCL exposes more CPU devices with "
                            "POCL_DEVICES=\"pthread pthread\""
                          : "");
    return CT_OK;
}
