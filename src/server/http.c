// The HTTP layer: libmicrohttpd with a thread per connection (a generation blocks only its own client's thread),
// routing, API-key check, body limits, JSON/error replies and server-sent-event streams fed by engine jobs.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/srv.h"
#include "server/web.h"
#include "util/log.h"

// ---- small string buffer ------------------------------------------------------------------------------------------

void st_sbuf_add(st_sbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        b->cap = 2 * (b->len + n + 1) + 256;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void st_sbuf_printf(st_sbuf *b, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < (int)sizeof tmp) {
        st_sbuf_add(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    st_sbuf_add(b, big, (size_t)n);
    free(big);
}

// ---- replies ------------------------------------------------------------------------------------------------------

static enum MHD_Result queue(st_req *r, unsigned status, struct MHD_Response *resp) {
    r->responded = true;
    enum MHD_Result rc = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    return rc;
}

enum MHD_Result st_reply_text(st_req *r, unsigned status, const char *content_type, const char *text) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(resp, "Content-Type", content_type);
    if (status == 503) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", st_retry_after_s());
        MHD_add_response_header(resp, "Retry-After", ra);
    }
    if (status == 401) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    return queue(r, status, resp);
}

enum MHD_Result st_reply_json(st_req *r, unsigned status, json_t *body) {
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    enum MHD_Result rc = st_reply_text(r, status, "application/json", text ? text : "{}");
    free(text);
    return rc;
}

static const char *status_type(unsigned status) {
    switch (status) {
    case 400: case 404: case 405: case 413: return "invalid_request_error";
    case 401: return "authentication_error";
    case 429: return "rate_limit_error";
    case 501: return "not_implemented_error";
    case 503: return "service_unavailable";
    default: return "server_error";
    }
}

static const char *anthropic_type(unsigned status) {
    switch (status) {
    case 400: case 405: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: return "api_error";
    }
}

enum MHD_Result st_reply_error(st_req *r, unsigned status, const char *type, const char *param, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->anthropic)  // {"type": "error", "error": {"type", "message"}}: what the anthropic clients parse
        return st_reply_json(r, status, json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type",
                                                  anthropic_type(status), "message", msg));
    json_t *err = json_pack("{s:s, s:s, s:o, s:i}", "message", msg, "type", type ? type : status_type(status), "param",
                            param ? json_string(param) : json_null(), "code", (int)status);
    return st_reply_json(r, status, json_pack("{s:o}", "error", err));
}

enum MHD_Result st_reply_engine_error(st_req *r, json_t *ev) {
    int status = (int)json_integer_value(json_object_get(ev, "status"));
    if (status < 400) status = 500;
    json_t *param = json_object_get(ev, "param");
    return st_reply_error(r, (unsigned)status, NULL, json_string_value(param), "%s",
                          json_string_value(json_object_get(ev, "message")));
}

// The peer hung up (checked while waiting on the engine, so an abandoned generation is cancelled at once).
bool st_client_gone(st_req *r) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

// ---- server-sent events -------------------------------------------------------------------------------------------

typedef struct sse {
    st_req *r;
    st_job *job;
    st_sse_format format;
    void (*on_end)(void *ud);
    void *ud;
    st_sbuf out;       // formatted text not yet handed to MHD
    size_t out_pos;
    bool ended;        // the last event was formatted
    double t_last;     // when text was last produced (for keep-alive comments)
} sse;

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    sse *s = cls;
    (void)pos;
    for (;;) {
        if (s->out_pos < s->out.len) {
            size_t n = s->out.len - s->out_pos;
            if (n > max) n = max;
            memcpy(buf, s->out.p + s->out_pos, n);
            s->out_pos += n;
            if (s->out_pos == s->out.len) s->out_pos = s->out.len = 0;
            return (ssize_t)n;
        }
        if (s->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        if (st_client_gone(s->r)) return MHD_CONTENT_READER_END_WITH_ERROR;
        json_t *ev = st_job_next(s->job, 0.25);
        if (ev) {
            if (s->format(s->ud, ev, &s->out)) s->ended = true;
            json_decref(ev);
            s->t_last = st_now();
        } else if (st_now() - s->t_last > st_S.cfg->keepalive_s) {
            // A comment line: ignored by SSE parsers, keeps agents' read timeouts from firing during long prefill.
            st_sbuf_printf(&s->out, ": keep-alive %.0f\n\n", st_now() - s->job->t_queued);
            s->t_last = st_now();
        }
    }
}

