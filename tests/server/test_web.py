"""strata serve, the web page in headless Chromium (Debian package `chromium`): GET / serves the embedded page and its
files; the test loads the page, types a message, sends it, watches the reply's text grow while it streams from the
demo model, checks the Monitor tab's numbers (polled from /v1/status), and saves screenshots of both tabs next to the
test's working directory in the build tree (web-chat.png, web-monitor.png). Skipped when chromium is not installed.

Chromium is driven over the DevTools protocol with a minimal WebSocket client (standard library only)."""
import base64
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time

from harness import WORDS, Server, check, main


class DevTools:
    """A minimal WebSocket client (RFC 6455, text frames) speaking the Chrome DevTools protocol to one page."""

    def __init__(self, port, path):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                       f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.s.recv(1)
        check(b" 101 " in head.split(b"\r\n")[0], head)
        self.next_id = 0

    def _send(self, text):
        data = text.encode()
        mask = os.urandom(4)
        n = len(data)
        hdr = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n)
                               if n < 65536 else bytes([0x80 | 127]) + struct.pack(">Q", n))
        self.s.sendall(hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _recv_exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.s.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("devtools closed")
            buf += chunk
        return buf

    def _recv(self):
        msg = b""
        while True:
            b0, b1 = self._recv_exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._recv_exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._recv_exact(8))[0]
            payload = self._recv_exact(n)
            if b0 & 0x0F == 0x8:
                raise ConnectionError("devtools closed")
            msg += payload
            if b0 & 0x80:
                return json.loads(msg)

    def call(self, method, **params):
        self.next_id += 1
        self._send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            m = self._recv()
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]

    def js(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait(self, expr, timeout, what):
        t0 = time.time()
        while time.time() - t0 < timeout:
            v = self.js(expr)
            if v:
                return v
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}")

    def screenshot(self, path):
        png = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        with open(path, "wb") as f:
            f.write(png)
        check(png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10000, f"screenshot {path} looks empty")
        print(f"screenshot: {path} ({len(png)} bytes)")


