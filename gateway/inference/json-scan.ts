/**
 * Reads a JSON request body without building it: one pass over the bytes that checks the whole body is JSON,
 * refuses nesting deeper than a bound at the first byte past it, and returns where the values of a few top-level
 * keys are. The gateway forwards the body untouched and needs only `model` and a few fields; JSON.parse would build
 * every array of a 10 MB nesting bomb (seconds of a blocked event loop) to tell it that.
 */

/** What a top-level value is, from its first byte. */
export type JsonKind = 'object' | 'array' | 'string' | 'number' | 'boolean' | 'null';

/** Where one top-level value is in the body: bytes [start, end), and its kind. */
export interface JsonSlice {
  start: number;
  end: number;
  kind: JsonKind;
}

/** A scanned body: the wanted top-level keys present, or what is wrong with the body. */
export type ScanResult = { kind: 'ok'; fields: Map<string, JsonSlice> } | { kind: 'error'; message: string };

const OBJ = 1;
const ARR = 2;
// What the scanner expects next.
const VALUE = 0;
const KEY_OR_END = 1; // just after '{'
const KEY = 2; // after ',' in an object
const VALUE_OR_END = 3; // just after '['
const AFTER = 4; // after a value
const KINDS: Record<number, JsonKind> = {
  0x7b: 'object',
  0x5b: 'array',
  0x22: 'string',
  0x74: 'boolean',
  0x66: 'boolean',
  0x6e: 'null',
};
const HEX = new Uint8Array(256);
for (const c of '0123456789abcdefABCDEF') HEX[c.charCodeAt(0)] = 1;
const ESCAPES = new Uint8Array(256);
for (const c of '"\\/bfnrtu') ESCAPES[c.charCodeAt(0)] = 1;

// The scan is synchronous, so one stack serves every call up to this depth.
const STACK = new Uint8Array(256);
const isWs = (c: number): boolean => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
const isDigit = (c: number): boolean => c >= 0x30 && c <= 0x39;

/** Strings shorter than this are read byte by byte: a key or a role ends before skimming would pay off. */
const SHORT = 32;

/**
 * How a long string's content is skimmed (a prompt is nearly all one string, and a byte loop over it took ~0.3 ms
 * per 220 KB, several times that on a loaded core): the next '"' and '\\' from Buffer.indexOf (memchr: native,
 * and each found once per scan, kept here as the scan moves on), and the bytes before the nearer one tested four at a
 * time for a control character (JSON forbids them raw in a string).
 */
interface Skim {
  /** the body's 4-aligned span as words (made at the first long string: a small body never pays for it) */
  w: Int32Array | null;
  /** the body's index of w[0]'s first byte */
  at: number;
  /** the next '"' and '\\' at or after where the scan last looked (the body's length for none) */
  quote: number;
  escape: number;
}

/** The body's bytes as 32-bit words, from its first 4-aligned byte. */
function wordsOf(b: Uint8Array, s: Skim): Int32Array {
  s.at = (4 - (b.byteOffset & 3)) & 3;
  s.w = new Int32Array(b.buffer, b.byteOffset + s.at, Math.max(0, (b.length - s.at) >> 2));
  return s.w;
}

/** The first index in [i, stop) whose byte is a control character, or stop. */
function controlAt(b: Uint8Array, s: Skim, i: number, stop: number): number {
  const w = s.w ?? wordsOf(b, s);
  while (i < stop && (i - s.at) & 3) {
    if ((b[i] as number) < 0x20) return i;
    i++;
  }
  let k = (i - s.at) >> 2;
  const m = Math.min(w.length, (stop - s.at) >> 2);
  // A byte's high bit is set where a byte is < 0x20 (exactly for the first such byte): the word holds one.
  for (; k < m; k++) {
    const x = w[k] as number;
    if ((x - 0x20202020) & ~x & 0x80808080) break;
  }
  i = Math.max(i, s.at + 4 * k);
  while (i < stop && (b[i] as number) >= 0x20) i++;
  return i;
}

