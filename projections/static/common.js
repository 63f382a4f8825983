// Shared by both dashboard pages: the access token, DOM building and number formatting.
"use strict";

const om = (() => {
  // A page opened as `/?access_token=T` passes T to every data route it calls. The routes
  // accept the token as a query parameter because a browser's EventSource cannot set an
  // Authorization header (projections/http/access.py); the page itself holds no data.
  const token = new URLSearchParams(location.search).get("access_token");

  function withToken(path, params = {}) {
    const url = new URL(path, location.origin);
    for (const [k, v] of Object.entries(params)) {
      if (v !== undefined && v !== null) url.searchParams.set(k, String(v));
    }
    if (token) url.searchParams.set("access_token", token);
    return url.pathname + url.search;
  }

  async function getJson(path, params) {
    const response = await fetch(withToken(path, params), { cache: "no-store" });
    const body = await response.json().catch(() => null);
    if (!response.ok) {
      const error = new Error((body && body.detail) || `HTTP ${response.status}`);
      error.status = response.status;
      throw error;
    }
    return body;
  }

  // Elements are built with textContent only: observation text, messages and titles are
  // written by users and models, and must never be read as HTML.
  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function fill(node, ...children) {
    node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
    return node;
  }

  const exact = (n) => (n ?? 0).toLocaleString("en-US");

  // "1 cycle", "3 cycles", "1,204 tokens": a count and its noun agree (the twin of
  // omstream.plural, which the CLI prints with). `many` for a plural that is not noun + "s".
  const plural = (n, noun, many) => `${exact(n)} ${(n ?? 0) === 1 ? noun : many || `${noun}s`}`;

  // 12345 -> "12.3k", as the original's playground writes compression ratios.
  function short(n) {
    n = n ?? 0;
    if (Math.abs(n) < 1000) return String(n);
    if (Math.abs(n) < 1e6) return (n / 1000).toFixed(1) + "k";
    return (n / 1e6).toFixed(1) + "M";
  }

  // "Observed 12.0k→1.1k (−11×)": input and output tokens of a cycle.
  function compression(input, output) {
    const ratio = output > 0 ? input / output : null;
    const factor = ratio === null ? "" : ratio >= 1 ? ` (−${ratio >= 10 ? Math.round(ratio) : ratio.toFixed(1)}×)` : " (+)";
    return `${short(input)}→${short(output)}${factor}`;
  }

  function seconds(ms) {
    return ms < 60000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
  }

  // Event times are the inputs' own (ISO-8601, UTC); shown as written, without the zone noise.
  function when(iso) {
    if (!iso) return "";
    const m = String(iso).match(/^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)/);
    return m ? `${m[1]} ${m[2]}` : String(iso);
  }

  return { token, withToken, getJson, el, fill, exact, plural, short, compression, seconds, when };
})();
