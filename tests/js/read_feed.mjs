// Reads a finite omstream feed (`?follow=false`) as useChat does, with the AI SDK major given:
// DefaultChatTransport's reconnect path (prepareReconnectToStreamRequest → the feed's URL), then
// readUIMessageStream.  Prints {parts, data} as JSON: the message's parts after the last chunk
// and every data part onData-style (transient ones included), in order.
//   node read_feed.mjs 5|6|7 URL
const [major, url] = process.argv.slice(2);
const { DefaultChatTransport, readUIMessageStream } = await import(`ai${major}`);

const transport = new DefaultChatTransport({
  api: url,
  prepareReconnectToStreamRequest: () => ({ api: url }),
});
// Two reads of the finite feed: one for the message, one for the chunks as they came (a tee
// would share the chunk objects, which the message builder may update in place).
const open = async () => {
  const chunks = await transport.reconnectToStream({ chatId: "om" });
  if (chunks === null) throw new Error("the feed answered 204: no stream");
  return chunks;
};
const data = [];
const reader = (await open()).getReader();
for (;;) {
  const { done, value } = await reader.read();
  if (done) break;
  if (value.type.startsWith("data-")) data.push(value);
}
const forMessage = await open();
let last;
for await (const message of readUIMessageStream({ stream: forMessage, onError: (e) => { throw e; } })) {
  last = message;
}
console.log(JSON.stringify({ parts: last ? last.parts : [], data }));
