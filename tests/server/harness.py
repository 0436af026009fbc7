"""Shared helpers for the strata serve tests: start a server on a free port, wait for /health, always stop it.

Every test runs `strata serve` on the demo model with one compute thread (CI has two cores), talks to it with the
official `openai` client or raw HTTP, and at the end checks that no engine worker of its server is left running.
"""
import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", required=True, help="binary that runs `serve` (the strata CLI)")
    ap.add_argument("--model", required=True, help="demo model GGUF")
    args = ap.parse_args()
    if not os.path.exists(args.model):
        print(f"SKIP: demo model {args.model} not found (scripts/fetch-demo-model.sh)")
        sys.exit(77)
    return args


def seeded_rng():
    """A fresh seed each run (STRATA_SEED overrides); printed so a failure can be replayed."""
    seed = int(os.environ.get("STRATA_SEED", time.time_ns() % (1 << 31)))
    print(f"seed {seed} (STRATA_SEED={seed} replays this run)")
    return random.Random(seed)


WORDS = ("apple river mountain cloud engine garden silver window planet music "
         "bridge forest ocean candle rocket paper tiger violet winter harbor").split()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_pids(port):
    """Engine workers of the server on `port` (they carry the serve flags, --port included, and --engine-worker)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{d}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"--engine-worker" in argv and b"--port" in argv:
            i = argv.index(b"--port")
            if i + 1 < len(argv) and argv[i + 1] == str(port).encode():
                pids.append((int(d), state))
    return pids


class Server:
    def __init__(self, args, *extra, api_key=None, ctx=2048, env=None, script=None, template=None):
        """script: scripted completions for the worker's test hook (a list, see src/server/server.h); template: a
        chat-template file that replaces the model's (test hook)."""
        self.port = free_port()
        if script is not None or template is not None:
            env = dict(env if env is not None else os.environ)
            if script is not None:
                self.script_path = f"/tmp/strata-serve-test-{self.port}.script.json"
                with open(self.script_path, "w") as f:
                    json.dump(script, f)
                env["STRATA_SERVE_TEST_SCRIPT"] = self.script_path
            if template is not None:
                env["STRATA_SERVE_TEST_TEMPLATE"] = template
        self.api_key = api_key
        cmd = [args.strata, "serve", "-m", args.model, "--port", str(self.port), "-t", "1", "-c", str(ctx), *extra]
        if api_key:
            cmd += ["--api-key", api_key]
        self.log_path = f"/tmp/strata-serve-test-{self.port}.log"
        self.log = open(self.log_path, "w+b")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.base = f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        try:
            self.wait_ready(60)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        if exc[0] is not None:
            self.dump_log()
        else:
            os.unlink(self.log_path)
        return False

    def dump_log(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, "rb") as f:
            sys.stdout.write("---- server log (tail) ----\n" + f.read()[-6000:].decode(errors="replace") + "\n")

    def wait_ready(self, timeout):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                self.dump_log()
                raise RuntimeError(f"server exited with {self.proc.returncode}")
            try:
                st, _, _ = self.request("GET", "/health", timeout=2)
                if st == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"server not healthy after {timeout} s")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # The worker dies with the server (PDEATHSIG + the server kills and reaps it); give the kernel a moment.
        for _ in range(50):
            left = worker_pids(self.port)
            if not left:
                break
            time.sleep(0.05)
        left = worker_pids(self.port)
        for pid, _ in left:
            os.kill(pid, signal.SIGKILL)
        self.log.close()
        if getattr(self, "script_path", None) and os.path.exists(self.script_path):
            os.unlink(self.script_path)
        assert not left, f"engine workers left after the server stopped: {left}"

    def headers(self, key=True):
        h = {"Content-Type": "application/json"}
        if key and self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def request(self, method, path, body=None, headers=None, timeout=60):
        """Raw HTTP: returns (status, headers dict, body bytes)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body).encode()
            c.request(method, path, body=body, headers=headers if headers is not None else self.headers())
            r = c.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            c.close()

    def json(self, method, path, body=None, headers=None, timeout=60):
        st, h, b = self.request(method, path, body, headers, timeout)
        return st, json.loads(b) if b else None

    def status(self):
        st, s = self.json("GET", "/v1/status")
        assert st == 200, s
        return s

    def client(self, **kw):
        import openai
        return openai.OpenAI(base_url=self.base + "/v1", api_key=self.api_key or "none", max_retries=0, **kw)


TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jinja", "templates")
TEST_TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")


def template(name):
    """Path of a chat template for the STRATA_SERVE_TEST_TEMPLATE hook."""
    for d in (TEMPLATES, TEST_TEMPLATES):
        p = os.path.join(d, name)
        if os.path.exists(p):
            return p
    raise FileNotFoundError(name)


def anthropic_client(srv, **kw):
    import anthropic
    return anthropic.Anthropic(base_url=srv.base, api_key=srv.api_key or "none", max_retries=0, **kw)


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def main(fn):
    """Runs fn(args, rng); prints the seed again on failure."""
    args = parse_args()
    rng = seeded_rng()
    t0 = time.time()
    try:
        fn(args, rng)
    except BaseException:
        print(f"FAILED (seed printed above) after {time.time() - t0:.1f} s")
        raise
    print(f"OK in {time.time() - t0:.1f} s")
