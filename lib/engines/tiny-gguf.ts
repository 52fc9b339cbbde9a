/**
 * A tiny llama-architecture GGUF (v3) that tests generate themselves: random F32 weights (seeded, so the same
 * options give the same bytes), a byte-level 'gpt2' BPE vocabulary of 263 tokens, a ChatML template, ~460 KB.
 * llama.cpp loads it as a real model and answers with it. Its replies are nonsense but well formed: the
 * weights keep one channel of the residual stream constant and use it to push every token but a-z, space and
 * three merges far down, so the model writes only ASCII (no invalid UTF-8) and never an end-of-generation
 * token — every completion is exactly max_tokens long, which tests and benchmarks can count on.
 */
import { writeFile } from 'node:fs/promises';
import { seededRandom } from '../random';

/** The model's shape; defaults are the smallest that still exercise grouped-query attention and two layers. */
export interface TinyLlamaOptions {
  seed?: number;
  embd?: number;
  layers?: number;
  heads?: number;
  kvHeads?: number;
  ff?: number;
  /** llama.context_length (what the model says it was trained for; llama-server's -c may be smaller) */
  context?: number;
}

const GGUF_MAGIC = 0x46554747; // "GGUF" little-endian
const ALIGN = 32;
// GGUF metadata value types and ggml tensor types used here.
const T = { u32: 4, i32: 5, f32: 6, bool: 7, string: 8, array: 9 } as const;
const GGML_F32 = 0;
// llama.cpp token types (llama_token_type): normal, control.
const TOKEN = { normal: 1, control: 3 } as const;

/** The special tokens, after the 256 byte tokens and the merges. */
export const TINY_SPECIAL = { bos: '<s>', eos: '<|im_end|>', imStart: '<|im_start|>', eosText: '</s>' } as const;
const MERGES = [
  ['h', 'e'],
  ['Ġ', 't'],
  ['i', 'n'],
] as const;
const CHATML =
  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/** GPT-2's byte-to-unicode table: how a byte-level BPE vocabulary spells each byte as a printable character. */
function byteTokens(): string[] {
  const direct = (b: number): boolean => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  let next = 256;
  return Array.from({ length: 256 }, (_, b) => String.fromCodePoint(direct(b) ? b : next++));
}

/** The vocabulary: 256 byte tokens, the merges' results, then bos, </s>, <|im_start|>, <|im_end|>. */
function vocabulary(): { tokens: string[]; types: number[]; allowed: boolean[]; bos: number; eos: number } {
  const bytes = byteTokens();
  const tokens = [
    ...bytes,
    ...MERGES.map(([a, b]) => a + b),
    TINY_SPECIAL.bos,
    TINY_SPECIAL.eosText,
    TINY_SPECIAL.imStart,
    TINY_SPECIAL.eos,
  ];
  const nSpecial = 4;
  const types = tokens.map((_, i) => (i < tokens.length - nSpecial ? TOKEN.normal : TOKEN.control));
  const ascii = new Set([...'abcdefghijklmnopqrstuvwxyz'].map((c) => c.charCodeAt(0)).concat([32]));
  const allowed = tokens.map((_, i) => (i < 256 ? ascii.has(i) : i < tokens.length - nSpecial));
  return { tokens, types, allowed, bos: tokens.indexOf(TINY_SPECIAL.bos), eos: tokens.indexOf(TINY_SPECIAL.eos) };
}

/** A seeded PRNG uniform in [-1, 1). */
function rng(seed: number): () => number {
  const next = seededRandom(seed);
  return () => next() * 2 - 1;
}

/** Appends little-endian GGUF values to a growing list of buffers. */
class Writer {
  readonly parts: Buffer[] = [];
  length = 0;
  push(b: Buffer): void {
    this.parts.push(b);
    this.length += b.length;
  }
  u32(v: number): void {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v);
    this.push(b);
  }
  u64(v: number): void {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(v));
    this.push(b);
  }
  str(s: string): void {
    const b = Buffer.from(s, 'utf8');
    this.u64(b.length);
    this.push(b);
  }
  pad(): void {
    const n = (ALIGN - (this.length % ALIGN)) % ALIGN;
    if (n) this.push(Buffer.alloc(n));
  }
}

type Kv =
  | [string, 'u32', number]
  | [string, 'i32', number]
  | [string, 'f32', number]
  | [string, 'bool', boolean]
  | [string, 'string', string]
  | [string, 'strings', string[]]
  | [string, 'i32s', number[]];

function writeKv(w: Writer, [key, kind, value]: Kv): void {
  w.str(key);
  switch (kind) {
    case 'u32':
      w.u32(T.u32);
      w.u32(value);
      return;
    case 'i32': {
      w.u32(T.i32);
      const b = Buffer.alloc(4);
      b.writeInt32LE(value);
      w.push(b);
      return;
    }
    case 'f32': {
      w.u32(T.f32);
      const b = Buffer.alloc(4);
      b.writeFloatLE(value);
      w.push(b);
      return;
    }
    case 'bool':
      w.u32(T.bool);
      w.push(Buffer.from([value ? 1 : 0]));
      return;
    case 'string':
      w.u32(T.string);
      w.str(value);
      return;
    case 'strings':
      w.u32(T.array);
      w.u32(T.string);
      w.u64(value.length);
      value.forEach((s) => w.str(s));
      return;
    case 'i32s': {
      w.u32(T.array);
      w.u32(T.i32);
      w.u64(value.length);
      const b = Buffer.alloc(4 * value.length);
      value.forEach((v, i) => b.writeInt32LE(v, 4 * i));
      w.push(b);
      return;
    }
    default: {
      const never: never = kind;
      throw new Error(`unknown kind ${String(never)}`);
    }
  }
}

