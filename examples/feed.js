// Follow a thread's memory live: its status, activations and observation ends, one line each.
//
//   node examples/feed.js THREAD [BASE_URL]        BASE_URL default $OM_URL, else http://127.0.0.1:8765
//   OM_THREAD=T OM_URL=http://host:8765 OM_TOKEN=TOKEN node examples/feed.js
//
// In a browser: on a page of om serve's own origin (the feed has no CORS headers), e.g.
// http://127.0.0.1:8765/healthz?thread=T&access_token=TOKEN, paste this into the console.
// EventSource reconnects by itself with Last-Event-ID = the last seq: nothing lost, nothing twice.
// Node before 22 has no EventSource of its own: the `eventsource` package is used (`npm i eventsource`,
// or NODE_PATH=tests/js/node_modules in a checkout); on Node 22+, --experimental-eventsource.
{
  const inNode = typeof process !== "undefined" && Array.isArray(process.argv);
  const page = typeof location !== "undefined" ? new URLSearchParams(location.search) : new URLSearchParams();
  const [argThread, argBase] = inNode ? process.argv.slice(2) : [];
  const env = inNode ? process.env : {};
  const thread = argThread || env.OM_THREAD || page.get("thread");
  const base = argBase || env.OM_URL || (typeof location !== "undefined" ? location.origin : "http://127.0.0.1:8765");
  const token = env.OM_TOKEN || page.get("access_token");
  const Source = typeof EventSource !== "undefined" ? EventSource : packaged();
  function packaged() {
    try { return require("eventsource").EventSource; } catch { return undefined; }  // Node, CommonJS
  }
  if (!thread || Source === undefined) {
    console.error(thread ? "no EventSource: npm i eventsource (see the top of examples/feed.js)"
      : "usage: node examples/feed.js THREAD [BASE_URL]   (or OM_THREAD, OM_URL, OM_TOKEN; in a browser ?thread=)");
    if (inNode) process.exitCode = 2;
  } else {
    const url = new URL(`/threads/${encodeURIComponent(thread)}/events`, base);
    url.searchParams.set("types", "data-om-status,data-om-activation,data-om-observation-end");
    if (token) url.searchParams.set("access_token", token);  // an EventSource cannot set headers
    const feed = new Source(url.href);
    feed.onerror = () => {  // the browser retries by itself; closed for good: not a feed (401, 404)
      if (feed.readyState === 2) console.error(`${url.origin}: no feed for thread ${thread} (unknown thread, or a token is needed)`);
      else console.error(`${url.origin}: connection lost, reconnecting`);
    };
    feed.onmessage = ({ lastEventId, data }) => {
      if (data === "[DONE]") return feed.close();  // the end of a ?follow=false replay: do not reconnect
      const part = JSON.parse(data);  // {type, id, data, transient}: schemas/json/data-part.json
      const { tokens, threshold } = part.type === "data-om-status" ? part.data.windows.active.messages : {};
      if (tokens !== undefined) console.log(lastEventId, "unobserved", tokens, "/", threshold, "tokens");
      else console.log(lastEventId, part.type, part.id, part.data);
    };
  }
}
