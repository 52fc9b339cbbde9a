/**
 * HTTP/1.1 message framing for the node door's relay (relay.ts): where a head ends, what it says, and where the
 * body after it ends (RFC 9112 §6). Only what a relay needs: heads are read into fields, bodies are never decoded —
 * their bytes pass on as they came (chunked stays chunked) while the frame counts where the message ends.
 * Strict where leniency lets two parsers disagree on a message's end (request smuggling): a request with both
 * Content-Length and Transfer-Encoding, differing Content-Lengths, a transfer coding other than chunked, folded or
 * malformed header lines are refused, never guessed at.
 */

/** Largest request head, bytes: Node's own default (maxHeaderSize). */
export const MAX_REQUEST_HEAD = 16 * 1024;
/** Largest answer head from an engine, bytes. */
export const MAX_ANSWER_HEAD = 64 * 1024;
/** Longest chunk-size line or trailer line of a chunked body, bytes. */
const MAX_CHUNK_LINE = 4096;

/** One header line as it came: its name in lower case, its value trimmed, and the line itself (latin1). */
export interface Field {
  name: string;
  value: string;
  line: string;
}

/** A parsed head: its start line's three parts and its fields. */
export interface Head {
  /** A request's method, target and version; an answer's version, status and reason. */
  start: [string, string, string];
  fields: Field[];
}

/** A message the relay refuses: `status` is what a request gets for it (an answer's is the engine's fault: 502). */
export class FrameError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

const CRLF2 = Buffer.from('\r\n\r\n');

/** The offset just past the head's empty line in `buf`, or -1 while the head is incomplete. */
export function headEnd(buf: Buffer): number {
  const i = buf.indexOf(CRLF2);
  return i < 0 ? -1 : i + 4;
}

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
// Field values: visible ASCII, obs-text, spaces and tabs; no CR, LF or NUL.
const BAD_VALUE = /[\0\r\n]/;

/** Parses a head (the bytes up to and including its empty line); throws FrameError(400) when it is malformed. */
export function parseHead(buf: Buffer, kind: 'request' | 'answer'): Head {
  const lines = buf.toString('latin1', 0, buf.length - 4).split('\r\n');
  const first = lines[0] as string;
  const start = kind === 'request' ? requestLine(first) : statusLine(first);
  const fields: Field[] = [];
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i] as string;
    const colon = line.indexOf(':');
    const name = colon > 0 ? line.slice(0, colon) : '';
    if (!TOKEN.test(name)) throw new FrameError(400, `malformed header line ${JSON.stringify(line.slice(0, 60))}`);
    const value = line.slice(colon + 1).trim();
    if (BAD_VALUE.test(value)) throw new FrameError(400, `header ${name} has a control character in its value`);
    fields.push({ name: name.toLowerCase(), value, line });
  }
  return { start, fields };
}

function requestLine(line: string): [string, string, string] {
  const parts = line.split(' ');
  const [method, target, version] = parts as [string, string, string];
  if (parts.length !== 3 || !TOKEN.test(method) || !target.startsWith('/') || !/^HTTP\/1\.[01]$/.test(version))
    throw new FrameError(400, `malformed request line ${JSON.stringify(line.slice(0, 80))}`);
  return [method, target, version];
}

function statusLine(line: string): [string, string, string] {
  const m = /^(HTTP\/1\.[01]) (\d{3})(?: (.*))?$/.exec(line);
  if (!m) throw new FrameError(502, `malformed status line ${JSON.stringify(line.slice(0, 80))}`);
  return [m[1] as string, m[2] as string, m[3] ?? ''];
}

/** Every value of a field, joined as a list (`a, b`), or null when it is absent. */
function fieldValue(h: Head, name: string): string | null {
  let out: string | null = null;
  for (const f of h.fields) if (f.name === name) out = out === null ? f.value : `${out}, ${f.value}`;
  return out;
}

/** True when a Connection field lists `token` (close, keep-alive). */
export function connectionHas(h: Head, token: string): boolean {
  const v = fieldValue(h, 'connection');
  return (
    v !== null &&
    v
      .toLowerCase()
      .split(',')
      .some((t) => t.trim() === token)
  );
}

/**
 * Where a body ends: after `n` bytes (Content-Length), after its last chunk and trailers (chunked), when the
 * connection closes (an answer with neither), or at once (none).
 */
export class BodyFrame {
  private state: 'length' | 'size' | 'data' | 'crlf' | 'trailer' | 'close' | 'done';
  private left: number;
  private line = '';

