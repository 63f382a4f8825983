// Runs examples/feed.js as `node examples/feed.js t1 ORIGIN` would: the global EventSource is the
// `eventsource` package (the WHATWG EventSource, reconnecting with Last-Event-ID); each
// console.log is printed as one JSON array, so the test reads what the example shows.
//   node run_feed_js.mjs ORIGIN path/to/feed.js
import { readFile } from "node:fs/promises";
import { EventSource as WhatwgEventSource } from "eventsource";

const [origin, file] = process.argv.slice(2);
globalThis.EventSource = class extends WhatwgEventSource {
  constructor(url, init) { super(new URL(url, origin), init); }
};
process.argv = [process.argv[0], file, "t1", origin];  // the example's own arguments
console.log = (...args) => process.stdout.write(JSON.stringify(args) + "\n");
new Function(await readFile(file, "utf8"))();
