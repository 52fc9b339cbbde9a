/** The tiny GGUF writer (lib/engines/tiny-gguf.ts), read back by a minimal GGUF v3 reader: header, metadata, aligned tensors. */
import { tinyLlamaGguf } from '../../lib/engines/tiny-gguf';

interface Parsed {
  version: number;
  kv: Map<string, unknown>;
  tensors: { name: string; ne: number[]; type: number; offset: number }[];
  dataStart: number;
}

/** Reads what the writer writes (the value types it uses), failing on anything else. */
function parse(b: Buffer): Parsed {
  let o = 0;
  const u32 = (): number => ((o += 4), b.readUInt32LE(o - 4));
  const u64 = (): number => ((o += 8), Number(b.readBigUInt64LE(o - 8)));
  const str = (): string => {
    const n = u64();
    o += n;
    return b.toString('utf8', o - n, o);
  };
  const value = (t: number): unknown => {
    switch (t) {
      case 4:
        return u32();
      case 5:
        return ((o += 4), b.readInt32LE(o - 4));
      case 6:
        return ((o += 4), b.readFloatLE(o - 4));
      case 7:
        return ((o += 1), b[o - 1] === 1);
      case 8:
        return str();
      case 9: {
        const et = u32();
        const n = u64();
        return Array.from({ length: n }, () => value(et));
      }
      default:
        throw new Error(`value type ${t} at ${o}`);
    }
  };
  expect(b.toString('ascii', 0, 4)).toBe('GGUF');
  o = 4;
  const version = u32();
  const nTensors = u64();
  const nKv = u64();
  const kv = new Map<string, unknown>();
  for (let i = 0; i < nKv; i++) {
    const k = str();
    kv.set(k, value(u32()));
  }
  const tensors = Array.from({ length: nTensors }, () => {
    const name = str();
    const ne = Array.from({ length: u32() }, () => u64());
    return { name, ne, type: u32(), offset: u64() };
  });
  return { version, kv, tensors, dataStart: Math.ceil(o / 32) * 32 };
}

test('a llama-architecture GGUF v3 of a few hundred KB, every tensor F32 at a 32-byte-aligned offset, ending at the last one', () => {
  const b = tinyLlamaGguf();
  const g = parse(b);
  expect(g.version).toBe(3);
  expect(b.length).toBeGreaterThan(200_000);
  expect(b.length).toBeLessThan(1_000_000);
  expect(g.kv.get('general.architecture')).toBe('llama');
  for (const k of [
    'context_length',
    'embedding_length',
    'block_count',
    'feed_forward_length',
    'attention.head_count',
    'attention.head_count_kv',
    'rope.dimension_count',
    'attention.layer_norm_rms_epsilon',
  ]) {
    expect(g.kv.has(`llama.${k}`)).toBe(true);
  }
  const tokens = g.kv.get('tokenizer.ggml.tokens') as string[];
  expect(g.kv.get('tokenizer.ggml.model')).toBe('gpt2');
  expect((g.kv.get('tokenizer.ggml.token_type') as number[]).length).toBe(tokens.length);
  expect(tokens[g.kv.get('tokenizer.ggml.eos_token_id') as number]).toBe('<|im_end|>');
  expect(g.kv.get('tokenizer.chat_template')).toContain('<|im_start|>assistant');
  const names = g.tensors.map((t) => t.name);
  expect(names).toEqual(
    expect.arrayContaining([
      'token_embd.weight',
      'output_norm.weight',
      'output.weight',
      'blk.1.attn_q.weight',
      'blk.1.ffn_down.weight',
    ]),
  );
  expect(names.filter((n) => n.startsWith('blk.0.'))).toHaveLength(9);
  let end = 0;
  for (const t of g.tensors) {
    expect(t.type).toBe(0);
    expect(t.offset % 32).toBe(0);
    end = Math.max(end, g.dataStart + t.offset + t.ne.reduce((a, n) => a * n, 4));
  }
  expect(end).toBe(b.length);
  expect(g.tensors.find((t) => t.name === 'token_embd.weight')?.ne).toEqual([64, tokens.length]);
});

test('the same seed gives the same bytes, another seed other weights', () => {
  expect(tinyLlamaGguf({ seed: 1 }).equals(tinyLlamaGguf({ seed: 1 }))).toBe(true);
  expect(tinyLlamaGguf({ seed: 1 }).equals(tinyLlamaGguf({ seed: 2 }))).toBe(false);
});
