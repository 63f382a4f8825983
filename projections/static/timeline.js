// The memory's timeline: one marker per lifecycle event along the seq axis, and a cursor.
// The cursor at the newest seq follows the feed ("live"); anywhere else it pins a past seq,
// and the page asks the read side for the window as of that seq (`context?asOf=SEQ`).
"use strict";

const timeline = (() => {
  const { el } = om;

  // The marker class of a part type; null for events too frequent to mark (status, messages
  // get a thin tick instead).
  function category(type, data) {
    const reflection = data && data.operationType === "reflection";
    switch (type) {
      case "data-om-message-accepted":
      case "data-om-temporal-gap":
        return "message";
      case "data-om-observation-start":
      case "data-om-observation-end":
        return reflection ? "reflection" : "observation";
      case "data-om-buffering-start":
      case "data-om-buffering-end":
        return reflection ? "reflection" : "buffering";
      case "data-om-activation":
        return reflection ? "reflection" : "activation";
      case "data-om-observation-failed":
      case "data-om-buffering-failed":
      case "data-om-memory-deleted":
        return "failure";
      case "data-om-thread-update":
        return "title";
      default:
        return null; // status, ignored results
    }
  }

  function create({ onSelect }) {
    const cursor = document.getElementById("cursor");
    const markers = document.getElementById("markers");
    const seqLabel = document.getElementById("cursor-seq");
    const eventLabel = document.getElementById("cursor-event");
    const events = new Map(); // seq -> { type, data }
    let last = 0;
    let pinned = null; // null: live; else the seq the cursor holds
    let debounce = null;

    function lifecycleSeqs() {
      return [...events.entries()].filter(([, e]) => e.category && e.category !== "message").map(([s]) => s);
    }

    function add(seq, type, data) {
      const cat = category(type, data);
      events.set(seq, { type, data, category: cat });
      last = Math.max(last, seq);
      cursor.max = String(last);
      if (pinned === null) cursor.value = String(last);
      if (cat) {
        markers.append(el("button", {
          type: "button", class: `marker ${cat}`, "data-seq": seq, title: `#${seq} ${type.replace(/^data-/, "")}`,
          onclick: () => select(seq),
        }));
      }
      layout();
      caption();
    }

    function reset() {
      events.clear();
      markers.replaceChildren();
      last = 0;
      pinned = null;
      cursor.max = "0";
      cursor.value = "0";
      caption();
    }

    // Markers are placed by seq, so they line up with the range input's thumb positions.
    function layout() {
      // Markers narrow as they multiply, so neighbours stay apart on a long history.
      const width = Math.max(2, Math.min(10, (markers.clientWidth / Math.max(markers.children.length, 1)) * 0.7));
      for (const marker of markers.children) {
        if (!marker.classList.contains("message")) {
          marker.style.width = `${width}px`;
          marker.style.marginLeft = `${-width / 2}px`;
        }
        const seq = Number(marker.dataset.seq);
        marker.style.left = last ? `${(seq / last) * 100}%` : "0%";
        marker.classList.toggle("selected", seq === pinned);
      }
    }

    function caption() {
      const seq = pinned === null ? last : pinned;
      seqLabel.textContent = pinned === null ? `live · #${last}` : `#${seq} of ${last}`;
      const event = events.get(seq);
      eventLabel.textContent = event ? event.type.replace(/^data-/, "") : seq === 0 ? "before the first event" : "";
    }

    function select(seq, { immediate = true } = {}) {
      seq = Math.max(0, Math.min(seq, last));
      pinned = seq >= last ? null : seq;
      cursor.value = String(seq);
      layout();
      caption();
      clearTimeout(debounce);
      // While the thumb is dragged, only the last position is asked for.
      if (immediate) onSelect(pinned);
      else debounce = setTimeout(() => onSelect(pinned), 120);
    }

    function step(direction) {
      const current = pinned === null ? last : pinned;
      const seqs = lifecycleSeqs();
      const target = direction < 0 ? seqs.filter((s) => s < current).pop() : seqs.find((s) => s > current);
      select(target === undefined ? (direction < 0 ? 0 : last) : target);
    }

    cursor.addEventListener("input", () => select(Number(cursor.value), { immediate: false }));
    document.getElementById("prev-marker").addEventListener("click", () => step(-1));
    document.getElementById("next-marker").addEventListener("click", () => step(1));

    return { add, reset, select, pinned: () => pinned, last: () => last };
  }

  return { category, create };
})();
