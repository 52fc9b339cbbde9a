/** The gateway's JSON scan agrees with JSON.parse on what is JSON, finds the top-level fields, and bounds nesting. */
import { scanJsonObject, sliceValue } from '../../gateway/inference/json-scan';
import { checkRequest } from '../../gateway/inference/request-check';
import { engineRefusal } from '../../gateway/inference/proxy';
import { embeddingRefusal } from '../../lib/engines/registry';
import { quoteInput } from '../../lib/errors';

const WANTED = new Set(['model', 'stream', 'messages', 'n']);
const scan = (text: string, depth = 128): ReturnType<typeof scanJsonObject> =>
  scanJsonObject(Buffer.from(text), WANTED, depth);

describe('scanJsonObject', () => {
  const valid = [
    '{}',
    ' { } ',
    '{"model":"m"}',
    '{"model":"m\\u00e9\\n\\"q\\"","n":1}',
    '{"a":[1,-2.5e+3,0,0.1,1E9,true,false,null,{},[],"x"],"model":"m"}',
    '{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"h\\\\i"}]}],"stream":false}',
    '{"model":"a","model":"b"}',
    '{"mo\\u0064el":"escaped key"}',
    '{"x":{"model":"nested, not top-level"}}',
    '{"model":"π ☃ 😀"}',
  ];
  const invalid = [
    '',
    '   ',
    '[]',
    '"model"',
    '{',
    '{"model"}',
    '{"model":}',
    '{"model":"m",}',
    '{"model":"m"} x',
    '{"a":01}',
    '{"a":1.}',
    '{"a":-}',
    '{"a":.5}',
    '{"a":tru}',
    '{"a":"\\x"}',
    '{"a":"\\u12g4"}',
    '{"a":"tab\there"}',
    '{"a":[1,]}',
    '{"a":[1 2]}',
    '{"a" 1}',
    "{'a':1}",
    '{"a":1e}',
    '{"a":"unterminated}',
  ];

  test.each(valid)('accepts %s as JSON.parse does, with the same top-level values', (text) => {
    const r = scan(text);
    expect(r.kind).toBe('ok');
    if (r.kind !== 'ok') return;
    const parsed = JSON.parse(text) as Record<string, unknown>;
    for (const key of WANTED) {
      const s = r.fields.get(key);
      expect(s === undefined ? undefined : sliceValue(Buffer.from(text), s)).toEqual(parsed[key]);
    }
  });

  test.each(invalid)('refuses %j, which JSON.parse refuses or which is no object', (text) => {
    expect(scan(text).kind).toBe('error');
  });

  test('agrees with JSON.parse on 2,000 random mutations of a request', () => {
    const base =
      '{"model":"m","messages":[{"role":"user","content":"hi \\"you\\""}],"n":2,"stream":true,"x":[1.5e3,null,{"a":false}]}';
    const alphabet = '{}[]":,\\ 0123456789-+.eEtrufalsn';
    let seed = 42;
    const rand = (n: number): number => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % n;
    for (let k = 0; k < 2000; k++) {
      const chars = [...base];
      for (let m = 0; m <= rand(3); m++)
        chars.splice(rand(chars.length), rand(2), alphabet[rand(alphabet.length)] as string);
      const text = chars.join('');
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = undefined;
      }
      const isObject = typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed);
      expect({ text, ok: scan(text).kind === 'ok' }).toEqual({ text, ok: isObject });
    }
  });

  test('agrees with JSON.parse on long strings (skimmed, not read byte by byte) at every alignment', () => {
    // Long strings are skimmed a word at a time between the quotes and backslashes memchr finds: a stop byte in
    // any of a word's four places, at any offset of the body in its memory, must still end or refuse the string.
    const text = 'lorem ipsum dolor sit amet, '.repeat(12);
    const inserts = [
      '"',
      '\\',
      '\\n',
      '\\"',
      '\\u00e9',
      '\\x',
      '\\u12g4',
      '\\n\\t',
      '\\n\\x',
      '\\n"',
      '\\n\n',
      '\n',
      '\t',
      '\u001f',
      '\u007f',
      'é',
      '😀',
      ' ',
    ];
    const memory = Buffer.alloc(4096);
    let cases = 0;
    for (const ins of inserts)
      for (let at = 0; at < 80; at += 7)
        for (let offset = 0; offset < 4; offset++) {
          const content = text.slice(0, 40 + at) + ins + text.slice(40 + at);
          const body = `{"model":"m","messages":[{"role":"user","content":"${content}"}],"n":1}`;
          const len = memory.write(body, offset);
          const bytes = memory.subarray(offset, offset + len);
          let parsed: { messages?: unknown } | undefined;
          try {
            parsed = JSON.parse(body) as { messages?: unknown };
          } catch {
            parsed = undefined;
          }
          const r = scanJsonObject(bytes, WANTED, 128);
          expect({ body, ok: r.kind }).toEqual({ body, ok: parsed ? 'ok' : 'error' });
          if (r.kind === 'ok') expect(sliceValue(bytes, r.fields.get('messages') as never)).toEqual(parsed?.messages);
          cases++;
        }
    expect(cases).toBe(inserts.length * 12 * 4);
  });

  test('refuses a control character anywhere in a 220 KB prompt, naming where the string began', () => {
    const content = 'w1 w22 w333 '.repeat(20_000);
    const head = '{"model":"m","messages":[{"role":"user","content":';
    for (const at of [0, 1, 2, 3, 4097, content.length - 1]) {
      const bad = `${content.slice(0, at)}\u0001${content.slice(at + 1)}`;
      expect(scan(`${head}"${bad}"}]}`)).toEqual({
        kind: 'error',
        message: `the request body is not valid JSON: unexpected "\\"" at byte ${head.length}`,
      });
    }
    expect(scan(`${head}"${content}"}]}`).kind).toBe('ok');
    expect(scan(`${head}"${content}`)).toEqual({
      kind: 'error',
      message: `the request body is not valid JSON: unexpected "\\"" at byte ${head.length}`,
    });
  });

  test('refuses nesting deeper than the bound at the first byte past it, whatever follows', () => {
    expect(scan(`{"a":${'['.repeat(127)}${']'.repeat(127)}}`).kind).toBe('ok');
    expect(scan(`{"a":${'['.repeat(128)}${']'.repeat(128)}}`)).toEqual({
      kind: 'error',
      message: 'the request body nests deeper than 128 levels',
    });
    const t0 = performance.now();
    const bomb = Buffer.from(`{"model":"m","messages":${'['.repeat(5_000_000)}`);
    expect(scanJsonObject(bomb, WANTED, 128)).toEqual({
      kind: 'error',
      message: 'the request body nests deeper than 128 levels',
    });
    expect(performance.now() - t0).toBeLessThan(1000);
  });
});

