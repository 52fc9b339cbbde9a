/**
 * gRPC over HTTP/2, the parts the Temporal door reads: length-prefixed messages (1 byte compressed flag, 4 bytes
 * big-endian length, the protobuf), gzip-compressed ones (Temporal's native client compresses by default, and the
 * server answers in kind), status codes and the percent-encoded grpc-message.
 */
import { promisify } from 'node:util';
import { gunzip } from 'node:zlib';

const gunzipAsync = promisify(gunzip);

/** The gRPC status codes the door answers with or reads. */
export const GRPC = {
  OK: 0,
  CANCELLED: 1,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  UNAUTHENTICATED: 16,
} as const;

/** One gRPC message as it came off the wire. */
export interface GrpcFrame {
  compressed: boolean;
  payload: Buffer;
}

/** Splits a complete body into its messages; throws on a truncated one (the body ended mid-message). */
export function parseFrames(body: Buffer): GrpcFrame[] {
  const frames: GrpcFrame[] = [];
  let at = 0;
  while (at < body.length) {
    if (body.length - at < 5) throw new Error(`a gRPC message header is cut short (${body.length - at} of 5 bytes)`);
    const flag = body[at] ?? 0;
    const len = body.readUInt32BE(at + 1);
    if (flag > 1) throw new Error(`gRPC compressed flag ${flag} is neither 0 nor 1`);
    if (body.length - at - 5 < len)
      throw new Error(`a gRPC message is cut short (${body.length - at - 5} of ${len} bytes)`);
    frames.push({ compressed: flag === 1, payload: body.subarray(at + 5, at + 5 + len) });
    at += 5 + len;
  }
  return frames;
}

/** The protobuf bytes of a message, gunzipped when its flag says so (`encoding` is the stream's grpc-encoding). */
export async function messageBytes(frame: GrpcFrame, encoding: string | undefined): Promise<Buffer> {
  if (!frame.compressed) return frame.payload;
  if (encoding !== 'gzip')
    throw new Error(
      `a compressed gRPC message in encoding ${JSON.stringify(encoding ?? 'none')}; the door reads gzip only`,
    );
  return gunzipAsync(frame.payload);
}

/** One uncompressed gRPC message. */
export function frameMessage(payload: Uint8Array): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
}

/** grpc-message as the spec wants it: percent-encoded outside printable ASCII, and '%' itself. */
export function encodeGrpcMessage(message: string): string {
  let out = '';
  for (const byte of Buffer.from(message, 'utf8')) {
    out +=
      byte >= 0x20 && byte <= 0x7e && byte !== 0x25
        ? String.fromCharCode(byte)
        : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

/** The inverse of encodeGrpcMessage (what a client shows). */
export function decodeGrpcMessage(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    return value;
  }
}

const TIMEOUT_UNITS_MS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 1e-3, n: 1e-6 };

/** A `grpc-timeout` header in milliseconds (`70000000u` is 70 s), or null when there is none or it does not parse. */
export function grpcTimeoutMs(header: string | string[] | undefined): number | null {
  const m = typeof header === 'string' ? /^(\d{1,8})([HMSmun])$/.exec(header) : null;
  return m ? Number(m[1]) * (TIMEOUT_UNITS_MS[m[2] as string] as number) : null;
}

/** Milliseconds as a `grpc-timeout` header (whole milliseconds, at least 1). */
export function grpcTimeoutHeader(ms: number): string {
  return `${Math.max(1, Math.floor(ms))}m`;
}
