const encoder = new TextEncoder();

/** Options of verifyWebhook. */
export interface VerifyOptions {
  /** Reject a signature older (or newer) than this many seconds; default 300. */
  toleranceSeconds?: number;
  /** The current time in Unix seconds; default now. */
  now?: number;
}

function bytesOf(body: string | Uint8Array): Uint8Array {
  return typeof body === "string" ? encoder.encode(body) : body;
}

function hmacKey(secret: string) {
  return crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign", "verify"]);
}

function hexToBytes(hex: string): Uint8Array | undefined {
  if (hex.length === 0 || hex.length % 2 !== 0 || !/^[0-9a-fA-F]+$/.test(hex)) return undefined;
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

function signed(t: string, body: string | Uint8Array): Uint8Array {
  const b = bytesOf(body);
  const head = encoder.encode(t + ".");
  const msg = new Uint8Array(head.length + b.length);
  msg.set(head, 0);
  msg.set(b, head.length);
  return msg;
}

/**
 * The hex HMAC-SHA256 of "<t>.<body>" with secret: the v1 part of a
 * Sandq-Signature header, as the API computes it (service.Sign).
 */
export async function signWebhook(secret: string, t: string | number, body: string | Uint8Array): Promise<string> {
  const mac = await crypto.subtle.sign("HMAC", await hmacKey(secret), signed(String(t), body));
  return Array.from(new Uint8Array(mac), (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * Checks a webhook delivery: the Sandq-Signature header
 * ("t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>") against
 * the raw body of the request (the bytes as received, not re-serialized
 * JSON), with the key's webhook secret (Client.webhookSecret). False when
 * the header is malformed, the MAC differs (compared in constant time),
 * or t is further than toleranceSeconds from now.
 */
export async function verifyWebhook(
  secret: string,
  signatureHeader: string | null | undefined,
  body: string | Uint8Array,
  opts: VerifyOptions = {},
): Promise<boolean> {
  if (!signatureHeader) return false;
  const parts = new Map<string, string>();
  for (const p of signatureHeader.split(",")) {
    const i = p.indexOf("=");
    if (i > 0) parts.set(p.slice(0, i).trim(), p.slice(i + 1).trim());
  }
  const t = parts.get("t") ?? "";
  const mac = hexToBytes(parts.get("v1") ?? "");
  if (!/^[0-9]{1,12}$/.test(t) || !mac) return false;
  const now = opts.now ?? Math.floor(Date.now() / 1000);
  if (Math.abs(now - Number(t)) > (opts.toleranceSeconds ?? 300)) return false;
  // crypto.subtle.verify compares in constant time.
  return crypto.subtle.verify("HMAC", await hmacKey(secret), mac, signed(t, body));
}
