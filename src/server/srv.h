// Internals of strata serve shared by the HTTP layer, the API modules and the engine supervisor.
#ifndef STRATA_SERVER_SRV_H
#define STRATA_SERVER_SRV_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "server/server.h"
#include "server/toolcall.h"

// ---- jobs: one request's traffic with the engine worker ----------------------------------------------------------

typedef enum { ST_JOB_GEN, ST_JOB_SIDE } st_job_kind;  // SIDE: tokenize/detokenize, answered even while generating

typedef struct st_job {
    json_int_t id;
    st_job_kind kind;
    json_t *msg;             // the message for the worker (owns a reference; immutable once submitted)
    json_t **ev;             // [ev_len] worker events not yet taken by the HTTP side, oldest first (own references)
    int ev_len, ev_cap;
    bool sent;               // handed to the worker
    bool finished;           // the final event (done / error / tokens / text) is in ev or was taken
    bool cancelled;          // the client went away: stop generating
    bool cancel_sent;
    int refs;                // the HTTP side + the supervisor while queued / in flight
    double t_queued;
    pthread_cond_t cond;     // signalled on each event (with st_srv.mu)
    struct st_job *next;     // wait queue or side list link
} st_job;

typedef enum { ST_ENG_STOPPED, ST_ENG_LOADING, ST_ENG_READY, ST_ENG_BACKOFF } st_eng_state;

// The server's one shared state, guarded by mu. Everything about the engine is reset when a worker dies.
typedef struct st_srv {
    const st_server_config *cfg;
    char model_name[256];
    pthread_mutex_t mu;
    st_eng_state state;
    pid_t pid;               // the worker, 0 when none
    int fd;                  // the server's end of the channel, -1 when none
    json_t *info;            // the worker's "ready" message, NULL unless READY
    double t_spawn, t_ready, t_last_msg, t_next_start, backoff_s;
    st_job *q_head, *q_tail; // generation jobs waiting for the engine
    int q_len;
    st_job *current;         // the generation job in the worker
    st_job *side;            // side jobs sent or waiting (list)
    json_int_t next_id;
    int wake[2];             // pipe: wakes the supervisor when there is work
    bool stopping;
    // statistics
    double t_start;
    uint64_t restarts;       // workers that died or were killed
    char last_exit[256];     // why the last worker ended
    uint64_t n_requests, n_errors, n_prompt_tokens, n_gen_tokens, n_cached_tokens, n_cache_hits, n_cache_lookups;
    uint64_t n_rejected_queue_full;
    uint64_t n_checkpoint_hits;  // requests whose cached prefix came from a checkpoint, not the live session
    int n_checkpoints;           // checkpoints the worker holds (as of its last finished request)
    int64_t checkpoint_bytes;    // and their host memory
    double last_prefill_tps, last_decode_tps;
    int kv_used;
    double gpu_mem_used_mb, gpu_mem_total_mb;  // device memory of a GPU engine (last ping), 0 on the CPU
    json_t *hybrid;          // hybrid expert placement counters of the last ping (worker.c), or NULL
    int prefill_done, prefill_total;  // of the current generation
} st_srv;

extern st_srv st_S;

// supervisor.c
int st_sup_start(const st_server_config *cfg);
void st_sup_stop(void);
// A new job for msg (reference stolen); NULL with *status = 429 when the queue is full.
st_job *st_job_submit(json_t *msg, st_job_kind kind, int *status);
// Takes the next event (new reference for the caller) waiting up to timeout_s; NULL on timeout. A job that could not
// start in time (engine not ready for cfg->queue_wait_s) gets a 503 error event.
json_t *st_job_next(st_job *j, double timeout_s);
// The client is gone (or done): cancels the generation if it still runs and drops the HTTP side's reference.
void st_job_release(st_job *j);
int st_retry_after_s(void);  // seconds a client should wait before retrying after a 503

// ---- HTTP (http.c) ---------------------------------------------------------------------------------------------

typedef struct st_req {
    struct MHD_Connection *conn;
    const char *url, *method;
    char *body;              // [body_len] bytes, NUL-terminated
    size_t body_len, body_cap;
    bool too_large;
    bool started;            // the access handler's first (headers-only) call is done
    double t_start;
    bool responded;
    bool anthropic;          // /v1/messages: errors in Anthropic's shape
} st_req;

