// The thread list, live: `/threads` again whenever the namespace's feed says something changed,
// and each thread's state from `/dashboard/activity`, the answer the thread page shows too (so
// the list never says "idle" while the thread's page says "buffering").
"use strict";

(() => {
  const { el, fill, exact } = om;
  const $ = (id) => document.getElementById(id);
  let pending = null;

  async function refresh() {
    try {
      const [{ threads }, activity] = await Promise.all([om.getJson("/threads"), om.getJson("/dashboard/activity")]);
      threads.sort((a, b) => (a.title || a.threadId).localeCompare(b.title || b.threadId));
      $("count").textContent = om.plural(threads.length, "thread");
      $("none").hidden = threads.length > 0;
      fill($("threads"), threads.map((t) => el("tr", { "data-thread": t.threadId },
        el("td", {}, el("a", { href: om.withToken(`/threads/${encodeURIComponent(t.threadId)}`), text: t.title || "Untitled thread" })),
        el("td", { class: "tid", text: t.threadId }),
        el("td", { class: "num", text: exact(t.messages) }),
        el("td", { class: "num", text: exact(t.observed) }),
        el("td", { class: "num", text: exact(t.generation) }),
        el("td", { class: "state" }, state(activity.threads[t.threadId])))));
    } catch (error) {
      setConn(error.status === 401 || error.status === 403 ? "denied" : "retrying", error.message);
    }
  }

  // One badge per cycle in flight, labelled as the thread page labels it; else idle.
  function state(figures) {
    const labels = figures ? figures.labels : [];
    if (!labels.length) return el("span", { class: "badge idle", "data-label": "idle", text: "idle" });
    return labels.map((text) => el("span", { class: text.startsWith("holding") ? "badge blocked"
      : `badge running${text.startsWith("buffering") ? " buffering" : ""}`, "data-label": text, text }));
  }

  // Events come in bursts (a step is several); one refresh per burst is enough.
  function soon() {
    if (pending === null) pending = setTimeout(() => { pending = null; refresh(); }, 250);
  }

  function setConn(state, detail) {
    const node = $("conn");
    node.className = `conn ${state}`;
    node.textContent = { live: "live", polling: "polling", retrying: "reconnecting…", denied: "access denied" }[state] || state;
    node.title = detail || "";
  }

  // The namespace feed needs a token for every resource ('*'). A token bound to some threads
  // is refused it, and the list falls back to asking every few seconds.
  function follow() {
    const source = new EventSource(om.withToken("/events"));
    source.onopen = () => setConn("live");
    source.onmessage = soon;
    source.onerror = () => {
      if (source.readyState !== EventSource.CLOSED) return setConn("retrying");
      setConn("polling");
      setInterval(refresh, 5000);
    };
  }

  $("home").href = om.withToken("/");
  refresh();
  follow();
})();
