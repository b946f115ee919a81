/* fuzz_tune.c - fuzz target: the CLBlast tuning file's parser (cl/tune.c, ct_tune_set_parse;
 * stored sets under ~/.cache/cltrain/tune and the shipped tune/ files). A set that parses names a
 * device and lists kernels (or is a built-in record), formats, and parses again to the same set. */
#include "ct_cl.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    CT_FUZZ_REQUIRE(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0'; /* the reader hands the parser a NUL-ended file: bytes after a NUL are
                          not seen */
    ct_err err = {0};
    ct_tune_set s, s2;
    ct_status st = ct_tune_set_parse(text, &s, &err);
    if (st != CT_OK) {
        ct_fuzz_check_fail(st, &err);
    } else {
        CT_FUZZ_REQUIRE(s.device[0] && (s.builtin ? s.nkernels == 0 : s.nkernels > 0));
        CT_FUZZ_REQUIRE(s.nkernels <= CT_TUNE_MAX_KERNELS);
        static char out[16384];
        if (ct_tune_set_format(&s, out, sizeof out) == CT_OK) {
            ct_err e2 = {0};
            /* values that are only whitespace or hold '#', '=' or ':' do not survive a format,
               so a re-parse may refuse; when it takes the text, it must give the same set */
            if (ct_tune_set_parse(out, &s2, &e2) == CT_OK) {
                CT_FUZZ_REQUIRE(s2.nkernels == s.nkernels && s2.builtin == s.builtin);
                for (int k = 0; k < s.nkernels; k++) {
                    CT_FUZZ_REQUIRE(!strcmp(s.kernels[k].kernel, s2.kernels[k].kernel));
                    CT_FUZZ_REQUIRE(s.kernels[k].n == s2.kernels[k].n);
                    for (int j = 0; j < s.kernels[k].n; j++)
                        CT_FUZZ_REQUIRE(!strcmp(s.kernels[k].names[j], s2.kernels[k].names[j]) &&
                                        s.kernels[k].values[j] == s2.kernels[k].values[j]);
                }
            }
        }
    }
    free(text);
    return 0;
}
