// The thread list, live: `/threads` again whenever the namespace's feed says something changed.
"use strict";

(() => {
  const { el, fill, exact } = om;
  const $ = (id) => document.getElementById(id);
  let pending = null;

  async function refresh() {
    try {
      const { threads } = await om.getJson("/threads");
      threads.sort((a, b) => (a.title || a.threadId).localeCompare(b.title || b.threadId));
      $("count").textContent = om.plural(threads.length, "thread");
      $("none").hidden = threads.length > 0;
      fill($("threads"), threads.map((t) => el("tr", { "data-thread": t.threadId },
        el("td", {}, el("a", { href: om.withToken(`/threads/${encodeURIComponent(t.threadId)}`), text: t.title || "Untitled thread" })),
        el("td", { class: "tid", text: t.threadId }),
        el("td", { class: "num", text: exact(t.messages) }),
        el("td", { class: "num", text: exact(t.observed) }),
        el("td", { class: "num", text: exact(t.generation) }),
        el("td", {}, t.blocked ? el("span", { class: "badge running", text: "observing" }) : el("span", { class: "badge idle", text: "idle" })))));
    } catch (error) {
      setConn(error.status === 401 || error.status === 403 ? "denied" : "retrying", error.message);
    }
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
