// Replays fuzzer inputs without libFuzzer: each argument is a file or a directory of files. Used by ctest to run
// the committed corpus through fuzz_gguf.c in ordinary (and sanitizer) builds.
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/fileio.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path) {
    char *buf;
    size_t n;
    if (st_read_file(path, 1 << 24, &buf, &n) != 0) return -1;
    // An exactly sized copy, so sanitizers see any read past the end.
    uint8_t *exact = malloc(n ? n : 1);
    if (n) memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

int main(int argc, char **argv) {
    int files = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "%s: not found\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (replay_file(argv[i])) return 1;
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
            if (replay_file(p)) return 1;
            files++;
        }
        if (d) closedir(d);
    }
    printf("replayed %d inputs\n", files);
    return files ? 0 : 1;
}
