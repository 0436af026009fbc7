// The framed protocol between `strata serve` (the HTTP process) and its engine worker process, over a socketpair.
//
// A frame is a 4-byte little-endian length followed by that many bytes of UTF-8 JSON (one object, no NUL).
// Every message has "t" (its type); messages about a request carry its "id".
//
// server -> worker:
//   {"t":"gen", "id", "prompt": text | "tokens": [ids], "add_special", "parse_special", "max_tokens", "stop": [..],
//    "sampling": {temperature, top_k, top_p, min_p, presence_penalty, frequency_penalty, repeat_penalty,
//                 penalty_last_n, seed}, "cache": bool, "ignore_eos": bool,
//    "special": bool (render control tokens that do not end generation as their text: chat formats whose markup
//               is control tokens, e.g. gpt-oss <|channel|>)}
//   {"t":"cancel", "id"}                        stop that generation (its "done" says finish "cancelled")
//   {"t":"tokenize", "id", "text", "add_special", "parse_special"}   {"t":"detokenize", "id", "tokens"}
//   {"t":"ping", "id"}                          answered with "pong" (the watchdog's liveness check when idle)
// worker -> server:
//   {"t":"ready", "n_ctx", "n_ctx_train", "n_vocab", "arch", "threads", "chat_template", "bos_token", "load_s"}
//   {"t":"prompt", "id", "n_prompt", "n_cached"}       after tokenizing, before prefill
//   {"t":"prefill", "id", "done", "total"}             after each prefill chunk (also the busy heartbeat)
//   {"t":"tok", "id", "text", "n_gen"}                 one generated token; text may be "" (held back for stop strings)
//   {"t":"done", "id", "finish": "stop"|"length"|"cancelled", "n_prompt", "n_cached", "n_gen", "t_prefill",
//    "t_decode", "kv_used", "stop_hit"?: the stop string that ended it}
//   {"t":"error", "id", "status": HTTP status, "code", "message", "param"?}
//   {"t":"tokens", "id", "tokens"}   {"t":"text", "id", "text"}   {"t":"pong", "id", "kv_used"}
#ifndef STRATA_SERVER_PROTO_H
#define STRATA_SERVER_PROTO_H

#include <jansson.h>

#define ST_PROTO_MAX_FRAME (256u << 20)

// Sends one message (the caller keeps its reference). Returns 0, or -1 (st_errmsg) when the peer is gone.
// Not thread-safe per fd: callers serialize sends.
int st_proto_send(int fd, const json_t *msg);
// Waits up to timeout_ms (-1: forever) for a frame and returns it (new reference). Returns NULL with *eof = 0 on
// timeout, NULL with *eof = 1 when the peer closed or sent garbage (st_errmsg says which).
json_t *st_proto_recv(int fd, int timeout_ms, int *eof);

#endif
