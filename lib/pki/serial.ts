/** Certificate serial numbers: random, positive, 128 bits, lowercase hex. */
import { randomBytes } from 'node:crypto';

/**
 * 16 random bytes with the top bit cleared (DER INTEGERs are signed: a set top bit would make it
 * negative). A zero first byte is drawn again: DER wants the minimal encoding, which OpenSSL enforces,
 * and a fixed 32-digit form keeps serials comparable as strings.
 */
export function randomSerial(): string {
  for (;;) {
    const b = randomBytes(16);
    b[0] = b[0]! & 0x7f;
    if (b[0] !== 0) return b.toString('hex');
  }
}

/** The content octets of a DER INTEGER for a non-negative hex number (minimal, with a 0x00 pad when the top bit is set). */
export function derUnsignedInteger(hex: string): string {
  let h = hex.toLowerCase().replace(/^0+/, '') || '0';
  if (h.length % 2) h = `0${h}`;
  if (parseInt(h.slice(0, 2), 16) & 0x80) h = `00${h}`;
  return Buffer.from(h, 'hex').toString('binary');
}
