// The observation log as a person reads it: date headers, priorities, times, sub-bullets, and
// the message boundaries between the chunks each cycle appended (spec §3.4, §7.4).
"use strict";

const observations = (() => {
  const { el } = om;
  // Same pattern as omstream.engine.observations._SPLIT; the group keeps the boundary's cursor.
  const BOUNDARY = /\n{2,}--- message boundary \(([^)]*)\) ---\n{2,}/;
  const PRIORITY = { "🔴": "high", "🟡": "medium", "🟢": "low", "✅": "done" };

  // One line of the log -> { kind, depth, priority, time, text }: a pure function, so the
  // rendering below stays a plain mapping.
  function parseLine(line) {
    const date = line.match(/^\s*Date:\s*(.+?)\s*$/);
    if (date) return { kind: "date", text: date[1] };
    const thread = line.match(/^\s*<thread id="([^"]*)">\s*$/);
    if (thread) return { kind: "thread", text: thread[1] };
    if (/^\s*<\/thread>\s*$/.test(line)) return null;
    // Retrieval's observation groups (spec §12): a heading naming the messages they came from.
    const group = line.match(/^<observation-group id="([^"]*)" range="([^"]*)"( kind="reflection")?>$/);
    if (group) return { kind: "group", text: `${group[3] ? "reflection " : ""}group ${group[1]} · messages ${group[2]}` };
    if (/^<\/observation-group>\s*$/.test(line)) return null;
    const item = line.match(/^(\s*)(?:[*-]|\d+\.)\s+(.*)$/);
    if (!item) return line.trim() ? { kind: "text", depth: 0, text: line.trim() } : null;
    let text = item[2];
    let priority = null;
    for (const [mark, name] of Object.entries(PRIORITY)) {
      if (text.startsWith(mark)) {
        priority = name;
        text = text.slice(mark.length).trimStart();
        break;
      }
    }
    const time = text.match(/^\((\d{1,2}:\d{2})\)\s*/);
    if (time) text = text.slice(time[0].length);
    // Two spaces of indentation per level, as the observer writes sub-bullets.
    return { kind: "item", depth: Math.floor(item[1].replace(/\t/g, "  ").length / 2), priority, time: time && time[1], text };
  }

  function renderLine(parsed) {
    if (parsed.kind === "date") {
      // A window's dates may carry a relative note, "Mar 3, 2025 (2 days ago)".
      const m = parsed.text.match(/^(.*?)(\s*\(.*\))?$/);
      return el("div", { class: "obs-date" }, m[1], m[2] ? el("span", { class: "rel", text: m[2] }) : null);
    }
    if (parsed.kind === "thread") return el("div", { class: "obs-thread", text: `thread ${parsed.text}` });
    if (parsed.kind === "group") return el("div", { class: "obs-thread", text: parsed.text });
    // Priorities are drawn as coloured dots by the style sheet, not as the emoji: a machine
    // without a colour emoji font would show empty boxes. The emoji stays in the tooltip.
    const emoji = parsed.priority ? Object.keys(PRIORITY).find((k) => PRIORITY[k] === parsed.priority) : null;
    return el("div", { class: `obs-line ${parsed.priority || (parsed.depth ? "sub" : "")}`, style: `padding-left:${parsed.depth * 22}px` },
      el("span", { class: "prio", title: emoji ? `${emoji} ${parsed.priority}` : null }),
      parsed.time ? el("span", { class: "time", text: parsed.time }) : null,
      el("span", { class: "text", text: parsed.text }));
  }

  function render(container, text) {
    if (!text) {
      om.fill(container, el("p", { class: "empty", text: "No observations yet." }));
      return;
    }
    const parts = text.split(BOUNDARY); // [chunk, cursor, chunk, cursor, chunk, ...]
    const nodes = [];
    for (let i = 0; i < parts.length; i += 2) {
      if (i > 0) nodes.push(el("div", { class: "obs-boundary", text: `message boundary · ${om.when(parts[i - 1])}` }));
      const chunk = el("div", { class: "obs-chunk" });
      for (const line of parts[i].split("\n")) {
        const parsed = parseLine(line);
        if (parsed) chunk.append(renderLine(parsed));
      }
      nodes.push(chunk);
    }
    om.fill(container, nodes);
  }

  return { parseLine, render };
})();
