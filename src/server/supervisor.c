// The engine supervisor: one thread that starts the worker process, relays jobs to it one generation at a time,
// routes its events to the waiting HTTP threads, and replaces it when it dies or stops answering.
//
// The invariant that keeps the server from getting stuck: a successor is started only after the predecessor was
// killed (SIGKILL if needed) and reaped with waitpid, and everything learned from the old worker (its "ready" info,
// its in-flight jobs, its KV use) is dropped first. Only the supervisor thread writes to the channel.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server/proto.h"
#include "server/srv.h"
#include "util/log.h"

st_srv st_S = {.mu = PTHREAD_MUTEX_INITIALIZER, .fd = -1, .wake = {-1, -1}};
static pthread_t sup_thread;

static void wake(void) {
    char c = 1;
    if (write(st_S.wake[1], &c, 1) < 0) { /* the pipe is full: the supervisor is awake anyway */ }
}

// ---- jobs ---------------------------------------------------------------------------------------------------------

static void job_unref(st_job *j) {  // with mu held
    if (--j->refs > 0) return;
    for (int i = 0; i < j->ev_len; i++) json_decref(j->ev[i]);
    free(j->ev);
    json_decref(j->msg);
    pthread_cond_destroy(&j->cond);
    free(j);
}

static void job_push(st_job *j, json_t *ev, bool final) {  // with mu held; steals ev
    if (j->finished) {
        json_decref(ev);
        return;
    }
    if (j->ev_len == j->ev_cap) j->ev = realloc(j->ev, sizeof(json_t *) * (size_t)(j->ev_cap = 2 * j->ev_cap + 8));
    j->ev[j->ev_len++] = ev;
    if (final) j->finished = true;
    pthread_cond_broadcast(&j->cond);
}

static json_t *error_event(int status, const char *code, const char *msg) {
    return json_pack("{s:s, s:i, s:s, s:s}", "t", "error", "status", status, "code", code, "message", msg);
}

st_job *st_job_submit(json_t *msg, st_job_kind kind, int *status) {
    st_job *j = calloc(1, sizeof *j);
    pthread_cond_init(&j->cond, NULL);
    j->kind = kind;
    j->msg = msg;
    j->refs = 2;
    j->t_queued = st_now();
    pthread_mutex_lock(&st_S.mu);
    j->id = ++st_S.next_id;
    json_object_set_new(msg, "id", json_integer(j->id));
    st_S.n_requests++;
    if (kind == ST_JOB_GEN) {
        if (st_S.q_len >= st_S.cfg->queue_max) {
            st_S.n_rejected_queue_full++;
            pthread_mutex_unlock(&st_S.mu);
            json_decref(msg);
            pthread_cond_destroy(&j->cond);
            free(j);
            *status = 429;
            return NULL;
        }
        if (st_S.q_tail) st_S.q_tail->next = j;
        else st_S.q_head = j;
        st_S.q_tail = j;
        st_S.q_len++;
    } else {
        j->next = st_S.side;
        st_S.side = j;
    }
    pthread_mutex_unlock(&st_S.mu);
    wake();
    return j;
}

static bool unlink_queued(st_job *j) {  // with mu held: removes a job not yet sent; true if it was queued
    st_job **pp = j->kind == ST_JOB_GEN ? &st_S.q_head : &st_S.side, *prev = NULL;
    for (st_job *p = *pp; p; prev = p, p = p->next) {
        if (p != j) continue;
        if (prev) prev->next = p->next;
        else *pp = p->next;
        if (j->kind == ST_JOB_GEN) {
            if (st_S.q_tail == j) st_S.q_tail = prev;
            st_S.q_len--;
        }
        j->next = NULL;
        return true;
    }
    return false;
}

int st_retry_after_s(void) {
    double wait = st_S.state == ST_ENG_BACKOFF ? st_S.t_next_start - st_now() + 1 : 1;
    return wait < 1 ? 1 : (int)(wait + 0.999);
}

