// The web page (chat + monitor) served at GET /: files of src/server/web/ embedded at build time (web/embed.cmake).
#ifndef STRATA_SERVER_WEB_H
#define STRATA_SERVER_WEB_H

#include <stddef.h>

typedef struct st_web_asset {
    const char *path;           // "/index.html"
    const char *mime;           // Content-Type
    const unsigned char *data;  // [len] bytes (NUL-terminated for convenience)
    size_t len;
} st_web_asset;

extern const st_web_asset st_web_assets[];
extern const int st_web_n_assets;

#endif
