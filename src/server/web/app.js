// strata serve web page: Chat (streams /v1/chat/completions) and Monitor (polls /v1/status). Plain JS, no
// frameworks, no requests to anything but this server.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { history: [], busy: false, abort: null };
// For tests (headless browser): how many stream chunks arrived and whether the last reply finished.
window.__strata = { chunks: 0, done: false, error: null };

// ---- settings, kept in this browser ---------------------------------------------------------------------------------
const SETTINGS = ["temperature", "max-tokens", "system", "api-key", "thinking"];
function loadSettings() {
  for (const id of SETTINGS) {
    const v = localStorage.getItem("strata." + id);
    if (v === null) continue;
    if ($(id).type === "checkbox") $(id).checked = v === "1"; else $(id).value = v;
  }
  $("temp-out").textContent = $("temperature").value;
}
function saveSettings() {
  for (const id of SETTINGS)
    localStorage.setItem("strata." + id, $(id).type === "checkbox" ? ($(id).checked ? "1" : "0") : $(id).value);
  $("temp-out").textContent = $("temperature").value;
}
function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

// ---- tabs -----------------------------------------------------------------------------------------------------------
for (const tab of document.querySelectorAll(".tab")) {
  tab.addEventListener("click", () => {
    for (const t of document.querySelectorAll(".tab")) t.classList.toggle("active", t === tab);
    for (const p of document.querySelectorAll(".panel")) p.classList.toggle("active", p.id === tab.dataset.panel);
    if (tab.dataset.panel === "monitor") pollStatus();
  });
}

// ---- chat -----------------------------------------------------------------------------------------------------------
function bubble(role, text) {
  const hint = $("empty-hint");
  if (hint) hint.remove();
  const div = document.createElement("div");
  div.className = "msg " + role;
  if (text !== undefined) div.textContent = text;
  $("messages").appendChild(div);
  div.scrollIntoView({ block: "end" });
  return div;
}

function setBusy(b) {
  state.busy = b;
  $("send").disabled = b;
  $("stop").disabled = !b;
}

// Reads an SSE response body, calling onData(obj) for every "data:" JSON line until [DONE].
async function readSSE(resp, onData) {
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      for (const line of ev.split("\n")) {
        if (!line.startsWith("data: ")) continue;  // ": keep-alive" comments and the like
        const data = line.slice(6);
        if (data === "[DONE]") return;
        onData(JSON.parse(data));
      }
    }
  }
}

async function send() {
  const text = $("input").value.trim();
  if (!text || state.busy) return;
  $("input").value = "";
  saveSettings();
  state.history.push({ role: "user", content: text });
  bubble("user", text);
  const out = bubble("assistant");
  const thinking = document.createElement("details");
  thinking.className = "thinking";
  thinking.hidden = true;
  const summary = document.createElement("summary");
  summary.textContent = "Thinking…";
  const thinkBody = document.createElement("div");
  thinking.append(summary, thinkBody);
  const content = document.createElement("span");
  content.className = "cursor";
  const calls = document.createElement("div");
  calls.className = "calls";
  const stats = document.createElement("span");
  stats.className = "stats";
  out.append(thinking, content, calls, stats);

  const messages = [];
  const sys = $("system").value.trim();
  if (sys) messages.push({ role: "system", content: sys });
  messages.push(...state.history);
  const body = {
    messages, stream: true, stream_options: { include_usage: true },
    temperature: parseFloat($("temperature").value), max_tokens: parseInt($("max-tokens").value, 10) || 512,
    chat_template_kwargs: { enable_thinking: $("thinking").checked },
  };
  window.__strata = { chunks: 0, done: false, error: null };
  setBusy(true);
  state.abort = new AbortController();
  const t0 = performance.now();
  let answer = "", reasoning = "", toolCalls = [], usage = null, timings = null, finish = null;
  try {
    const resp = await fetch("v1/chat/completions", { method: "POST", headers: headers(), body: JSON.stringify(body),
                                                      signal: state.abort.signal });
    if (!resp.ok) {
      let msg = resp.status + " " + resp.statusText;
      try { msg = (await resp.json()).error.message; } catch (e) { /* not JSON */ }
      throw new Error(msg);
    }
    await readSSE(resp, (obj) => {
      if (obj.error) throw new Error(obj.error.message);
      if (obj.usage) usage = obj.usage;
      if (obj.timings) timings = obj.timings;
      const ch = obj.choices && obj.choices[0];
      if (!ch) return;
      window.__strata.chunks++;
      const d = ch.delta || {};
      if (d.reasoning_content) {
        reasoning += d.reasoning_content;
        thinking.hidden = false;
        thinkBody.textContent = reasoning;
      }
      if (d.content) {
        answer += d.content;
        content.textContent = answer;
        if (reasoning) summary.textContent = "Thought (" + reasoning.length + " characters)";
      }
      for (const tc of d.tool_calls || []) {
        if (!toolCalls[tc.index]) toolCalls[tc.index] = { name: tc.function.name, args: "" };
        toolCalls[tc.index].args += tc.function.arguments || "";
        calls.textContent = toolCalls.map((c) => "→ " + c.name + "(" + c.args + ")").join("\n");
      }
      if (ch.finish_reason) finish = ch.finish_reason;
      out.scrollIntoView({ block: "end" });
    });
    if (reasoning) summary.textContent = "Thought (" + reasoning.length + " characters)";
    state.history.push({ role: "assistant", content: answer });
    const secs = (performance.now() - t0) / 1000;
    let s = finish ? "finish: " + finish : "";
    if (usage) {
      s += " · " + usage.prompt_tokens + " prompt tokens (" + usage.prompt_tokens_details.cached_tokens +
           " cached) · " + usage.completion_tokens + " generated";
    }
    if (timings && timings.predicted_per_second) s += " · " + timings.predicted_per_second.toFixed(1) + " tok/s";
    s += " · " + secs.toFixed(1) + " s";
    stats.textContent = s;
    $("last-stats").textContent = s;
  } catch (e) {
    if (e.name === "AbortError") {
      stats.textContent = "stopped";
      if (answer) state.history.push({ role: "assistant", content: answer });
    } else {
      out.classList.add("error");
      content.textContent = answer + (answer ? "\n" : "") + "Error: " + e.message;
      window.__strata.error = e.message;
      state.history.pop();  // the failed turn is not part of the conversation
    }
  } finally {
    content.classList.remove("cursor");
    window.__strata.done = true;
    setBusy(false);
  }
}