  private constructor(
    /** How the body is framed: by its length, in chunks, or by the connection's close. */
    readonly kind: 'length' | 'chunked' | 'close',
    n = 0,
  ) {
    this.state = kind === 'chunked' ? 'size' : kind === 'close' ? 'close' : n === 0 ? 'done' : 'length';
    this.left = n;
  }

  static length(n: number): BodyFrame {
    return new BodyFrame('length', n);
  }
  static chunked(): BodyFrame {
    return new BodyFrame('chunked');
  }
  static untilClose(): BodyFrame {
    return new BodyFrame('close');
  }

  /** True once the body has ended. */
  get done(): boolean {
    return this.state === 'done';
  }

  /**
   * How many bytes of `buf`, from its start, belong to this body: all of them until it ends. Throws
   * FrameError(400) on a malformed chunked body.
   */
  take(buf: Buffer): number {
    if (this.state === 'length') {
      if (buf.length < this.left) {
        this.left -= buf.length;
        return buf.length;
      }
      const n = this.left;
      this.left = 0;
      this.state = 'done';
      return n;
    }
    if (this.state === 'close') return buf.length;
    let i = 0;
    while (i < buf.length && this.state !== 'done') {
      switch (this.state) {
        case 'size':
        case 'trailer': {
          const nl = buf.indexOf(10, i);
          const end = nl < 0 ? buf.length : nl + 1;
          this.line += buf.toString('latin1', i, end);
          i = end;
          if (this.line.length > MAX_CHUNK_LINE) throw new FrameError(400, 'a chunk-size or trailer line is too long');
          if (nl < 0) break;
          if (!this.line.endsWith('\r\n')) throw new FrameError(400, 'a chunked body line does not end in CRLF');
          const line = this.line.slice(0, -2);
          this.line = '';
          if (this.state === 'trailer') {
            if (line === '') this.state = 'done';
            break;
          }
          const m = /^([0-9A-Fa-f]{1,12})(?:[ \t]*;.*)?$/.exec(line);
          if (!m) throw new FrameError(400, `malformed chunk size ${JSON.stringify(line.slice(0, 40))}`);
          this.left = parseInt(m[1] as string, 16);
          this.state = this.left === 0 ? 'trailer' : 'data';
          break;
        }
        case 'data': {
          const n = Math.min(this.left, buf.length - i);
          i += n;
          this.left -= n;
          if (this.left === 0) {
            this.state = 'crlf';
            this.left = 2;
          }
          break;
        }
        case 'crlf': {
          if (buf[i] !== (this.left === 2 ? 13 : 10)) throw new FrameError(400, 'a chunk is not followed by CRLF');
          i++;
          if (--this.left === 0) this.state = 'size';
          break;
        }
        default:
          break;
      }
    }
    return i;
  }
}

/** A request body's frame by its head; throws FrameError where two parsers could disagree on its end. */
export function requestFrame(h: Head): BodyFrame {
  const te = fieldValue(h, 'transfer-encoding');
  const cl = fieldValue(h, 'content-length');
  if (te !== null) {
    if (cl !== null) throw new FrameError(400, 'a request with both Content-Length and Transfer-Encoding');
    if (te.toLowerCase() !== 'chunked')
      throw new FrameError(501, `transfer-encoding ${JSON.stringify(te.slice(0, 40))} is not served (chunked only)`);
    return BodyFrame.chunked();
  }
  return BodyFrame.length(cl === null ? 0 : contentLength(cl, 400));
}

/**
 * An answer body's frame by its head and the request's method: none for HEAD, 1xx, 204 and 304; chunked; a
 * Content-Length; else until the engine closes the connection. Throws FrameError(502) on a malformed length.
 */
export function answerFrame(h: Head, method: string): BodyFrame {
  const status = Number(h.start[1]);
  if (method === 'HEAD' || status < 200 || status === 204 || status === 304) return BodyFrame.length(0);
  const te = fieldValue(h, 'transfer-encoding');
  if (te !== null) return /(^|,)\s*chunked\s*$/i.test(te) ? BodyFrame.chunked() : BodyFrame.untilClose();
  const cl = fieldValue(h, 'content-length');
  return cl === null ? BodyFrame.untilClose() : BodyFrame.length(contentLength(cl, 502));
}

function contentLength(v: string, status: number): number {
  if (/^\d{1,15}$/.test(v)) return Number(v);
  const values = v.split(',').map((x) => x.trim());
  const first = values[0] as string;
  if (!/^\d{1,15}$/.test(first) || values.some((x) => x !== first))
    throw new FrameError(status, `malformed Content-Length ${JSON.stringify(v.slice(0, 40))}`);
  return Number(first);
}
