/* replay.c - a plain main() that runs a fuzz target over files, for the CTest replay in the
 * normal build (no clang, no libFuzzer): every argument is a file, or a directory whose files are
 * run in name order. A violated invariant aborts (the test fails, naming the file last started);
 * the output says how many inputs ran.
 *
 *     fuzz_replay_model_file fuzz/corpus/model_file fuzz/regress/model_file */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_util.h"

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return -1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    unsigned char *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf || (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n)) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        fclose(f);
        free(buf);
        return -1;
    }
    fclose(f);
    fprintf(stderr, "replay: %s\n", path); /* the last line names the input when one aborts */
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    int ran = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            fprintf(stderr, "replay: %s does not exist\n", argv[i]);
            bad++;
            continue;
        }
        if (!S_ISDIR(sb.st_mode)) {
            bad += run_file(argv[i]) != 0;
            ran++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) {
            bad++;
            continue;
        }
        char **names = NULL;
        size_t nn = 0, cap = 0;
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            if (nn == cap) {
                cap = cap ? 2 * cap : 64;
                names = realloc(names, cap * sizeof *names);
                if (!names) return 2;
            }
            size_t len = strlen(argv[i]) + strlen(e->d_name) + 2;
            names[nn] = malloc(len);
            if (!names[nn]) return 2;
            snprintf(names[nn++], len, "%s/%s", argv[i], e->d_name);
        }
        closedir(d);
        qsort(names, nn, sizeof *names, by_name);
        for (size_t k = 0; k < nn; k++) {
            bad += run_file(names[k]) != 0;
            ran++;
            free(names[k]);
        }
        free(names);
    }
    printf("replayed %d inputs, %d unreadable\n", ran, bad);
    return bad || ran == 0 ? 1 : 0;
}
