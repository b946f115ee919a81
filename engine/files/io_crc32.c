/* io_crc32.c - CRC-32 (zlib's), the checksum of the checkpoint sections. Whole-file reads and
 * atomic writes, which the engine's files also share, are cl/'s (cl/ct_file.h). */
#include "ct_engine_io.h"

static uint32_t crc_table[256];
static int crc_table_ready; /* a pure function of constants: racing initialisations write the
                               same values, so no lock is needed for correctness */

static void crc_table_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
    crc_table_ready = 1;
}

uint32_t ct_crc32(uint32_t crc, const void *data, size_t n) {
    if (!crc_table_ready) crc_table_init();
    const unsigned char *p = (const unsigned char *)data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return ~crc;
}
