// One memory, live: the thread's feed (SSE) drives everything on the page.
//
// The feed's events update what they carry themselves (token windows, cycles, failures,
// generations, the title, the timeline); the context window (observations, unobserved messages,
// hints, extracted values) is the read side's own answer, fetched again after each event that
// can change it, so the page never re-implements the fold.  What the memory is doing now (the
// cycles in flight, their elapsed time, the Buffered card) is `/dashboard/activity`'s answer,
// the one the thread list shows too (projections/views/activity.py), fetched again after each event.
// With the timeline's cursor on a past event, the same panels show `context?asOf=SEQ` and only
// what happened up to that seq.
"use strict";

(() => {
  const { el, fill, exact, plural, compression, seconds, when } = om;
  const threadId = decodeURIComponent(location.pathname.split("/")[2] || "");
  const base = `/threads/${encodeURIComponent(threadId)}`;
  const $ = (id) => document.getElementById(id);

  const S = {
    lastSeq: 0,        // newest seq received: the resume point
    windows: null,     // the last status's token windows
    windowsAt: [],     // [seq, windows] of every status, for the windows as of a past seq
    cycles: new Map(), // cycleId -> { kind, op, state, startSeq, endSeq, input, output, ... }
    activations: [],   // { seq, op, input, output, chunks, messages, trigger, at }
    failures: [],      // { seq, what, error, tokens, at }
    generations: [],   // { seq, generation, input, output, at } per reflection
    title: null,
    context: null,     // the live context answer
    activity: null,    // the live /dashboard/activity answer for this thread
    deleted: false,
  };
  let asOf = null; // the `context?asOf=` answer while the cursor is pinned

  const line = timeline.create({ onSelect: pinTo });
  $("crumb-thread").textContent = threadId;
  $("home").href = $("crumb-threads").href = om.withToken("/");
  $("go-live").addEventListener("click", () => line.select(line.last()));

  // --- the feed -------------------------------------------------------------------------
  function connect() {
    // A new EventSource starts from `after`; the browser's own reconnects send Last-Event-ID
    // on the same URL, so the feed resumes where it stopped either way, without duplicates.
    const source = new EventSource(om.withToken(`${base}/events`, { after: S.lastSeq || undefined }));
    setConn("connecting");
    source.onopen = () => setConn("live");
    source.onmessage = (message) => {
      if (message.data === "[DONE]") return;
      ingest(Number(message.lastEventId), JSON.parse(message.data));
    };
    source.onerror = async () => {
      if (source.readyState !== EventSource.CLOSED) return setConn("retrying"); // the browser retries
      // Closed for good: the answer was not a stream (401/403/404). Ask a JSON route why.
      try {
        await om.getJson(`${base}/context`, { wait: 0 });
        setConn("retrying");
      } catch (error) {
        if (error.status === 401 || error.status === 403) return setConn("denied", error.message);
        setConn("retrying");
      }
      setTimeout(connect, 2000);
    };
  }

  function setConn(state, detail) {
    const node = $("conn");
    node.className = `conn ${state}`;
    node.textContent = { live: "live", connecting: "connecting…", retrying: "reconnecting…", denied: "access denied" }[state] || state;
    node.title = detail || "";
  }

  function ingest(seq, part) {
    // The server sends each seq once per connection; this guards a resume that overlaps.
    if (!(seq > S.lastSeq)) return;
    S.lastSeq = seq;
    const d = part.data;
    switch (part.type) {
      case "data-om-status":
        S.windows = d.windows;
        S.windowsAt.push([seq, d.windows]);
        break;
      case "data-om-observation-start":
      case "data-om-buffering-start":
        S.cycles.set(part.id, {
          id: part.id, kind: part.type.includes("buffering") ? "buffering" : "sync", op: d.operationType,
          state: "running", startSeq: seq, at: d.startedAt,
          input: d.tokensToObserve ?? d.tokensToBuffer,
        });
        break;
      case "data-om-observation-end":
      case "data-om-buffering-end": {
        const cycle = cycleOf(part, seq);
        Object.assign(cycle, {
          state: "done", endSeq: seq, at: d.completedAt, durationMs: d.durationMs,
          input: d.tokensObserved ?? d.tokensBuffered, output: d.observationTokens, buffered: d.bufferedTokens,
        });
        if (part.type === "data-om-observation-end" && d.operationType === "reflection") {
          S.generations.push({ seq, generation: d.generation, input: d.tokensObserved, output: d.observationTokens, at: d.completedAt });
        }
        break;
      }
      case "data-om-observation-failed":
      case "data-om-buffering-failed": {
        const cycle = cycleOf(part, seq);
        Object.assign(cycle, { state: "failed", endSeq: seq, at: d.failedAt, durationMs: d.durationMs });
        S.failures.push({ seq, what: `${label(cycle)} failed`, error: d.error, tokens: d.tokensAttempted, at: d.failedAt });
        break;
      }
      case "data-om-activation":
        S.activations.push({
          seq, op: d.operationType, input: d.tokensActivated, output: d.observationTokens, chunks: d.chunksActivated,
          messages: d.messagesActivated, trigger: d.triggeredBy, at: d.activatedAt,
        });
        if (d.operationType === "reflection") {
          S.generations.push({ seq, generation: d.generationCount, input: d.tokensActivated, output: d.observationTokens, at: d.activatedAt });
        }
        break;
      case "data-om-thread-update":
        S.title = d.newTitle;
        break;
      case "data-om-result-ignored":
        S.failures.push({ seq, what: `${d.kind} result ignored`, error: d.reason, ignored: true });
        break;
      case "data-om-memory-deleted":
        S.deleted = true;
        break;
    }
    line.add(seq, part.type, d);
    scheduleRender();
    // Status is every step's bulk and changes no context; the rest may (messages, cycles).
    if (part.type !== "data-om-status") scheduleContext();
    if (part.type !== "data-om-message-accepted") scheduleActivity();
  }

  // A cycle whose start this page never saw (its history began later) still gets an entry.
  function cycleOf(part, seq) {
    if (!S.cycles.has(part.id)) {
      S.cycles.set(part.id, { id: part.id, kind: part.type.includes("buffering") ? "buffering" : "sync",
        op: part.data.operationType, startSeq: seq });
    }
    return S.cycles.get(part.id);
  }

  function label(cycle) {
    if (cycle.kind === "buffering") return cycle.op === "reflection" ? "Buffered reflection" : "Buffered observation";
    return cycle.op === "reflection" ? "Reflection" : "Observation";
  }

  // --- the read side's answers -------------------------------------------------------------
  // One request of each at a time; events arriving meanwhile ask for one more after it.
  function refresher(fetchOnce) {
    let fetching = false;
    let again = false;
    return async () => {
      if (fetching) { again = true; return; }
      fetching = true;
      try {
        do {
          again = false;
          await fetchOnce();
          scheduleRender();
        } while (again);
      } finally {
        fetching = false;
      }
    };
  }

  const scheduleContext = refresher(async () => {
    try {
      S.context = await om.getJson(`${base}/context`, { wait: 0 });
    } catch (error) {
      if (error.status !== 404) console.warn("context", error);
    }
  });

  const scheduleActivity = refresher(async () => {
    try {
      const { threads } = await om.getJson("/dashboard/activity", { threadId });
      S.activity = threads[threadId] || null;
    } catch (error) {
      console.warn("activity", error);
    }
  });

  async function pinTo(seq) {
    if (seq === null) {
      asOf = null;
      scheduleRender();
      return;
    }
    try {
      const answer = await om.getJson(`${base}/context`, { asOf: seq });
      if (line.pinned() === seq) asOf = answer; // a later choice may have replaced this one
    } catch (error) {
      console.warn("asOf", error);
    }
    scheduleRender();
  }

  // --- rendering --------------------------------------------------------------------------
  let frame = null;
  function scheduleRender() {
    if (frame === null) frame = requestAnimationFrame(() => { frame = null; render(); });
  }

  function render() {
    const pinned = line.pinned();
    const at = pinned === null ? Infinity : pinned;
    const context = pinned === null ? S.context : asOf;
    const [statusSeq, known] = statusAt(at);
    const windows = pinned === null ? S.windows : (asOf ? asOf.windows : known);
    const title = (context && context.title) || S.title;
    $("thread-title").textContent = title || "Untitled thread";
    document.title = `omstream · ${title || threadId}`;
    const rows = cycleRows(at);
    const counted = (kind) => rows.filter((r) => (r.kind === "activation") === (kind === "activation")).length;
    // The header counts what the Cycles list lists (one derivation, `cycleRows`), failures apart.
    $("thread-meta").textContent = [
      `thread ${threadId}`, context && context.memoryKey, context && `generation ${context.generation}`,
      plural(counted("cycle"), "cycle"), counted("activation") ? plural(counted("activation"), "activation") : null,
      plural(S.lastSeq, "event"), S.deleted ? "memory deleted" : null,
    ].filter(Boolean).join(" · ");

    const banner = $("asof-banner");
    banner.hidden = pinned === null;
    if (pinned !== null) {
      const event = asOf && asOf.event;
      $("asof-text").textContent = event
        ? `Viewing the memory as it was after event #${event.seq} (${event.type.replace(/^data-/, "")}, ${when(event.eventTime)}).`
        : `Viewing the memory as it was at #${pinned}.`;
    }
    renderWindows(windows, statusSeq, pinned === null ? S.activity : null);
    renderActivity(at);
    renderContext(context);
    renderCycles(rows);
    renderFailures(at);
    renderGenerations(at);
  }

  // The last status at or before `seq`: [its seq, its windows].
  function statusAt(seq) {
    let found = [null, null];
    for (const entry of S.windowsAt) if (entry[0] <= seq) found = entry;
    return found;
  }

  function bar(card, window, projected) {
    const tokens = window ? window.tokens : 0;
    const threshold = window ? window.threshold : 0;
    const number = card.querySelector(".tokens");
    number.textContent = exact(tokens);
    number.dataset.tokens = String(tokens);
    card.querySelector(".threshold").textContent = exact(threshold);
    const share = threshold ? Math.min(tokens / threshold, 1) : 0;
    const fillNode = card.querySelector(".fill");
    fillNode.style.width = `${share * 100}%`;
    fillNode.classList.toggle("over", threshold > 0 && tokens >= threshold);
    const projectedNode = card.querySelector(".projected");
    if (projectedNode) projectedNode.style.width = threshold ? `${Math.min((projected || 0) / threshold, 1) * 100}%` : "0%";
  }

  // Live, the Buffered card is /dashboard/activity's: the last status carried forward by the
  // background cycles' ends and activations since, `running` only while one is in flight.
  function renderWindows(windows, statusSeq, activity) {
    const active = windows ? windows.active : null;
    const buffered = activity ? activity.buffered : windows ? windows.buffered : null;
    const obs = buffered ? buffered.observations : {};
    const refl = buffered ? buffered.reflection : {};
    bar($("win-messages"), active && active.messages, obs.projectedMessageRemoval);
    bar($("win-observations"), active && active.observations, 0);
    $("win-messages-sub").textContent = obs.projectedMessageRemoval
      ? `the next activation removes ${plural(obs.projectedMessageRemoval, "token")} (hatched)`
      : "unobserved messages against the observation threshold";
    const pill = (status) => el("span", { class: `pill ${status || "idle"}`, text: status || "idle" });
    fill($("buffered-kv"),
      el("dt", { text: "observation chunks" }), el("dd", {}, el("span", { id: "buffered-status" }, pill(obs.status)), " ",
        el("span", { id: "buffered-chunks", "data-chunks": obs.chunks ?? 0, text: exact(obs.chunks) })),
      el("dt", { text: "messages covered" }), el("dd", { text: plural(obs.messageTokens, "token") }),
      el("dt", { text: "projected removal" }), el("dd", { text: obs.projectedMessageRemoval === null ? "at the next step"
        : plural(obs.projectedMessageRemoval, "token") }),
      el("dt", { text: "buffered observations" }), el("dd", { text: plural(obs.observationTokens, "token") }),
      el("dt", { text: "reflection" }), el("dd", {}, pill(refl.status), " ",
        refl.status && refl.status !== "idle" ? compression(refl.inputObservationTokens || 0, refl.observationTokens || 0) : ""));
    $("buffered-sub").textContent = activity
      ? (activity.statusSeq === null ? "no step reported yet" : `the status of #${activity.statusSeq} and the cycles since, as of #${activity.seq}`)
      : statusSeq === null ? "no step reported yet" : `as of the step's status, #${statusSeq}`;
  }

  // Cycles in flight. Live: /dashboard/activity's, each timed from its start event's append
  // time (when the worker wrote it: event times are the inputs' own clock, a recorded
  // conversation's in the demo, and a page opened late must not count from its own load).
  // At a past seq: the cycles the feed had started and not ended by then, untimed.
  const LABELS = { "buffering-observation": "buffering observations", "buffering-reflection": "buffering a reflection",
    "sync-observation": "observing", "sync-reflection": "reflecting" };
  function renderActivity(at) {
    const live = at === Infinity;
    const cycles = live
      ? (S.activity ? S.activity.running : []).map((c) => ({ kind: c.kind === "buffering" ? "buffering" : "sync", op: c.operationType,
        label: c.label, since: c.startedMs }))
      : [...S.cycles.values()].filter((c) => c.startSeq <= at && !(c.endSeq <= at))
        .map((c) => ({ kind: c.kind, op: c.op, label: LABELS[`${c.kind}-${c.op}`] }));
    const badges = cycles.map((c) => {
      const cls = c.kind === "buffering" ? "buffering" : c.op === "reflection" ? "reflecting" : "";
      const elapsed = live && c.since ? ` ${seconds(Math.max(Date.now() - c.since, 0))}` : "";
      return el("span", { class: `badge running ${cls}`, "data-kind": c.kind, "data-label": c.label, text: `${c.label}${elapsed}` });
    });
    // Inputs the memory holds behind a cycle (om-input-held): the agent's next window waits for it.
    const held = live && S.activity ? S.activity.held : null;
    if (held) {
      const label = S.activity.labels[S.activity.labels.length - 1];
      badges.push(el("span", { class: "badge blocked", "data-kind": "held", "data-label": label,
        title: `waiting for cycle ${held.cycleId || "?"}`,
        text: `${label} ${seconds(Math.max(Date.now() - held.sinceMs, 0))}` }));
    }
    if (!badges.length) badges.push(el("span", { class: "badge idle", "data-label": "idle", text: "idle" }));
    fill($("activity"), badges);
  }
  // The elapsed times tick while something runs.
  setInterval(() => { if (line.pinned() === null && S.activity && (S.activity.running.length || S.activity.held)) renderActivity(Infinity); }, 200);

  function callout(id, text) {
    const node = $(id);
    node.hidden = !text;
    node.querySelector("span").textContent = text || "";
  }

  function renderContext(context) {
    callout("current-task", context && context.currentTask);
    callout("suggested-response", context && context.suggestedResponse);
    callout("other-conversations", context && context.otherConversations);  // resource scope
    observations.render($("observations"), context ? context.observations : "");
    const messages = context ? context.messages : [];
    $("raw-count").textContent = `(${messages.length})`;
    fill($("messages"), messages.length ? messages.map(messageItem) : el("li", { class: "empty", text: "None: every message is observed." }));
    const extracted = Object.entries((context && context.extractedValues) || {}).filter(([slug]) => slug !== "working-memory");
    fill($("extracted"), extracted.length
      ? extracted.flatMap(([slug, value]) => [el("dt", { text: slug }), el("dd", {}, valueNode(value))])
      : el("p", { class: "empty", text: "No extracted values." }));
    const memory = context && context.workingMemory;
    fill($("working-memory"), memory === null || memory === undefined ? el("p", { class: "empty", text: "No working memory." }) : valueNode(memory));
  }

  function valueNode(value) {
    return el("pre", { class: "block", text: typeof value === "string" ? value : JSON.stringify(value, null, 2) });
  }

  function messageItem(m) {
    const content = typeof m.content === "string" ? m.content : (m.content || []).map((p) =>
      p.text !== undefined ? p.text : `[${p.type}${p.toolName ? ` ${p.toolName}` : ""}]`).join("\n");
    return el("li", { "data-id": m.id },
      el("div", { class: "head" }, el("span", { class: `role ${m.role}`, text: m.role }), el("span", { text: when(m.createdAt) }),
        el("span", { class: "tok", text: m.tokens ? plural(m.tokens.count, "token") : "" })),
      el("div", { class: "body", text: content }));
  }

  // The Cycles list's rows at `at`, newest first: the cycles (not failed: those are failures)
  // and the activations. The header counts these same rows.
  function cycleRows(at) {
    const rows = [];
    for (const c of S.cycles.values()) {
      if (c.startSeq > at) continue;
      const done = c.endSeq <= at ? c.state : "running";
      if (done === "failed") continue; // listed under failures
      const ratio = done === "done" && c.kind === "sync" ? compression(c.input || 0, c.output || 0)
        : done === "done" ? `${plural(c.input, "token")} buffered` : plural(c.input, "token");
      rows.push({ seq: c.endSeq <= at ? c.endSeq : c.startSeq, kind: c.kind === "buffering" ? "buffering" : c.op, state: done,
        what: label(c), when: c.at, ratio, detail: done === "done" && c.durationMs !== undefined ? `took ${seconds(c.durationMs)}` : "in progress" });
    }
    for (const a of S.activations) {
      if (a.seq > at) continue;
      rows.push({ seq: a.seq, kind: "activation", state: "done", what: a.op === "reflection" ? "Reflection activated" : "Activation",
        when: a.at, ratio: compression(a.input || 0, a.output || 0),
        detail: a.op === "reflection" ? `triggered by ${a.trigger || "threshold"}`
          : `${plural(a.chunks, "chunk")}, ${plural(a.messages, "message")} left the window · ${a.trigger || "threshold"}` });
    }
    rows.sort((a, b) => b.seq - a.seq);
    return rows;
  }

  function renderCycles(rows) {
    fill($("cycles"), rows.length ? rows.slice(0, 40).map((r) => el("li", { "data-kind": r.kind, class: r.state, "data-seq": r.seq },
      el("span", { class: "what", text: r.what }), el("span", { class: "when", text: when(r.when) }),
      el("span", { class: "ratio" }, el("b", { text: r.ratio })), el("span", { class: "when", text: `#${r.seq}` }),
      el("span", { class: "detail", text: r.detail }))) : el("li", { class: "empty", text: "No cycle yet." }));
  }

  function renderFailures(at) {
    const rows = S.failures.filter((f) => f.seq <= at).reverse();
    fill($("failures"), rows.length ? rows.map((f) => el("li", { class: f.ignored ? "" : "failure", "data-seq": f.seq },
      el("span", { class: "what", text: f.what }), el("span", { class: "when", text: f.at ? when(f.at) : `#${f.seq}` }),
      el("span", { class: "detail", text: f.tokens !== undefined ? `${f.error} (${plural(f.tokens, "token")} attempted)` : f.error })))
      : el("li", { class: "empty", text: "No failure." }));
  }

  function renderGenerations(at) {
    const rows = S.generations.filter((g) => g.seq <= at).reverse();
    fill($("generations"), rows.length ? rows.map((g) => el("li", { "data-seq": g.seq },
      el("span", { class: "what", text: `Generation ${g.generation - 1} → ${g.generation}` }), el("span", { class: "when", text: when(g.at) }),
      el("span", { class: "ratio" }, el("b", { text: compression(g.input || 0, g.output || 0) })),
      // The previous generation is the memory just before the reflection replaced it.
      el("button", { type: "button", text: `view generation ${g.generation - 1}`, onclick: () => line.select(g.seq - 1) })))
      : el("li", { class: "empty", text: "No reflection yet: this is generation 0." }));
  }

  render();
  scheduleContext();
  scheduleActivity();
  connect();
})();
