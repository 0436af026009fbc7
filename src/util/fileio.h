// Read-only file mappings and whole-file reads, with errors that name the file.
#ifndef STRATA_UTIL_FILEIO_H
#define STRATA_UTIL_FILEIO_H

#include <stddef.h>
#include <stdint.h>

typedef struct st_mapping {
    const uint8_t *data;  // [size] bytes, read-only, page-aligned; NULL for an empty file
    uint64_t size;
    int fd;
} st_mapping;

// Maps `path` read-only (MAP_SHARED so the page cache is shared between processes). Returns 0 or -1 (st_errmsg).
int st_map_file(st_mapping *m, const char *path);
void st_unmap_file(st_mapping *m);

// Reads a whole file into a malloc'd, NUL-terminated buffer (max_bytes guards against surprises).
int st_read_file(const char *path, uint64_t max_bytes, char **out, size_t *out_len);

#endif
