/**
 * A header value as fetch sends it: without the HTTP whitespace around it (the Fetch standard
 * normalizes a value so), as a secret read from a file or pasted with its line break would be
 * sent. What is checked, and what is taken out of an answer that repeats it, must be that value.
 */
export function asFetchSends(value: string): string {
  return value.replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, "");
}

/** What no header value may hold once normalized: fetch refuses the request, and its error quotes the whole value. */
export const HEADER_BREAK = /[\r\n\0]/;