static void sse_free(void *cls) {
    sse *s = cls;
    if (s->on_end) s->on_end(s->ud);
    st_job_release(s->job);  // cancels the generation if the client left before its end
    free(s->out.p);
    free(s);
}

enum MHD_Result st_reply_sse(st_req *r, st_job *j, json_t *first, st_sse_format format, void (*on_end)(void *ud),
                             void *ud) {
    sse *s = calloc(1, sizeof *s);
    if (first) {
        if (format(ud, first, &s->out)) s->ended = true;
        json_decref(first);
    }
    s->r = r;
    s->job = j;
    s->format = format;
    s->on_end = on_end;
    s->ud = ud;
    s->t_last = st_now();
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_read, s, sse_free);
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    return queue(r, 200, resp);
}

// ---- request fields -----------------------------------------------------------------------------------------------

int st_perr_set(st_perr *e, const char *param, const char *fmt, ...) {
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *type_name(json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

json_t *st_parse_body(st_req *r, st_perr *e) {
    json_error_t je;
    json_t *b = json_loadb(r->body ? r->body : "", r->body_len, JSON_REJECT_DUPLICATES, &je);
    if (!b) {
        st_perr_set(e, "body", "the request body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
        return NULL;
    }
    if (!json_is_object(b)) {
        st_perr_set(e, "body", "the request body must be a JSON object, got %s", type_name(b));
        json_decref(b);
        return NULL;
    }
    return b;
}

// Absent or null fields keep the caller's default.
int st_get_num(json_t *o, const char *key, double *out, double min, double max, st_perr *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return st_perr_set(e, key, "'%s' must be a number, got %s", key, type_name(v));
    double d = json_number_value(v);
    if (!(d >= min && d <= max)) return st_perr_set(e, key, "'%s' must be in [%g, %g], got %g", key, min, max, d);
    *out = d;
    return 0;
}

int st_get_int(json_t *o, const char *key, int64_t *out, int64_t min, int64_t max, st_perr *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (json_is_real(v) && json_real_value(v) == (double)(int64_t)json_real_value(v)) {
        *out = (int64_t)json_real_value(v);  // 16.0 is an integer too
    } else if (!json_is_integer(v)) {
        return st_perr_set(e, key, "'%s' must be an integer, got %s", key, type_name(v));
    } else *out = json_integer_value(v);
    if (*out < min || *out > max)
        return st_perr_set(e, key, "'%s' must be in [%lld, %lld], got %lld", key, (long long)min, (long long)max,
                           (long long)*out);
    return 0;
}

int st_get_bool(json_t *o, const char *key, bool *out, st_perr *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return st_perr_set(e, key, "'%s' must be a boolean, got %s", key, type_name(v));
    *out = json_is_true(v);
    return 0;
}

int st_get_str(json_t *o, const char *key, const char **out, st_perr *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return st_perr_set(e, key, "'%s' must be a string, got %s", key, type_name(v));
    *out = json_string_value(v);
    return 0;
}

// ---- routing ------------------------------------------------------------------------------------------------------

// Constant-time comparison: the time taken does not depend on where the first difference is.
static bool key_equal(const char *given, const char *key) {
    size_t gl = strlen(given), kl = strlen(key);
    unsigned char diff = (unsigned char)(gl != kl);
    for (size_t i = 0; i < kl; i++) diff |= (unsigned char)(key[i] ^ (i < gl ? given[i] : 0));
    return diff == 0;
}

static bool authorized(st_req *r) {
    const char *key = st_S.cfg->api_key;
    if (!key || !*key) return true;
    const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization");
    if (h && !strncasecmp(h, "Bearer ", 7) && key_equal(h + 7, key)) return true;
    h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "x-api-key");
    return h && key_equal(h, key);
}

typedef struct route {
    const char *method, *path;
    enum MHD_Result (*fn)(st_req *);
    bool auth;
} route;

// The embedded web page (web.h): GET / is index.html, GET /NAME one of its files. No key needed: the page holds no
// data; its API calls send the key the user enters.
static enum MHD_Result web_asset(st_req *r, const char *path) {
    for (int i = 0; i < st_web_n_assets; i++) {
        const st_web_asset *a = &st_web_assets[i];
        if (strcmp(a->path, path)) continue;
        struct MHD_Response *resp = MHD_create_response_from_buffer(a->len, (void *)a->data, MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(resp, "Content-Type", a->mime);
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        // Nothing but this server: the page makes no requests elsewhere, and a script injected through model
        // output could not send data out.
        MHD_add_response_header(resp, "Content-Security-Policy",
                                "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                                "img-src 'self' data:; frame-ancestors 'none'");
        return queue(r, 200, resp);
    }
    return st_reply_error(r, 404, NULL, NULL, "no such endpoint: %s %s", r->method, r->url);
}

static enum MHD_Result api_root(st_req *r) { return web_asset(r, "/index.html"); }

static const route routes[] = {
    {"GET", "/health", st_api_health, false},
    {"GET", "/metrics", st_api_metrics, false},
    {"GET", "/", api_root, false},
    {"GET", "/v1/models", st_api_models, true},
    {"GET", "/v1/status", st_api_status, true},
    {"POST", "/v1/chat/completions", st_api_chat_completions, true},
    {"POST", "/v1/completions", st_api_completions, true},
    {"POST", "/v1/messages", st_api_messages, true},
    {"POST", "/v1/messages/count_tokens", st_api_count_tokens, true},
    {"POST", "/tokenize", st_api_tokenize, true},
    {"POST", "/detokenize", st_api_detokenize, true},
};

static enum MHD_Result dispatch(st_req *r) {
    r->anthropic = !strncmp(r->url, "/v1/messages", 12);
    if (r->too_large)
        return st_reply_error(r, 413, NULL, "body", "the request body is larger than the limit of %lld bytes "
                              "(--max-body)", (long long)st_S.cfg->max_body);
    bool path_found = false;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(r->url, routes[i].path)) continue;
        path_found = true;
        if (strcmp(r->method, routes[i].method)) continue;
        if (routes[i].auth && !authorized(r))
            return st_reply_error(r, 401, NULL, NULL, "invalid or missing API key: send 'Authorization: Bearer KEY' or "
                                  "'x-api-key: KEY'");
        return routes[i].fn(r);
    }
    if (path_found) return st_reply_error(r, 405, NULL, NULL, "%s is not allowed on %s", r->method, r->url);
    if (!strcmp(r->method, "GET") && !strchr(r->url + 1, '/')) return web_asset(r, r->url);
    return st_reply_error(r, 404, NULL, NULL, "no such endpoint: %s %s", r->method, r->url);
}

// Called when the request line arrives: the request's clock starts here (for the body-time limit).
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn) {
    st_req *r = calloc(1, sizeof *r);
    r->t_start = st_now();
    return r;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size, void **con_cls) {
    st_req *r = *con_cls;
    if (!r) *con_cls = r = calloc(1, sizeof *r);
    r->conn = conn;
    r->url = url;
    r->method = method;
    if (r->responded) return MHD_YES;
    if (*upload_size > 0) {
        // A client that trickles its body is cut off once the request has taken longer than the timeout.
        if (st_now() - r->t_start > st_S.cfg->timeout_s) {
            st_warn("serve: %s %s: body not received within %d s; closing", method, url, st_S.cfg->timeout_s);
            return MHD_NO;
        }
        if (!r->too_large && r->body_len + *upload_size > (size_t)st_S.cfg->max_body) {
            r->too_large = true;  // keep reading (and dropping) so the client sees the 413, not a reset
            free(r->body);
            r->body = NULL;
            r->body_len = r->body_cap = 0;
        }
        if (!r->too_large) {
            if (r->body_len + *upload_size + 1 > r->body_cap) {
                r->body_cap = 2 * (r->body_len + *upload_size) + 1024;
                r->body = realloc(r->body, r->body_cap);
            }
            memcpy(r->body + r->body_len, upload_data, *upload_size);
            r->body_len += *upload_size;
            r->body[r->body_len] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (!r->started) {
        // First call (headers only): the body, if any, comes in the next calls. A declared body far past the limit
        // is refused at once instead of being read.
        r->started = true;
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoll(cl, NULL, 10) > st_S.cfg->max_body + (64ll << 20)) {
            r->too_large = true;
            return dispatch(r);
        }
        return MHD_YES;
    }
    return dispatch(r);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    st_req *r = *con_cls;
    if (!r) return;
    free(r->body);
    free(r);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n && buf[n - 1] == '\n') buf[--n] = 0;
    st_debug("microhttpd: %s", buf);
}

int st_server_main(const st_server_config *c) {
    signal(SIGPIPE, SIG_IGN);
    const char *base = strrchr(c->model_path, '/');
    base = base ? base + 1 : c->model_path;
    snprintf(st_S.model_name, sizeof st_S.model_name, "%s", c->alias ? c->alias : base);
    if (!c->alias) {
        char *dot = strstr(st_S.model_name, ".gguf");
        if (dot && !dot[5]) *dot = 0;
    }
    if (access(c->model_path, R_OK)) {
        fprintf(stderr, "strata serve: cannot read the model '%s': %s\n", c->model_path, strerror(errno));
        return 1;
    }
    struct sockaddr_storage addr;
    memset(&addr, 0, sizeof addr);
    struct sockaddr_in *a4 = (struct sockaddr_in *)&addr;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&addr;
    bool v6 = strchr(c->host, ':') != NULL;
    if (v6) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)c->port);
        if (inet_pton(AF_INET6, c->host, &a6->sin6_addr) != 1) goto bad_host;
    } else {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)c->port);
        if (inet_pton(AF_INET, !strcmp(c->host, "localhost") ? "127.0.0.1" : c->host, &a4->sin_addr) != 1) goto bad_host;
    }
    // SIGINT/SIGTERM are taken by sigwait below, whatever thread the kernel would pick: block them before any
    // thread starts (threads inherit the mask; the worker unblocks them after fork).
    sigset_t stop_set;
    sigemptyset(&stop_set);
    sigaddset(&stop_set, SIGINT);
    sigaddset(&stop_set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_set, NULL);
    if (st_sup_start(c)) {
        fprintf(stderr, "strata serve: %s\n", st_errmsg());
        return 1;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG |
                     (v6 ? MHD_USE_IPv6 : 0);
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)c->port, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)c->timeout_s, MHD_OPTION_CONNECTION_LIMIT, (unsigned)c->max_connections,
        MHD_OPTION_URI_LOG_CALLBACK, on_uri, NULL, MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "strata serve: cannot listen on %s:%d: %s\n", c->host, c->port,
                errno ? strerror(errno) : "microhttpd failed to start");
        st_sup_stop();
        return 1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    int port = di ? di->port : c->port;
    st_info("serve: listening on http://%s%s%s:%d (model %s%s)", v6 ? "[" : "", c->host, v6 ? "]" : "", port,
            st_S.model_name, c->api_key && *c->api_key ? ", API key required" : "");
    int sig = 0;
    while (sigwait(&stop_set, &sig)) {}
    st_info("serve: signal %d: shutting down", sig);
    st_sup_stop();  // kills and reaps the worker; requests in flight end with an error event
    MHD_stop_daemon(d);
    return 0;
bad_host:
    fprintf(stderr, "strata serve: --host '%s' is not an IP address\n", c->host);
    return 2;
}

void st_server_config_defaults(st_server_config *c) {
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8080;
    c->prefix_cache = true;
    c->prompt_checkpoints = 4;
    c->checkpoint_mib = 1024;
    c->checkpoint_min_tokens = 256;
    c->max_body = 16ll << 20;
    c->queue_max = 32;
    c->max_connections = 256;
    c->timeout_s = 60;
    c->queue_wait_s = 120;
    c->keepalive_s = 5;
    c->watchdog_s = 120;
    c->load_timeout_s = 1800;
    c->backoff_min_s = 0.5;
    c->backoff_max_s = 30;
    c->worker_fd = -1;
    c->cpu_misses = true;  // the engine's defaults (strata_engine_default_params)
    c->pcie_frac = -1.0;
}
