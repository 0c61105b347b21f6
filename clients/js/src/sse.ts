// SPDX-License-Identifier: MIT
// A Server-Sent Events parser over a response body (the subset semad sends: id, event, data,
// comments), following the WHATWG event-stream rules for line endings and multi-line data.

export interface RawEvent {
  id: string | undefined;
  event: string;
  data: string;
}

export async function* parseEventStream(body: AsyncIterable<Uint8Array>): AsyncGenerator<RawEvent> {
  const decoder = new TextDecoder();
  let buf = "";
  let id: string | undefined;
  let event = "";
  let data: string[] = [];
  for await (const value of body) {
    buf += decoder.decode(value, { stream: true });
    for (;;) {
      const nl = buf.search(/\r\n|\r|\n/);
      if (nl < 0) break;
      // A lone \r at the very end may be the first half of \r\n: wait for more.
      if (buf[nl] === "\r" && nl === buf.length - 1) break;
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + (buf.startsWith("\r\n", nl) ? 2 : 1));
      if (line === "") {
        if (data.length > 0) yield { id, event: event || "message", data: data.join("\n") };
        event = "";
        data = [];
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let v = colon < 0 ? "" : line.slice(colon + 1);
      if (v.startsWith(" ")) v = v.slice(1);
      if (field === "id") id = v;
      else if (field === "event") event = v;
      else if (field === "data") data.push(v);
    }
  }
}
