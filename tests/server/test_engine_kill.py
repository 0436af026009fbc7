"""strata serve, engine supervision: SIGKILL the engine worker mid-stream 10 times in a row. Every time the client
gets a clear error, the old worker is reaped (no zombie), a new one starts, and the next request succeeds. Then a
hung worker (SIGSTOP) is caught by the watchdog the same way. At the end no worker process is left."""
import os
import signal
import threading
import time

import openai

from harness import WORDS, Server, check, main, worker_pids


def wait_worker(srv, old_pid, timeout=30):
    t0 = time.time()
    while time.time() - t0 < timeout:
        s = srv.status()
        if s["engine"] == "ready" and s["worker_pid"] not in (0, old_pid):
            return s
        time.sleep(0.05)
    raise AssertionError(f"no new ready worker after {timeout} s: {srv.status()}")


def stream_and_hit(srv, rng, sig, n_before=2):
    """Streams a long answer and sends `sig` to the worker after n_before content chunks; returns the error."""
    pid = srv.status()["worker_pid"]
    cl = srv.client(timeout=60)
    got = []
    stream = cl.chat.completions.create(model="x", max_tokens=400, temperature=0, extra_body={"ignore_eos": True},
                                        stream=True, messages=[{"role": "user",
                                                                "content": f"Write a long story about a "
                                                                           f"{rng.choice(WORDS)}."}])
    try:
        for ch in stream:
            if ch.choices and ch.choices[0].delta.content:
                got.append(ch.choices[0].delta.content)
                if len(got) == n_before:
                    os.kill(pid, sig)
        raise AssertionError(f"the stream ended without an error after {len(got)} chunks")
    except openai.APIError as e:
        return pid, e, len(got)


def run(args, rng):
    with Server(args, "--watchdog", "3", "--keepalive", "1") as srv:
        for i in range(10):
            t0 = time.time()
            pid, err, n = stream_and_hit(srv, rng, signal.SIGKILL)
            msg = str(err)
            check("engine" in msg and "restart" in msg, f"round {i}: unclear error: {msg}")
            # the old worker is gone for good (reaped: not even a zombie) before the successor serves
            r = srv.client().chat.completions.create(model="x", max_tokens=4, temperature=0,
                                                    messages=[{"role": "user", "content": "Hi"}])
            check(r.usage.completion_tokens >= 1, r)
            check(not os.path.exists(f"/proc/{pid}"), f"round {i}: old worker {pid} still exists (zombie?)")
            s = srv.status()
            check(s["engine_restarts"] == i + 1 and s["worker_pid"] != pid, s)
            check(len(worker_pids(srv.port)) == 1, worker_pids(srv.port))
            print(f"round {i}: error after {n} chunks ({msg[:60]}...), recovered in {time.time() - t0:.2f} s")

        # a hung worker: SIGSTOP; the watchdog (3 s) kills and replaces it
        t0 = time.time()
        pid, err, n = stream_and_hit(srv, rng, signal.SIGSTOP)
        check("watchdog" in str(err), f"hung worker: {err}")
        check(time.time() - t0 < 15, f"watchdog took {time.time() - t0:.1f} s")
        s = wait_worker(srv, pid)
        check(not os.path.exists(f"/proc/{pid}"), f"stopped worker {pid} was not reaped")
        r = srv.client().chat.completions.create(model="x", max_tokens=4, temperature=0,
                                                messages=[{"role": "user", "content": "Hi"}])
        check(r.usage.completion_tokens >= 1, r)
        print(f"watchdog: {str(err)[:100]}... recovered in {time.time() - t0:.2f} s")

        # an idle worker that hangs is found by the ping
        pid = srv.status()["worker_pid"]
        os.kill(pid, signal.SIGSTOP)
        s = wait_worker(srv, pid, timeout=15)
        check("ping" in s["last_engine_exit"], s)
        # /health said 503 at some point and says 200 now
        check(srv.request("GET", "/health")[0] == 200, "health")

        # a request that arrives while the engine restarts waits for it instead of failing
        pid = srv.status()["worker_pid"]
        os.kill(pid, signal.SIGKILL)
        r = srv.client().chat.completions.create(model="x", max_tokens=3, temperature=0,
                                                messages=[{"role": "user", "content": "Hello"}])
        check(r.usage.completion_tokens >= 1, r)
    check(not worker_pids(srv.port), "workers left")


main(run)