json_t *st_job_next(st_job *j, double timeout_s) {
    pthread_mutex_lock(&st_S.mu);
    double deadline = st_now() + timeout_s;
    while (j->ev_len == 0) {
        // A request waits for a (re)starting engine only so long, so a client never hangs on a crash loop.
        if (!j->sent && !j->finished && st_S.state != ST_ENG_READY &&
            st_now() - j->t_queued > st_S.cfg->queue_wait_s && unlink_queued(j)) {
            char msg[512];
            snprintf(msg, sizeof msg,
                     "the engine is not ready (%s) after waiting %d s; retry later%s%s",
                     st_S.state == ST_ENG_LOADING ? "loading" : "restarting", st_S.cfg->queue_wait_s,
                     st_S.last_exit[0] ? "; last engine exit: " : "", st_S.last_exit);
            job_unref(j);  // the queue's reference
            job_push(j, error_event(503, "engine_unavailable", msg), true);
            break;
        }
        double left = deadline - st_now();
        if (left <= 0) break;
        if (left > 0.25) left = 0.25;  // re-check the queue-wait limit above
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double t = ts.tv_sec + ts.tv_nsec * 1e-9 + left;
        ts.tv_sec = (time_t)t;
        ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&j->cond, &st_S.mu, &ts);
    }
    json_t *ev = NULL;
    if (j->ev_len > 0) {
        ev = j->ev[0];
        memmove(j->ev, j->ev + 1, sizeof(json_t *) * (size_t)--j->ev_len);
    }
    pthread_mutex_unlock(&st_S.mu);
    return ev;
}

void st_job_release(st_job *j) {
    if (!j) return;
    pthread_mutex_lock(&st_S.mu);
    if (!j->finished) {
        j->cancelled = true;
        if (!j->sent && unlink_queued(j)) {
            j->finished = true;
            job_unref(j);  // the queue's reference: it never reaches the worker
        }
    }
    job_unref(j);
    pthread_mutex_unlock(&st_S.mu);
    wake();
}

// ---- the worker process -------------------------------------------------------------------------------------------

