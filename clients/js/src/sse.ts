/** One message of a text/event-stream. */
export interface SseMessage {
  event: string;
  data: string;
  id?: string;
}

/**
 * Parses a text/event-stream as the HTML standard defines it: fields
 * "event", "data" (lines joined with \n), "id"; comments (":...")
 * ignored; a message dispatched at each blank line; lines ended by \n,
 * \r\n or \r, split anywhere across chunks. Messages without data are
 * not dispatched.
 */
export async function* parseSse(body: AsyncIterable<Uint8Array>): AsyncGenerator<SseMessage> {
  const decoder = new TextDecoder("utf-8");
  let buf = "";
  let event = "";
  let data: string[] = [];
  let id: string | undefined;
  let hasData = false;
  function* lines(final: boolean): Generator<string> {
    for (;;) {
      const m = /\r\n|\r|\n/.exec(buf);
      // A lone \r at the end of the buffer may be half of a \r\n.
      if (!m || (!final && m[0] === "\r" && m.index === buf.length - 1)) return;
      const line = buf.slice(0, m.index);
      buf = buf.slice(m.index + m[0].length);
      yield line;
    }
  }
  function* take(line: string): Generator<SseMessage> {
    if (line === "") {
      if (hasData) {
        const msg: SseMessage = { event: event || "message", data: data.join("\n") };
        if (id !== undefined) msg.id = id;
        yield msg;
      }
      event = "";
      data = [];
      hasData = false;
      id = undefined;
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    switch (field) {
      case "event":
        event = value;
        break;
      case "data":
        data.push(value);
        hasData = true;
        break;
      case "id":
        if (!value.includes("\0")) id = value;
        break;
    }
  }
  for await (const chunk of body) {
    buf += decoder.decode(chunk, { stream: true });
    for (const line of lines(false)) yield* take(line);
  }
  buf += decoder.decode();
  for (const line of lines(true)) yield* take(line);
}