interface Tensor {
  name: string;
  /** ggml order: ne[0] is the contiguous dimension (a matrix's input width) */
  ne: number[];
  data: Float32Array;
}

/** Builds the file's bytes; the same options always give the same bytes. */
export function tinyLlamaGguf(o: TinyLlamaOptions = {}): Buffer {
  const d = o.embd ?? 64,
    nLayer = o.layers ?? 2,
    nHead = o.heads ?? 4,
    nKv = o.kvHeads ?? 2,
    ff = o.ff ?? 128;
  const headDim = d / nHead;
  if (!Number.isInteger(headDim) || nHead % nKv !== 0)
    throw new Error(`embd ${d} must divide by heads ${nHead}, heads by kvHeads ${nKv}`);
  const v = vocabulary();
  const nVocab = v.tokens.length;
  const rand = rng(o.seed ?? 7);
  const random = (n: number, scale: number): Float32Array => Float32Array.from({ length: n }, () => rand() * scale);
  const ones = (n: number): Float32Array => new Float32Array(n).fill(1);
  // Channel 0 of the residual stream is the constant 1 (every embedding has it; no layer writes to it), so after
  // the final RMS norm it is large and positive, and the output row of a token that must never be chosen puts a
  // large negative weight on it.
  const noWriteToChannel0 = (m: Float32Array, inWidth: number): Float32Array => (m.fill(0, 0, inWidth), m);
  const embd = random(d * nVocab, 0.1);
  for (let t = 0; t < nVocab; t++) embd[t * d] = 1;
  const output = random(d * nVocab, 0.3);
  for (let t = 0; t < nVocab; t++) output[t * d] = v.allowed[t] ? 0 : -10;

  const tensors: Tensor[] = [
    { name: 'token_embd.weight', ne: [d, nVocab], data: embd },
    { name: 'output_norm.weight', ne: [d], data: ones(d) },
    { name: 'output.weight', ne: [d, nVocab], data: output },
  ];
  for (let i = 0; i < nLayer; i++) {
    const s = 1 / Math.sqrt(d);
    tensors.push(
      { name: `blk.${i}.attn_norm.weight`, ne: [d], data: ones(d) },
      { name: `blk.${i}.attn_q.weight`, ne: [d, d], data: random(d * d, s) },
      { name: `blk.${i}.attn_k.weight`, ne: [d, headDim * nKv], data: random(d * headDim * nKv, s) },
      { name: `blk.${i}.attn_v.weight`, ne: [d, headDim * nKv], data: random(d * headDim * nKv, s) },
      { name: `blk.${i}.attn_output.weight`, ne: [d, d], data: noWriteToChannel0(random(d * d, 0.05), d) },
      { name: `blk.${i}.ffn_norm.weight`, ne: [d], data: ones(d) },
      { name: `blk.${i}.ffn_gate.weight`, ne: [d, ff], data: random(d * ff, s) },
      { name: `blk.${i}.ffn_up.weight`, ne: [d, ff], data: random(d * ff, s) },
      { name: `blk.${i}.ffn_down.weight`, ne: [ff, d], data: noWriteToChannel0(random(ff * d, 0.05), ff) },
    );
  }

  const kvs: Kv[] = [
    ['general.architecture', 'string', 'llama'],
    ['general.name', 'string', 'llmgw tiny llama (random weights)'],
    ['general.alignment', 'u32', ALIGN],
    ['llama.context_length', 'u32', o.context ?? 2048],
    ['llama.embedding_length', 'u32', d],
    ['llama.block_count', 'u32', nLayer],
    ['llama.feed_forward_length', 'u32', ff],
    ['llama.attention.head_count', 'u32', nHead],
    ['llama.attention.head_count_kv', 'u32', nKv],
    ['llama.rope.dimension_count', 'u32', headDim],
    ['llama.rope.freq_base', 'f32', 10000],
    ['llama.attention.layer_norm_rms_epsilon', 'f32', 1e-5],
    ['tokenizer.ggml.model', 'string', 'gpt2'],
    ['tokenizer.ggml.pre', 'string', 'gpt-2'],
    ['tokenizer.ggml.tokens', 'strings', v.tokens],
    ['tokenizer.ggml.token_type', 'i32s', v.types],
    ['tokenizer.ggml.merges', 'strings', MERGES.map(([a, b]) => `${a} ${b}`)],
    ['tokenizer.ggml.bos_token_id', 'u32', v.bos],
    ['tokenizer.ggml.eos_token_id', 'u32', v.eos],
    ['tokenizer.ggml.padding_token_id', 'u32', v.eos],
    ['tokenizer.ggml.add_bos_token', 'bool', false],
    ['tokenizer.chat_template', 'string', CHATML],
  ];

  const w = new Writer();
  w.u32(GGUF_MAGIC);
  w.u32(3);
  w.u64(tensors.length);
  w.u64(kvs.length);
  kvs.forEach((kv) => writeKv(w, kv));
  let offset = 0;
  for (const t of tensors) {
    w.str(t.name);
    w.u32(t.ne.length);
    t.ne.forEach((n) => w.u64(n));
    w.u32(GGML_F32);
    w.u64(offset);
    offset += Math.ceil((t.data.length * 4) / ALIGN) * ALIGN;
  }
  w.pad();
  for (const t of tensors) {
    w.push(Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
    w.pad();
  }
  return Buffer.concat(w.parts, w.length);
}

/** Writes the tiny model to `path`; returns its size in bytes. */
export async function writeTinyLlamaGguf(path: string, o: TinyLlamaOptions = {}): Promise<number> {
  const bytes = tinyLlamaGguf(o);
  await writeFile(path, bytes);
  return bytes.length;
}