def start_chromium(binary, profile):
    proc = subprocess.Popen([binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                             "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                             "--disable-background-networking", "--disable-component-update", "--mute-audio",
                             f"--user-data-dir={profile}", "--remote-debugging-port=0", "--window-size=1280,860",
                             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # its own process group: the teardown stops every helper
    port_file = os.path.join(profile, "DevToolsActivePort")
    t0 = time.time()
    while not os.path.exists(port_file) or len(open(port_file).read().split("\n")) < 2:
        if proc.poll() is not None or time.time() - t0 > 60:
            proc.kill()
            raise RuntimeError("chromium did not start its DevTools endpoint")
        time.sleep(0.1)
    port = int(open(port_file).read().split("\n")[0])
    # The page target (about:blank) from the HTTP list.
    import http.client
    for _ in range(50):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/json/list")
        pages = [t for t in json.loads(c.getresponse().read()) if t["type"] == "page"]
        c.close()
        if pages:
            return proc, port, pages[0]["webSocketDebuggerUrl"].split(str(port), 1)[1]
        time.sleep(0.1)
    raise RuntimeError("chromium has no page target")


def run(args, rng):
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if not binary:
        print("SKIP: chromium is not installed (apt-get install chromium)")
        raise SystemExit(77)
    word = rng.choice(WORDS)
    out_dir = os.getcwd()
    with Server(args) as srv:
        # the page and its files are served, with the right types, without a key
        for path, mime in (("/", "text/html"), ("/app.js", "text/javascript"), ("/style.css", "text/css")):
            code, h, body = srv.request("GET", path, headers={})
            check(code == 200 and h["Content-Type"].startswith(mime) and len(body) > 500, (path, code, h))
            check("connect-src 'self'" in h.get("Content-Security-Policy", ""), h)
        check(srv.request("GET", "/nope.js", headers={})[0] == 404, "unknown file")
        # no fetches outside this server (no http(s):// URLs in the page's code)
        for path in ("/", "/app.js", "/style.css"):
            body = srv.request("GET", path, headers={})[2].decode()
            check("http://" not in body and "https://" not in body, f"{path} refers to another host")

        # (ignore_cleanup_errors: a helper process that outlives the group kill may still touch the profile)
        with tempfile.TemporaryDirectory(prefix="strata-chromium-", ignore_cleanup_errors=True) as profile:
            proc, port, ws_path = start_chromium(binary, profile)
            try:
                dt = DevTools(port, ws_path)
                dt.call("Page.enable")
                dt.call("Runtime.enable")
                dt.call("Page.navigate", url=srv.base + "/")
                dt.wait("document.readyState === 'complete' && !!document.getElementById('send')", 30, "the page")
                dt.wait("document.getElementById('engine-badge').textContent.startsWith('ready')", 10,
                        "the engine badge to say ready")
                # settings: greedy, a short answer, a system prompt
                dt.js("document.getElementById('temperature').value = '0'; "
                      "document.getElementById('max-tokens').value = '40'; "
                      f"document.getElementById('system').value = 'You are a poet who loves the word {word}.'; true")
                dt.js(f"document.getElementById('input').value = 'Write two lines about a {word}.'; "
                      "document.getElementById('send').click(); true")
                # streamed text appears: its length is seen growing at least twice before the reply is done
                lengths = []
                t0 = time.time()
                while time.time() - t0 < 90:
                    st = dt.js("(() => { const m = document.querySelectorAll('.msg.assistant'); "
                               "const last = m[m.length - 1]; return {n: last ? last.querySelector('span').textContent"
                               ".length : 0, done: window.__strata.done, chunks: window.__strata.chunks, "
                               "error: window.__strata.error}; })()")
                    if not lengths or st["n"] != lengths[-1]:
                        lengths.append(st["n"])
                    if st["done"]:
                        break
                    time.sleep(0.05)
                check(not st["error"], f"the page shows an error: {st['error']}")
                check(st["done"], "the reply did not finish")
                growth = [n for n in lengths if n > 0]
                print(f"streamed: {st['chunks']} chunks, text lengths seen {lengths}")
                check(st["chunks"] >= 5 and len(growth) >= 3, f"text did not stream in ({lengths})")
                text = dt.js("document.querySelectorAll('.msg.assistant span')[0].textContent")
                stats = dt.js("document.querySelector('.msg.assistant .stats').textContent")
                check(len(text) > 10 and "generated" in stats and "tok/s" in stats, (text, stats))
                # the same request through the API gives the same greedy text
                r = srv.client().chat.completions.create(model="x", max_tokens=40, temperature=0, messages=[
                    {"role": "system", "content": f"You are a poet who loves the word {word}."},
                    {"role": "user", "content": f"Write two lines about a {word}."}])
                check(r.choices[0].message.content == text, (r.choices[0].message.content, text))
                dt.screenshot(os.path.join(out_dir, "web-chat.png"))

                # Monitor: the numbers come from /v1/status
                dt.js("document.getElementById('tab-monitor').click(); true")
                dt.wait("document.getElementById('m-decode').textContent !== '0.0' && "
                        "document.getElementById('m-cpu').textContent !== '–'", 10, "the monitor numbers")
                mon = dt.js("({engine: document.getElementById('m-engine').textContent, "
                            "decode: parseFloat(document.getElementById('m-decode').textContent), "
                            "ctx: document.getElementById('m-ctx').textContent, "
                            "cache: document.getElementById('m-cache-rate').textContent, "
                            "restarts: document.getElementById('m-restarts').textContent, "
                            "ram: document.getElementById('m-ram').textContent})")
                print("monitor:", mon)
                check(mon["engine"] == "ready" and mon["decode"] > 0 and mon["ctx"] == "2048" and
                      mon["restarts"] == "0" and mon["ram"] not in ("", "–"), mon)
                dt.screenshot(os.path.join(out_dir, "web-monitor.png"))
            finally:
                # The renderer, GPU and crash-handler children write into the profile until they exit: stop the
                # whole process group, not only the browser process.
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()


main(run)
