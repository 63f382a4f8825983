// Follow a thread's memory live from a browser: open http://127.0.0.1:8765/healthz (the feed has
// no CORS headers, so run this on om serve's own origin) and paste this into the console; with
// tokens configured, add &access_token=TOKEN to the URL (an EventSource cannot set headers).
// EventSource reconnects by itself with Last-Event-ID = the last seq: nothing lost, nothing twice.
const feed = new EventSource("/threads/t1/events?types=data-om-status,data-om-activation,data-om-observation-end");
feed.onmessage = ({ lastEventId, data }) => {
  if (data === "[DONE]") return feed.close();  // the end of a ?follow=false replay: do not reconnect
  const part = JSON.parse(data);  // {type, id, data, transient}: schemas/json/data-part.json
  const { tokens, threshold } = part.type === "data-om-status" ? part.data.windows.active.messages : {};
  if (tokens !== undefined) console.log(lastEventId, "unobserved", tokens, "/", threshold, "tokens");
  else console.log(lastEventId, part.type, part.id, part.data);
};
