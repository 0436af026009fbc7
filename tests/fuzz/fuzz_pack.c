// libFuzzer target: the pack file header parser (st_pack_parse) on arbitrary bytes. A failed parse must leave a
// message; a successful one must describe records that lie inside the input, which is then read end to end (so
// ASan sees any record that does not). Also linked with replay_main.c into a plain test (tests/place).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "place/pack.h"
#include "util/err.h"

#define REQUIRE(c) \
    do {           \
        if (!(c)) __builtin_trap(); \
    } while (0)

static volatile uint64_t g_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_err_clear();
    st_pack_info pi;
    if (st_pack_parse(data, size, "fuzz.pack", &pi) != 0) {
        REQUIRE(st_errmsg()[0] != '\0');
        return 0;
    }
    REQUIRE(pi.file_bytes == size && pi.data_offset % ST_PACK_RECORD_ALIGN == 0);
    for (uint32_t l = 0; l < pi.n_layer; l++) {
        const st_pack_layer *pl = &pi.layers[l];
        REQUIRE(pl->offset >= pi.data_offset && pl->record_bytes % ST_PACK_RECORD_ALIGN == 0);
        REQUIRE(pl->x.off[2] + pl->x.bytes[2] <= pl->record_bytes);
        for (uint32_t e = 0; e < pi.n_expert; e++) {
            uint64_t at = pl->offset + (uint64_t)e * pl->record_bytes;
            REQUIRE(at + pl->record_bytes <= size);
            g_sink += data[at] + data[at + pl->x.off[2] + pl->x.bytes[2] - 1];
        }
    }
    st_pack_info_free(&pi);
    return 0;
}