static int spawn_worker(void) {
    const st_server_config *c = st_S.cfg;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
        snprintf(st_S.last_exit, sizeof st_S.last_exit, "socketpair: %s", strerror(errno));
        return -1;
    }
    // Built before fork: between fork and exec the child may only make async-signal-safe calls.
    char **argv = calloc((size_t)c->argc + 4, sizeof *argv);
    int n = 0;
    argv[n++] = "strata";
    argv[n++] = "serve";
    argv[n++] = "--engine-worker";
    argv[n++] = "3";
    for (int i = 1; i < c->argc; i++) argv[n++] = c->argv[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        sigset_t all;
        sigfillset(&all);
        sigprocmask(SIG_UNBLOCK, &all, NULL);  // the server blocks SIGINT/SIGTERM for sigwait; the worker must not
        if (sv[1] == 3) fcntl(3, F_SETFD, 0);
        else dup2(sv[1], 3);  // dup2 clears close-on-exec on fd 3
        close_range(4, ~0u, 0);  // nothing else of the server (listening socket, clients) leaks into the worker
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    free(argv);
    close(sv[1]);
    if (pid < 0) {
        close(sv[0]);
        snprintf(st_S.last_exit, sizeof st_S.last_exit, "fork: %s", strerror(errno));
        return -1;
    }
    // A worker that stops reading must not block the supervisor forever: sends time out like the watchdog.
    struct timeval tv = {.tv_sec = (time_t)c->watchdog_s, .tv_usec = 0};
    setsockopt(sv[0], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    pthread_mutex_lock(&st_S.mu);
    st_S.pid = pid;
    st_S.fd = sv[0];
    st_S.state = ST_ENG_LOADING;
    st_S.t_spawn = st_S.t_last_msg = st_now();
    pthread_mutex_unlock(&st_S.mu);
    st_info("serve: started engine worker %d", (int)pid);
    return 0;
}

// Ends the worker for good: kill, reap, then drop all that came from it and fail what it had in hand.
static void worker_down(const char *why) {
    pthread_mutex_lock(&st_S.mu);
    pid_t pid = st_S.pid;
    int fd = st_S.fd;
    pthread_mutex_unlock(&st_S.mu);
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (fd >= 0) close(fd);
    char how[96];
    if (WIFSIGNALED(status)) snprintf(how, sizeof how, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else snprintf(how, sizeof how, "exit status %d", WEXITSTATUS(status));

    pthread_mutex_lock(&st_S.mu);
    st_S.pid = 0;
    st_S.fd = -1;
    json_decref(st_S.info);
    st_S.info = NULL;
    json_decref(st_S.hybrid);
    st_S.hybrid = NULL;
    st_S.kv_used = 0;
    st_S.prefill_done = st_S.prefill_total = 0;
    st_S.restarts++;
    snprintf(st_S.last_exit, sizeof st_S.last_exit, "worker %d: %s; %s", (int)pid, why, how);
    char msg[512];
    if (st_S.stopping) snprintf(msg, sizeof msg, "the server is shutting down");
    else
        snprintf(msg, sizeof msg, "the engine stopped (%s) while serving this request; it is restarting - retry the "
                 "request", st_S.last_exit);
    if (st_S.current) {
        job_push(st_S.current, error_event(503, "engine_restarted", msg), true);
        job_unref(st_S.current);
        st_S.current = NULL;
    }
    // Side jobs already sent are lost with the worker; unsent ones wait for the successor.
    for (st_job **pp = &st_S.side; *pp;) {
        st_job *j = *pp;
        if (j->sent || j->finished || st_S.stopping) {
            *pp = j->next;
            job_push(j, error_event(503, "engine_restarted", msg), true);
            job_unref(j);
        } else pp = &j->next;
    }
    if (!st_S.stopping) {
        st_S.state = ST_ENG_BACKOFF;
        st_S.t_next_start = st_now() + st_S.backoff_s;
        st_error("serve: engine %s; restarting in %.1f s", st_S.last_exit, st_S.backoff_s);
        st_S.backoff_s *= 2;
        if (st_S.backoff_s > st_S.cfg->backoff_max_s) st_S.backoff_s = st_S.cfg->backoff_max_s;
    } else {
        st_S.state = ST_ENG_STOPPED;
        while (st_S.q_head) {  // no successor: waiting requests end now
            st_job *j = st_S.q_head;
            unlink_queued(j);
            job_push(j, error_event(503, "server_stopping", "the server is shutting down"), true);
            job_unref(j);
        }
    }
    pthread_mutex_unlock(&st_S.mu);
}

static st_job *find_job(json_int_t id) {  // with mu held
    if (st_S.current && st_S.current->id == id) return st_S.current;
    for (st_job *j = st_S.side; j; j = j->next)
        if (j->id == id) return j;
    return NULL;
}

static void on_message(json_t *m) {  // with mu held; steals m
    const char *t = json_string_value(json_object_get(m, "t"));
    json_int_t id = json_integer_value(json_object_get(m, "id"));
    st_S.t_last_msg = st_now();
    if (!t) {
        json_decref(m);
        return;
    }
    if (!strcmp(t, "ready")) {
        json_decref(st_S.info);
        st_S.info = m;
        st_S.state = ST_ENG_READY;
        st_S.t_ready = st_now();
        st_S.n_checkpoints = 0;  // a new worker starts without the predecessor's checkpoints
        st_S.checkpoint_bytes = 0;
        st_info("serve: engine ready (worker %d, context %d tokens, loaded in %.2f s)", (int)st_S.pid,
                (int)json_integer_value(json_object_get(m, "n_ctx")), json_number_value(json_object_get(m, "load_s")));
        return;
    }
    if (!strcmp(t, "pong")) {
        st_S.kv_used = (int)json_integer_value(json_object_get(m, "kv_used"));
        json_t *gm = json_object_get(m, "gpu_mem");
        st_S.gpu_mem_used_mb = gm ? (double)json_integer_value(json_object_get(gm, "used")) / 1048576.0 : 0;
        st_S.gpu_mem_total_mb = gm ? (double)json_integer_value(json_object_get(gm, "total")) / 1048576.0 : 0;
        json_decref(st_S.hybrid);
        st_S.hybrid = json_incref(json_object_get(m, "hybrid"));  // NULL when absent
        json_decref(m);
        return;
    }
    st_job *j = find_job(id);
    if (!strcmp(t, "prefill")) {
        st_S.prefill_done = (int)json_integer_value(json_object_get(m, "done"));
        st_S.prefill_total = (int)json_integer_value(json_object_get(m, "total"));
        json_decref(m);
        return;
    }
    if (!strcmp(t, "prompt")) {
        int n_cached = (int)json_integer_value(json_object_get(m, "n_cached"));
        st_S.n_cache_lookups++;
        if (n_cached > 0) st_S.n_cache_hits++;
        if (json_is_true(json_object_get(m, "checkpoint"))) st_S.n_checkpoint_hits++;
        st_S.prefill_done = 0;
        st_S.prefill_total = (int)json_integer_value(json_object_get(m, "n_prompt")) - n_cached;
    }
    bool final = !strcmp(t, "done") || !strcmp(t, "error") || !strcmp(t, "tokens") || !strcmp(t, "text");
    if (!strcmp(t, "done")) {
        double tp = json_number_value(json_object_get(m, "t_prefill"));
        double td = json_number_value(json_object_get(m, "t_decode"));
        int n_prompt = (int)json_integer_value(json_object_get(m, "n_prompt"));
        int n_cached = (int)json_integer_value(json_object_get(m, "n_cached"));
        int n_gen = (int)json_integer_value(json_object_get(m, "n_gen"));
        if (tp > 0 && n_prompt > n_cached) st_S.last_prefill_tps = (n_prompt - n_cached) / tp;
        if (td > 0 && n_gen > 1) st_S.last_decode_tps = (n_gen - 1) / td;
        st_S.n_prompt_tokens += (uint64_t)n_prompt;
        st_S.n_cached_tokens += (uint64_t)n_cached;
        st_S.n_gen_tokens += (uint64_t)n_gen;
        st_S.kv_used = (int)json_integer_value(json_object_get(m, "kv_used"));
        st_S.n_checkpoints = (int)json_integer_value(json_object_get(m, "checkpoints"));
        st_S.checkpoint_bytes = (int64_t)json_integer_value(json_object_get(m, "checkpoint_bytes"));
        st_S.prefill_done = st_S.prefill_total = 0;
        st_S.backoff_s = st_S.cfg->backoff_min_s;  // a finished request proves the engine healthy
    }
    if (!strcmp(t, "error")) st_S.n_errors++;
    if (!j) {
        json_decref(m);
        return;
    }
    job_push(j, m, final);
    if (final) {
        if (j == st_S.current) st_S.current = NULL;
        else
            for (st_job **pp = &st_S.side; *pp; pp = &(*pp)->next)
                if (*pp == j) {
                    *pp = j->next;
                    break;
                }
        job_unref(j);
    }
}

// Under mu: picks what to send now (new references in out[], at most max).
static int collect_sends(json_t **out, int max) {
    int n = 0;
    if (st_S.state != ST_ENG_READY) return 0;
    for (st_job *j = st_S.side; j && n < max; j = j->next)
        if (!j->sent && !j->cancelled) {
            j->sent = true;
            out[n++] = json_incref(j->msg);
        }
    while (!st_S.current && st_S.q_head && n < max) {
        st_job *j = st_S.q_head;
        unlink_queued(j);
        if (j->cancelled) {  // its client left while it waited
            j->finished = true;
            job_unref(j);
            continue;
        }
        j->sent = true;
        st_S.current = j;
        st_S.t_last_msg = st_now();  // the watchdog counts from the hand-over
        out[n++] = json_incref(j->msg);
    }
    if (st_S.current && st_S.current->cancelled && !st_S.current->cancel_sent && n < max) {
        st_S.current->cancel_sent = true;
        out[n++] = json_pack("{s:s, s:I}", "t", "cancel", "id", st_S.current->id);
    }
    return n;
}

static void *supervisor(void *arg) {
    (void)arg;
    const st_server_config *c = st_S.cfg;
    double t_ping = 0, t_ping_sent = 0;
    bool ping_out = false;
    for (;;) {
        pthread_mutex_lock(&st_S.mu);
        bool stopping = st_S.stopping;
        bool need_start = !stopping && st_S.pid == 0 && st_now() >= st_S.t_next_start;
        pthread_mutex_unlock(&st_S.mu);
        if (stopping) break;
        if (need_start) {
            ping_out = false;
            if (spawn_worker()) {
                pthread_mutex_lock(&st_S.mu);
                st_S.state = ST_ENG_BACKOFF;
                st_S.t_next_start = st_now() + st_S.backoff_s;
                pthread_mutex_unlock(&st_S.mu);
                st_error("serve: cannot start the engine worker: %s", st_S.last_exit);
            }
        }
        json_t *sends[64];
        pthread_mutex_lock(&st_S.mu);
        int n_send = st_S.fd >= 0 ? collect_sends(sends, 64) : 0;
        int fd = st_S.fd;
        pthread_mutex_unlock(&st_S.mu);
        bool dead = false;
        const char *why = NULL;
        for (int i = 0; i < n_send; i++) {
            if (!dead && st_proto_send(fd, sends[i])) {
                dead = true;
                why = "the engine channel failed on send";
            }
            json_decref(sends[i]);
        }
        struct pollfd p[2] = {{.fd = st_S.wake[0], .events = POLLIN}, {.fd = fd, .events = POLLIN}};
        if (!dead && poll(p, fd >= 0 ? 2 : 1, 200) > 0) {
            if (p[0].revents & POLLIN) {
                char buf[64];
                while (read(st_S.wake[0], buf, sizeof buf) > 0) {}
            }
            if (fd >= 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
                for (;;) {  // everything that is waiting, so a final "done" is not lost behind a death
                    int eof = 0;
                    json_t *m = st_proto_recv(fd, 0, &eof);
                    if (m) {
                        pthread_mutex_lock(&st_S.mu);
                        on_message(m);
                        pthread_mutex_unlock(&st_S.mu);
                        continue;
                    }
                    if (eof) {
                        dead = true;
                        why = "the engine channel closed (the worker exited or crashed)";
                    }
                    break;
                }
            }
        }
        // Watchdog.
        double now = st_now();
        pthread_mutex_lock(&st_S.mu);
        static char wbuf[160];
        if (!dead && st_S.pid > 0) {
            if (st_S.state == ST_ENG_LOADING && now - st_S.t_spawn > c->load_timeout_s) {
                dead = true;
                snprintf(wbuf, sizeof wbuf, "watchdog: not ready %.0f s after start", c->load_timeout_s);
                why = wbuf;
            } else if (st_S.state == ST_ENG_READY && (st_S.current || st_S.side) && now - st_S.t_last_msg > c->watchdog_s) {
                dead = true;
                snprintf(wbuf, sizeof wbuf, "watchdog: no progress for %.0f s while busy", c->watchdog_s);
                why = wbuf;
            } else if (st_S.state == ST_ENG_READY && !st_S.current) {
                if (ping_out && st_S.t_last_msg >= t_ping_sent) ping_out = false;
                if (ping_out && now - t_ping_sent > c->watchdog_s) {
                    dead = true;
                    snprintf(wbuf, sizeof wbuf, "watchdog: no answer to a ping for %.0f s", c->watchdog_s);
                    why = wbuf;
                } else if (!ping_out && now - t_ping > (c->watchdog_s < 15 ? c->watchdog_s / 3 : 5)) {
                    ping_out = true;
                    t_ping = t_ping_sent = now;
                    pthread_mutex_unlock(&st_S.mu);
                    json_t *ping = json_pack("{s:s, s:i}", "t", "ping", "id", 0);
                    if (st_proto_send(fd, ping)) {
                        dead = true;
                        why = "the engine channel failed on send";
                    }
                    json_decref(ping);
                    pthread_mutex_lock(&st_S.mu);
                }
            }
        }
        pthread_mutex_unlock(&st_S.mu);
        if (dead) worker_down(why);
    }
    worker_down("server shutting down");
    return NULL;
}

int st_sup_start(const st_server_config *cfg) {
    st_S.cfg = cfg;
    st_S.t_start = st_now();
    st_S.backoff_s = cfg->backoff_min_s;
    if (pipe2(st_S.wake, O_CLOEXEC | O_NONBLOCK)) return st_err("serve: pipe: %s", strerror(errno));
    if (pthread_create(&sup_thread, NULL, supervisor, NULL)) return st_err("serve: cannot start the supervisor thread");
    return 0;
}

void st_sup_stop(void) {
    pthread_mutex_lock(&st_S.mu);
    st_S.stopping = true;
    pthread_mutex_unlock(&st_S.mu);
    wake();
    pthread_join(sup_thread, NULL);
}

int st_wait_model_info(char **template_src, char **bos) {
    double t0 = st_now();
    pthread_mutex_lock(&st_S.mu);
    while (!st_S.info) {
        if (st_S.stopping || st_now() - t0 > st_S.cfg->queue_wait_s) {
            pthread_mutex_unlock(&st_S.mu);
            return -1;
        }
        pthread_mutex_unlock(&st_S.mu);
        usleep(50 * 1000);
        pthread_mutex_lock(&st_S.mu);
    }
    const char *t = json_string_value(json_object_get(st_S.info, "chat_template"));
    const char *b = json_string_value(json_object_get(st_S.info, "bos_token"));
    *template_src = t ? strdup(t) : NULL;
    *bos = strdup(b ? b : "");
    pthread_mutex_unlock(&st_S.mu);
    return 0;
}
