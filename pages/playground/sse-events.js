// @ts-check
/**
 * The events of a text/event-stream, read as the SSE standard reads them, chunk by chunk: a line
 * ends with a CRLF, an LF or a lone CR (the gateway passes on whichever its upstream writes); a
 * blank line ends an event; an event's data is its `data:` lines, less one space after the colon,
 * joined by LFs. Only the text a chunk brings is searched for line ends: an event that comes in a
 * thousand chunks costs its length once, not its length again at each chunk.
 */

/**
 * A reader of one stream's events: `push` the text of each chunk as it comes, in order.
 */
export function sseEvents() {
  const lineEnd = /\r\n|\r|\n/g;
  /** The start of a line whose end has not come yet: the chunks' text, joined as it comes. */
  let line = "";
  /** The data of the event not yet ended; null before its first data line. */
  /** @type {string | null} */
  let data = null;
  /** The characters of the event not yet ended, in its lines that did. */
  let eventLength = 0;
  /** The last text ended with a CR: an LF that begins the next is the second half of that line end (a CRLF), not a line of its own. */
  let afterCR = false;
  return {
    /**
     * The data of each event that ends in `text` (an event with no data line has none).
     * @param {string} text
     * @returns {string[]}
     */
    push(text) {
      /** @type {string[]} */
      const ended = [];
      // A chunk may bring no whole character (a UTF-8 sequence cut in two): it changes nothing.
      if (text === "") return ended;
      let from = afterCR && text.startsWith("\n") ? 1 : 0;
      afterCR = text.endsWith("\r");
      lineEnd.lastIndex = from;
      for (let end = lineEnd.exec(text); end !== null; end = lineEnd.exec(text)) {
        const whole = line + text.slice(from, end.index);
        line = "";
        eventLength += whole.length + lineEnd.lastIndex - end.index;
        from = lineEnd.lastIndex;
        if (whole === "") {
          if (data !== null) ended.push(data);
          data = null;
          eventLength = 0;
        } else if (whole.startsWith("data:")) {
          const value = whole.slice(whole.startsWith("data: ") ? 6 : 5);
          data = data === null ? value : `${data}\n${value}`;
        }
      }
      line += text.slice(from);
      return ended;
    },
    /** The characters of the event not yet ended, its unended line's included: what a stream that never ends one makes it hold. */
    unfinishedLength: () => eventLength + line.length,
  };
}