describe('checkRequest', () => {
  const chat = (extra: Record<string, unknown>): Buffer =>
    Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], ...extra }));
  test.each([
    [{}, null],
    [
      {
        tools: [{ type: 'function', function: { name: 'f', parameters: {} } }],
        tool_choice: 'auto',
        temperature: 0.7,
        n: 1,
        stream: null,
      },
      null,
    ],
    [{ model: '' }, 'model: required, a non-empty string'],
    [{ model: 7 }, 'model: expected a string, got a number'],
    [{ messages: 'hi' }, 'messages: expected an array of messages, got a string'],
    [{ top_p: 2 }, 'top_p: expected a number from 0 to 1, got 2'],
    [{ temperature: -1 }, 'temperature: expected a number of at least 0, got -1'],
    [{ max_tokens: 1.5 }, 'max_tokens: expected a whole number from 0 to 2147483647, got 1.5'],
  ])('a chat request with %j: %s', (extra, problem) => {
    const r = checkRequest('/v1/chat/completions', chat(extra));
    expect(r).toEqual(
      problem === null
        ? expect.objectContaining({ kind: 'ok', model: (extra as { model?: string }).model ?? 'm' })
        : { kind: 'error', message: problem },
    );
  });

  test('each endpoint requires its own input field', () => {
    expect(checkRequest('/v1/completions', Buffer.from('{"model":"m"}'))).toEqual({
      kind: 'error',
      message: 'prompt: required, a string or an array',
    });
    expect(checkRequest('/v1/embeddings', Buffer.from('{"model":"m","input":["a"],"encoding_format":"hex"}'))).toEqual({
      kind: 'error',
      message: 'encoding_format: expected "float" or "base64", got "hex"',
    });
  });
});

describe('engineRefusal', () => {
  const answer = (message: string): Buffer =>
    Buffer.from(JSON.stringify({ error: { code: 500, message, type: 'server_error' } }));
  test("reads llama.cpp's 500s for a request it could not read as the request's fault, not the engine's", () => {
    expect(engineRefusal(answer('Failed to parse tools: Expected \'tools\' to be an array, got "x"'))).toMatch(
      /^Failed to parse tools/,
    );
    expect(engineRefusal(answer('[json.exception.type_error.302] type must be array, but is string'))).toMatch(
      /json\.exception/,
    );
    expect(engineRefusal(answer('CUDA error: out of memory'))).toBeNull();
    expect(engineRefusal(Buffer.from('<html>502</html>'))).toBeNull();
  });
});

describe('embeddingRefusal', () => {
  const p = (
    engine: 'sim' | 'llamacpp' | 'vllm' | 'sglang',
    args: string[] = [],
  ): { engine: typeof engine; args: string[] } => ({ engine, args });
  test('refuses only when every profile is known not to embed', () => {
    expect(embeddingRefusal([p('sim')])).toBe('the sim engine serves no embeddings');
    expect(embeddingRefusal([p('llamacpp', ['-c', '512'])])).toMatch(/--embeddings/);
    expect(embeddingRefusal([p('llamacpp', ['--embeddings'])])).toBeNull();
    expect(embeddingRefusal([p('vllm', ['--runner', 'generate'])])).toMatch(/--runner pooling/);
    expect(embeddingRefusal([p('vllm')])).toBeNull();
    expect(embeddingRefusal([p('vllm', ['--runner=pooling'])])).toBeNull();
    expect(embeddingRefusal([p('sglang')])).toBeNull();
    expect(embeddingRefusal([p('sim'), p('llamacpp', ['--embeddings'])])).toBeNull();
  });
});

describe('quoteInput', () => {
  test('cuts, quotes and escapes what a message echoes', () => {
    expect(quoteInput('sim-a')).toBe('"sim-a"');
    expect(quoteInput('a\u0000b\n\u001b[31m')).toBe('"a\\u0000b\\n\\u001b[31m"');
    expect(quoteInput('x'.repeat(10_000))).toBe(`"${'x'.repeat(64)}…"`);
    expect(quoteInput('😀'.repeat(100), 3)).toBe('"😀😀😀…"');
  });
});
