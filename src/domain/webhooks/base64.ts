// Standard base64 over bytes with only what workerd and Node share (btoa/atob),
// so the webhook code needs no Buffer and stays edge-safe.

export function toBase64(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s);
}

/** Throws a DOMException (InvalidCharacterError) on input that is not base64. */
export function fromBase64(text: string): Uint8Array<ArrayBuffer> {
  return Uint8Array.from(atob(text), (ch) => ch.charCodeAt(0));
}