$("composer").addEventListener("submit", (e) => { e.preventDefault(); send(); });
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); send(); }
});
$("stop").addEventListener("click", () => state.abort && state.abort.abort());
$("clear").addEventListener("click", () => {
  state.history = [];
  $("messages").innerHTML = "";
  $("input").focus();
});
for (const id of SETTINGS) $(id).addEventListener("change", saveSettings);
$("temperature").addEventListener("input", () => { $("temp-out").textContent = $("temperature").value; });

// ---- monitor --------------------------------------------------------------------------------------------------------
function pct(x) { return (100 * x).toFixed(x < 0.1 ? 1 : 0) + "%"; }
function mb(x) { return x >= 1024 ? (x / 1024).toFixed(1) + " GiB" : Math.round(x) + " MiB"; }
function setBar(id, frac) { $(id).style.width = Math.max(0, Math.min(1, frac || 0)) * 100 + "%"; }

async function pollStatus() {
  let s;
  try {
    const r = await fetch("v1/status", { headers: headers() });
    if (!r.ok) throw new Error(r.status === 401 ? "API key needed" : "HTTP " + r.status);
    s = await r.json();
  } catch (e) {
    $("engine-badge").textContent = "offline: " + e.message;
    $("engine-badge").className = "badge down";
    return;
  }
  const badge = $("engine-badge");
  badge.textContent = s.engine + (s.busy ? " · busy" : "");
  badge.className = "badge " + (s.engine === "ready" ? "ready" : s.engine === "loading" ? "loading" : "down");
  $("model-name").textContent = s.model;
  $("m-engine").textContent = s.engine;
  $("m-engine-detail").textContent = [s.arch, s.placement, s.threads ? s.threads + " threads" : "",
                                      "up " + Math.round(s.uptime_s) + " s"].filter(Boolean).join(" · ");
  $("m-decode").textContent = s.speed.last_decode_tokens_per_s.toFixed(1);
  $("m-prefill").textContent = s.speed.last_prefill_tokens_per_s.toFixed(1);
  const pf = s.prefill;
  setBar("m-prefill-bar", pf.active ? pf.done / pf.total : 0);
  $("m-prefill-detail").textContent = pf.active ? pf.done + " / " + pf.total + " prompt tokens" :
                                      (s.busy ? "generating" : "idle");
  const ctx = s.context || {};
  $("m-kv").textContent = ctx.kv_used || 0;
  $("m-ctx").textContent = ctx.n_ctx || "–";
  setBar("m-kv-bar", ctx.n_ctx ? ctx.kv_used / ctx.n_ctx : 0);
  const pc = s.prefix_cache;
  $("m-cache-rate").textContent = pc.lookups ? pct(pc.hits / pc.lookups) : "–";
  $("m-cache-detail").textContent = pc.hits + " of " + pc.lookups + " requests · " + pc.cached_tokens_total +
                                    " tokens reused";
  if (s.expert_cache) {
    $("card-expert").hidden = false;
    const ec = s.expert_cache;
    $("m-expert-rate").textContent = ec.lookups ? pct(ec.hits / ec.lookups) : "–";
    $("m-expert-detail").textContent = ec.hits + " hits of " + ec.lookups;
  }
  const sys = s.system || {};
  if (sys.cpu_percent !== undefined) {
    $("m-cpu").textContent = sys.cpu_percent.toFixed(0) + "%";
    setBar("m-cpu-bar", sys.cpu_percent / 100);
    $("m-cpu-detail").textContent = sys.cpus + " CPUs · engine " + (sys.worker_cpu_percent || 0).toFixed(0) + "% of one";
  }
  if (sys.mem_total_mb) {
    $("m-ram").textContent = mb(sys.mem_used_mb);
    setBar("m-ram-bar", sys.mem_used_mb / sys.mem_total_mb);
    $("m-ram-detail").textContent = "of " + mb(sys.mem_total_mb) + " · engine " + mb(sys.worker_rss_mb || 0) +
                                    " · server " + mb(sys.server_rss_mb || 0);
  }
  if (s.gpu) {
    $("card-gpu").hidden = false;
    $("m-gpu").textContent = s.gpu.name || "GPU";
    $("m-gpu-detail").textContent = s.gpu.mem_used_mb !== undefined ? mb(s.gpu.mem_used_mb) + " used" : "";
  }
  const rq = s.requests;
  $("m-requests").textContent = rq.total;
  $("m-requests-detail").textContent = rq.prompt_tokens + " prompt · " + rq.generated_tokens + " generated · queue " +
                                       s.queue_depth + " · errors " + rq.engine_errors;
  $("m-restarts").textContent = s.engine_restarts;
  $("m-last-exit").textContent = s.last_engine_exit || "";
  $("m-updated").textContent = "updated " + new Date().toLocaleTimeString();
}

loadSettings();
pollStatus();
setInterval(pollStatus, 1000);
$("input").focus();
