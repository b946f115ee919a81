/* ct_devices - list every OpenCL device, one line each: "<flat index>: platform, type, vendor,
 * name"; with -v the details below each line (driver and OpenCL version, compute units, clock,
 * memory, fp16/fp64, and which CLBlast parameters apply: stored, shipped, or the built-in ones,
 * with ct_tune's reason when it found nothing better). */
#include <stdio.h>
#include <string.h>

#include "ct_cl.h"

static void usage(FILE *f) {
    fprintf(f, "usage: ct_devices [-v] [--select SPEC]\n"
               "  -v             details under each device\n"
               "  --select SPEC  print only the devices SPEC selects (as --device / CT_DEVICE do):\n"
               "                 an index, P:D, gpu|cpu|accelerator, a name substring, or a comma list\n");
}

int main(int argc, char **argv) {
    int verbose = 0;
    const char *select = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--verbose")) verbose = 1;
        else if (!strcmp(argv[i], "--select") && i + 1 < argc) select = argv[++i];
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "ct_devices: unknown argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    ct_err err = {0};
    ct_device_info *list = NULL;
    int n = 0;
    if (ct_device_list(&list, &n, &err) != CT_OK) {
        fprintf(stderr, "ct_devices: %s\n", err.msg);
        return 1;
    }
    int idx[256], nidx = 0;
    if (select) {
        if (ct_device_select(list, n, select, 0, idx, &nidx, &err) != CT_OK) {
            fprintf(stderr, "ct_devices: %s\n", err.msg);
            ct_device_list_free(list);
            return 2;
        }
    } else {
        for (int i = 0; i < n && i < 256; i++) idx[nidx++] = i;
    }
    char cache[1024], tdir[1100];
    ct_cache_dir_default(cache, sizeof cache);
    snprintf(tdir, sizeof tdir, "%s/tune", cache);
    for (int j = 0; j < nidx; j++) {
        const ct_device_info *d = &list[idx[j]];
        printf("%d: %s, %s, %s, %s\n", d->index, d->platform, ct_device_type_str(d->type), d->vendor,
               d->name);
        if (!verbose) continue;
        ct_tune_set s;
        char source[512] = "";
        ct_err terr = {0};
        int tuned = ct_tune_lookup(cache[0] ? tdir : NULL, d, &s, source, sizeof source, &terr) == CT_OK;
        printf("    platform:D     %d:%d\n", d->platform_index, d->device_index);
        printf("    driver         %s\n", d->driver_version);
        printf("    opencl         %s (platform %s)\n", d->version, d->platform_version);
        printf("    compute units  %u\n", d->compute_units);
        printf("    clock          %u MHz\n", d->clock_mhz);
        printf("    global memory  %.1f MiB\n", d->global_mem_bytes / 1048576.0);
        printf("    max allocation %.1f MiB\n", d->max_alloc_bytes / 1048576.0);
        printf("    local memory   %.1f KiB\n", d->local_mem_bytes / 1024.0);
        printf("    fp16 / fp64    %s / %s\n", d->fp16 ? "yes" : "no", d->fp64 ? "yes" : "no");
        printf("    clblast tuning %s\n", tuned ? source : (terr.status == CT_ERR_NOT_FOUND ? "none (CLBlast built-in parameters)" : terr.msg));
    }
    ct_device_list_free(list);
    return 0;
}