/** The index of the first `c` from `i`, or b.length. */
function nextByte(b: Buffer, c: number, i: number): number {
  const j = b.indexOf(c, i);
  return j < 0 ? b.length : j;
}

/** The first index from `i` whose byte is '"', '\\' or a control character, or b.length. */
function plainEnd(b: Buffer, s: Skim, i: number): number {
  if (s.quote < i) s.quote = nextByte(b, 0x22, i);
  if (s.escape < i) s.escape = nextByte(b, 0x5c, i);
  return controlAt(b, s, i, Math.min(s.quote, s.escape));
}

/** The end of the string whose opening quote is at `i` (one past its closing quote), or -1 when it is not a valid string. */
function stringEnd(b: Buffer, s: Skim, i: number): number {
  const n = b.length;
  const short = Math.min(n, i + SHORT);
  for (i++; ; i++) {
    if (i >= short) i = plainEnd(b, s, i);
    if (i >= n) return -1;
    const c = b[i] as number;
    if (c === 0x22) return i + 1;
    if (c === 0x5c) {
      const e = b[++i] as number;
      if (!ESCAPES[e]) return -1;
      if (e === 0x75) {
        if (
          i + 4 >= n ||
          !HEX[b[i + 1] as number] ||
          !HEX[b[i + 2] as number] ||
          !HEX[b[i + 3] as number] ||
          !HEX[b[i + 4] as number]
        )
          return -1;
        i += 4;
      }
    } else if (c < 0x20) return -1;
  }
}

/** The end of the number starting at `i` (JSON's grammar), or -1. */
function numberEnd(b: Uint8Array, i: number): number {
  if (b[i] === 0x2d) i++;
  if (b[i] === 0x30) i++;
  else if (isDigit(b[i] as number)) while (isDigit(b[i] as number)) i++;
  else return -1;
  if (b[i] === 0x2e) {
    if (!isDigit(b[++i] as number)) return -1;
    while (isDigit(b[i] as number)) i++;
  }
  if (b[i] === 0x65 || b[i] === 0x45) {
    i++;
    if (b[i] === 0x2b || b[i] === 0x2d) i++;
    if (!isDigit(b[i] as number)) return -1;
    while (isDigit(b[i] as number)) i++;
  }
  return i;
}

/** The end of `word` (true, false, null) at `i`, or -1. */
function wordEnd(b: Uint8Array, i: number, word: string): number {
  for (let k = 0; k < word.length; k++) if (b[i + k] !== word.charCodeAt(k)) return -1;
  return i + word.length;
}

/** A top-level key's text (short keys only: every wanted key is). */
function keyText(b: Buffer, start: number, end: number): string | null {
  if (end - start > 66) return null;
  for (let i = start + 1; i < end - 1; i++)
    if (b[i] === 0x5c) return JSON.parse(b.toString('utf8', start, end)) as string;
  return b.toString('latin1', start + 1, end - 1);
}

const fail = (message: string): ScanResult => ({ kind: 'error', message });
/** The refusal of a body that is not JSON at byte `i` (module level: no closure made per request). */
function unexpectedAt(b: Buffer, i: number): ScanResult {
  return fail(
    i >= b.length
      ? 'the request body is not valid JSON: it ends too soon'
      : `the request body is not valid JSON: unexpected ${JSON.stringify(String.fromCharCode(b[i] as number))} at byte ${i}`,
  );
}

/**
 * Scans `body`, which must be one JSON object, at most `maxDepth` containers deep; returns the slices of the
 * top-level keys in `wanted` (the last one of a repeated key, as JSON.parse keeps).
 */
