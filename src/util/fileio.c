#include "util/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/err.h"

int st_map_file(st_mapping *m, const char *path) {
    memset(m, 0, sizeof *m);
    m->fd = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return st_err("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return st_err("%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return st_err("%s: not a regular file", path);
    }
    m->fd = fd;
    m->size = (uint64_t)st.st_size;
    if (m->size == 0) return 0;
    void *p = mmap(NULL, (size_t)m->size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        m->fd = -1;
        return st_err("%s: cannot map %llu bytes: %s", path, (unsigned long long)m->size, strerror(e));
    }
    m->data = p;
    return 0;
}

void st_unmap_file(st_mapping *m) {
    if (m->data) munmap((void *)m->data, (size_t)m->size);
    if (m->fd >= 0) close(m->fd);
    memset(m, 0, sizeof *m);
    m->fd = -1;
}

int st_read_file(const char *path, uint64_t max_bytes, char **out, size_t *out_len) {
    *out = NULL;
    if (out_len) *out_len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return st_err("%s: cannot open: %s", path, strerror(errno));
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 1 >= cap) {
            if (cap > max_bytes) {
                free(buf);
                fclose(f);
                return st_err("%s: larger than the limit of %llu bytes", path, (unsigned long long)max_bytes);
            }
            cap *= 2;
            buf = realloc(buf, cap);
        }
        size_t n = fread(buf + len, 1, cap - 1 - len, f);
        len += n;
        if (n == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return st_err("%s: read error", path);
    }
    if (len > max_bytes) {
        free(buf);
        return st_err("%s: larger than the limit of %llu bytes", path, (unsigned long long)max_bytes);
    }
    buf[len] = '\0';
    *out = buf;
    if (out_len) *out_len = len;
    return 0;
}
