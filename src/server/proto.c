// Length-prefixed JSON frames over a stream socket (see proto.h).
#include "server/proto.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/err.h"

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        // MSG_NOSIGNAL: a dead peer must give EPIPE here, not kill the server with SIGPIPE.
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR) continue;
            return st_err("engine channel: send failed: %s", strerror(errno));
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

// Reads exactly n bytes; a frame, once started, is read to its end (the peer writes whole frames).
static int read_all(int fd, void *buf, size_t n, int *eof) {
    char *p = buf;
    while (n > 0) {
        ssize_t k = read(fd, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            *eof = 1;
            return st_err("engine channel: read failed: %s", strerror(errno));
        }
        if (k == 0) {
            *eof = 1;
            return st_err("engine channel: closed by the peer");
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int st_proto_send(int fd, const json_t *msg) {
    char *text = json_dumps(msg, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (!text) return st_err("engine channel: cannot encode a message");
    size_t n = strlen(text);
    uint8_t hdr[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
    int rc = write_all(fd, hdr, 4);
    if (!rc) rc = write_all(fd, text, n);
    free(text);
    return rc;
}

json_t *st_proto_recv(int fd, int timeout_ms, int *eof) {
    *eof = 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r;
    do r = poll(&p, 1, timeout_ms);
    while (r < 0 && errno == EINTR);
    if (r < 0) {
        *eof = 1;
        st_err("engine channel: poll failed: %s", strerror(errno));
        return NULL;
    }
    if (r == 0) return NULL;
    uint8_t hdr[4];
    if (read_all(fd, hdr, 4, eof)) return NULL;
    uint32_t n = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 | (uint32_t)hdr[3] << 24;
    if (n == 0 || n > ST_PROTO_MAX_FRAME) {
        *eof = 1;
        st_err("engine channel: bad frame length %u (max %u)", n, ST_PROTO_MAX_FRAME);
        return NULL;
    }
    char *buf = malloc(n);
    if (!buf || read_all(fd, buf, n, eof)) {
        if (!buf) *eof = 1;
        free(buf);
        return NULL;
    }
    json_error_t jerr;
    json_t *msg = json_loadb(buf, n, 0, &jerr);
    free(buf);
    if (!msg || !json_is_object(msg)) {
        json_decref(msg);
        *eof = 1;
        st_err("engine channel: bad frame: %s", msg ? "not an object" : jerr.text);
        return NULL;
    }
    return msg;
}