export function scanJsonObject(body: Buffer, wanted: ReadonlySet<string>, maxDepth: number): ScanResult {
  const b = body;
  const n = b.length;
  const fields = new Map<string, JsonSlice>();
  const stack = maxDepth + 1 <= STACK.length ? STACK : new Uint8Array(maxDepth + 1);
  const skim: Skim = { w: null, at: 0, quote: -1, escape: -1 };
  let depth = 0;
  let state = VALUE;
  let i = 0;
  // The top-level key whose value is being read, and where that value began.
  let key: string | null = null;
  let valueStart = 0;
  for (;;) {
    while (i < n && isWs(b[i] as number)) i++;
    if (state === AFTER && depth === 0) return i === n ? { kind: 'ok', fields } : unexpectedAt(b, i);
    if (i >= n) return unexpectedAt(b, i);
    const c = b[i] as number;
    if (state === VALUE || state === VALUE_OR_END) {
      if (state === VALUE_OR_END && c === 0x5d) {
        i++;
        depth--;
      } else {
        if (depth === 0 && c !== 0x7b) return fail('the request body must be a JSON object');
        if (depth === 1) valueStart = i;
        if (c === 0x7b || c === 0x5b) {
          if (depth === maxDepth) return fail(`the request body nests deeper than ${maxDepth} levels`);
          stack[++depth] = c === 0x7b ? OBJ : ARR;
          i++;
          state = c === 0x7b ? KEY_OR_END : VALUE_OR_END;
          continue;
        }
        const end =
          c === 0x22
            ? stringEnd(b, skim, i)
            : c === 0x74
              ? wordEnd(b, i, 'true')
              : c === 0x66
                ? wordEnd(b, i, 'false')
                : c === 0x6e
                  ? wordEnd(b, i, 'null')
                  : numberEnd(b, i);
        if (end < 0) return unexpectedAt(b, i);
        i = end;
      }
      // A value ended (a scalar, or a container closed back to the top level's depth).
      if (depth === 1 && key !== null) {
        fields.set(key, { start: valueStart, end: i, kind: KINDS[b[valueStart] as number] ?? 'number' });
        key = null;
      }
      state = AFTER;
    } else if (state === KEY_OR_END || state === KEY) {
      if (state === KEY_OR_END && c === 0x7d) {
        i++;
        depth--;
        if (depth === 1 && key !== null) {
          fields.set(key, { start: valueStart, end: i, kind: 'object' });
          key = null;
        }
        state = AFTER;
        continue;
      }
      if (c !== 0x22) return unexpectedAt(b, i);
      const end = stringEnd(b, skim, i);
      if (end < 0) return unexpectedAt(b, i);
      if (depth === 1) {
        const k = keyText(b, i, end);
        key = k !== null && wanted.has(k) ? k : null;
      }
      i = end;
      while (i < n && isWs(b[i] as number)) i++;
      if (b[i] !== 0x3a) return unexpectedAt(b, i);
      i++;
      state = VALUE;
    } else {
      // AFTER, inside a container: a comma, or the container's end.
      const inObj = stack[depth] === OBJ;
      if (c === 0x2c) {
        i++;
        state = inObj ? KEY : VALUE;
      } else if (c === (inObj ? 0x7d : 0x5d)) {
        i++;
        depth--;
        if (depth === 1 && key !== null) {
          fields.set(key, { start: valueStart, end: i, kind: inObj ? 'object' : 'array' });
          key = null;
        }
      } else return unexpectedAt(b, i);
    }
  }
}

/** A top-level value as JSON (parse only small slices: the scan found where they are). */
export function sliceValue(body: Buffer, s: JsonSlice): unknown {
  // A string without escapes is its bytes (the scan checked it is a valid JSON string): no JSON.parse per request.
  if (s.kind === 'string') {
    let i = s.start + 1;
    while (i < s.end - 1 && body[i] !== 0x5c) i++;
    if (i === s.end - 1) return body.toString('utf8', s.start + 1, i);
  }
  return JSON.parse(body.toString('utf8', s.start, s.end));
}
