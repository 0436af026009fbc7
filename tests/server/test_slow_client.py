"""strata serve, slow and vanishing clients: a client that trickles its request is cut off after --timeout while
others are served; a client that reads its stream slowly still gets all of it; a client that disconnects mid-stream
cancels its generation at once; SSE keep-alive comments flow while a request waits."""
import socket
import time

from harness import WORDS, Server, check, main


def open_stream(port, body):
    """A raw HTTP streaming request on its own socket (so the test decides when the client goes away)."""
    s = socket.create_connection(("127.0.0.1", port))
    body = body.encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    return s


def run(args, rng):
    word = rng.choice(WORDS)
    with Server(args, "--timeout", "3", "--keepalive", "0.5") as srv:
        cl = srv.client(timeout=60)
        msgs = [{"role": "user", "content": f"Write a long story about a {word}."}]

        # 1. slowloris: a body trickled one byte a second is cut off after the 3 s limit; others are served
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n{")
        t0 = time.time()
        closed = False
        r = cl.chat.completions.create(model="x", messages=msgs, max_tokens=3)  # served meanwhile
        check(r.usage.completion_tokens >= 1, r)
        while time.time() - t0 < 12:
            try:
                s.sendall(b" ")
                s.settimeout(1)
                if s.recv(1024) == b"":
                    closed = True
                    break
            except socket.timeout:
                continue
            except OSError:
                closed = True
                break
        s.close()
        check(closed and time.time() - t0 < 10, f"trickling client not cut off ({time.time() - t0:.1f} s)")
        print(f"slow body cut off after {time.time() - t0:.1f} s")

        # 2. an idle connection that sends nothing is closed by the idle timeout
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.settimeout(10)
        t0 = time.time()
        check(s.recv(1) == b"" and time.time() - t0 < 8, "idle connection not closed")
        s.close()

        # 3. a slow reader still gets the whole stream
        parts = []
        for ch in cl.chat.completions.create(model="x", messages=msgs, max_tokens=12, temperature=0, stream=True):
            if ch.choices and ch.choices[0].delta.content:
                parts.append(ch.choices[0].delta.content)
            time.sleep(0.15)
        full = cl.chat.completions.create(model="x", messages=msgs, max_tokens=12, temperature=0)
        check("".join(parts) == full.choices[0].message.content, ("".join(parts), full.choices[0].message.content))

        # 4. a client that vanishes mid-stream cancels its generation
        before = srv.status()["requests"]["generated_tokens"]
        s = socket.create_connection(("127.0.0.1", srv.port))
        body = ('{"messages":[{"role":"user","content":"Write a long story."}],"max_tokens":1500,'
                '"ignore_eos":true,"stream":true}').encode()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        got = b""
        while got.count(b"data:") < 5:
            got += s.recv(4096)
        s.close()
        t0 = time.time()
        while srv.status()["busy"] and time.time() - t0 < 5:
            time.sleep(0.05)
        st = srv.status()
        check(not st["busy"], f"generation still running {time.time() - t0:.1f} s after the client left")
        gen = st["requests"]["generated_tokens"] - before
        check(gen < 200, f"{gen} tokens generated for a client that left after 5 chunks")
        print(f"disconnect cancelled the generation after {gen} tokens")

        # 5. keep-alive comments while a stream waits in the queue. The queue is held deterministically: a blocker
        # stream that would run for 1500 tokens occupies the engine until this test closes it, so the waiting stream
        # must see keep-alive comments (and no data) however slow the machine is; then the blocker's disconnect lets
        # it run to [DONE].
        blocker = open_stream(srv.port, '{"messages":[{"role":"user","content":"Write a long story."}],'
                                        '"max_tokens":1500,"ignore_eos":true,"stream":true}')
        got = b""
        blocker.settimeout(60)
        while got.count(b"data:") < 2:
            got += blocker.recv(4096)
        check(srv.status()["busy"], "the blocker should be generating")
        waiter = open_stream(srv.port, '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2,"stream":true}')
        waiter.settimeout(60)
        got = b""
        while b": keep-alive" not in got:
            chunk = waiter.recv(4096)
            check(chunk, f"stream closed before a keep-alive: {got[:400]!r}")
            got += chunk
        head = got[:got.index(b": keep-alive")]
        check(b"data:" not in head, f"the waiting stream got data before its keep-alive: {head[:400]!r}")
        check(srv.status()["queue_depth"] == 1, "the stream should still wait in the queue")
        blocker.close()  # cancels the blocker; the waiting request runs now
        while b"[DONE]" not in got:
            chunk = waiter.recv(4096)
            if not chunk:
                break
            got += chunk
        waiter.close()
        check(b"[DONE]" in got and b'"finish_reason"' in got, got[-400:])
        print(f"keep-alive comments while queued: {got.count(b': keep-alive')}")
        check(srv.request("GET", "/health")[0] == 200, "health")


main(run)