typedef struct st_sbuf {
    char *p;
    size_t len, cap;
} st_sbuf;
void st_sbuf_add(st_sbuf *b, const char *s, size_t n);
void st_sbuf_printf(st_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

enum MHD_Result st_reply_json(st_req *r, unsigned status, json_t *body);  // steals body
enum MHD_Result st_reply_text(st_req *r, unsigned status, const char *content_type, const char *text);
// OpenAI-style error {"error": {"message", "type", "param", "code"}}.
enum MHD_Result st_reply_error(st_req *r, unsigned status, const char *type, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
// Replies with a worker error event ({"status","code","message","param"}).
enum MHD_Result st_reply_engine_error(st_req *r, json_t *ev);
bool st_client_gone(st_req *r);

// Server-sent events: format(ud, ev, out) turns one worker event into SSE text and returns true at the end.
// on_end(ud) runs once when the stream ends for any reason; first (stolen, may be NULL) is formatted before the rest.
// The stream owns the job's HTTP-side reference from here on.
typedef bool (*st_sse_format)(void *ud, json_t *ev, st_sbuf *out);
enum MHD_Result st_reply_sse(st_req *r, st_job *j, json_t *first, st_sse_format format, void (*on_end)(void *ud),
                             void *ud);

// Parsing request bodies: the first bad field's name and the problem, for a 400.
typedef struct st_perr {
    char param[64];
    char msg[512];
} st_perr;
json_t *st_parse_body(st_req *r, st_perr *e);  // an object, or NULL
int st_get_num(json_t *o, const char *key, double *out, double min, double max, st_perr *e);
int st_get_int(json_t *o, const char *key, int64_t *out, int64_t min, int64_t max, st_perr *e);
int st_get_bool(json_t *o, const char *key, bool *out, st_perr *e);
int st_get_str(json_t *o, const char *key, const char **out, st_perr *e);
int st_perr_set(st_perr *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// ---- APIs --------------------------------------------------------------------------------------------------------
enum MHD_Result st_api_chat_completions(st_req *r);     // api_openai.c
enum MHD_Result st_api_completions(st_req *r);
enum MHD_Result st_api_models(st_req *r);
enum MHD_Result st_api_tokenize(st_req *r);
enum MHD_Result st_api_detokenize(st_req *r);
enum MHD_Result st_api_messages(st_req *r);             // api_anthropic.c
enum MHD_Result st_api_count_tokens(st_req *r);
enum MHD_Result st_api_health(st_req *r);               // status.c
enum MHD_Result st_api_status(st_req *r);
enum MHD_Result st_api_metrics(st_req *r);

// Shared by the OpenAI and Anthropic modules (api_openai.c): sampling fields of a request into the worker message.
int st_parse_sampling(json_t *body, json_t *gen, st_perr *e);

// Runs a generation job for request r (gen: the worker message, stolen; ud: the API's state, freed by on_end).
// stream: SSE with `format` for every event. Otherwise every event is given to `format` too (with a scratch buffer
// that is dropped: the API accumulates in ud) and at "done" `respond(ud, done)` builds the JSON body (200).
enum MHD_Result st_run_generation(st_req *r, json_t *gen, bool stream, st_sse_format format, void (*on_end)(void *ud),
                                  void *ud, json_t *(*respond)(void *ud, json_t *done));
void st_new_id(char *out, size_t n, const char *prefix);  // "chatcmpl-..." style ids
// Runs a tokenize/detokenize job (msg stolen) and returns its final event, or NULL after replying with the error.
json_t *st_run_side(st_req *r, json_t *msg, enum MHD_Result *rc);

// ---- chat requests (chat.c) --------------------------------------------------------------------------------------

typedef enum { ST_TOOLS_AUTO, ST_TOOLS_NONE, ST_TOOLS_REQUIRED, ST_TOOLS_NAMED } st_tool_choice;

// What the engine gets for a chat request, and how its answer is parsed.
typedef struct st_chat_plan {
    char *prompt;           // rendered prompt, the forced prefix included (malloc'd)
    char *prefix;           // forced call prefix appended to the prompt (tool_choice required/named), or NULL; the
                            // parser is fed it first
    st_tc_options popt;     // parser options (popt.tool_defs points into the caller's tools)
    bool special;           // the worker must render control tokens (the format's markup uses them)
} st_chat_plan;

// Renders normalized messages (+ tools, chat_template_kwargs) with the model's template and plans the parsing.
// Returns 0; -1 with err (a 400: the template refused); -2 when no engine became ready (a 503).
int st_chat_prepare(json_t *messages, json_t *tools, json_t *kwargs, st_tool_choice choice, const char *tool_name,
                    st_chat_plan *plan, char *err, size_t errlen);
void st_chat_plan_free(st_chat_plan *plan);
// The prompt fields of the worker's "gen" message for a plan (api_openai.c).
void st_chat_gen_setup(json_t *gen, const st_chat_plan *plan);

// chat.c: renders a conversation (messages normalized to {"role", "content": string, ...}) into the prompt text with
// the model's template (template_src from the worker's "ready"; NULL: none). extra: chat_template_kwargs or NULL.
// Returns a malloc'd string or NULL with err set.
char *st_chat_render(const char *template_src, const char *bos, const char *eos, json_t *messages, json_t *tools,
                     json_t *extra, bool add_generation_prompt, char *err, size_t errlen);
// Waits (up to cfg->queue_wait_s) until an engine is ready and copies what rendering needs from it: the chat
// template (NULL if the model has none) and the BOS text. Returns 0, or -1 when no engine became ready.
int st_wait_model_info(char **template_src, char **bos);

#endif
