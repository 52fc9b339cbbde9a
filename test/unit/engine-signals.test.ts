/**
 * Engine signals: each engine's /metrics read by the names its source uses (the sim's own output included), the
 * agent's gatherer against a real sim engine, and the least-outstanding pick weighed by them — a replica whose
 * engine queues gets fewer new requests, a stale or missing signal leaves the pick to the in-flight counts, and
 * admission still counts only the gateway's own requests against a replica's limit.
 */
import { RoutingTable } from '../../gateway/inference/routing';
import { parseSignals } from '../../lib/engines/signals';
import { startSimEngine, type SimEngine } from '../../lib/sim/server';
import type { ModelRouting } from '../../lib/types';
import { EngineSignals } from '../../workers/agent/engine-signals';
import { ready } from '../helpers/gateway';
import { waitFor } from '../helpers/wait';

describe('parseSignals: each engine by its own metric names', () => {
  test('vLLM v1 (kv_cache_usage_perc), labels per model summed', () => {
    const text = [
      '# HELP vllm:num_requests_waiting Number of requests waiting to be processed.',
      '# TYPE vllm:num_requests_waiting gauge',
      'vllm:num_requests_waiting{engine="0",model_name="qwen"} 3.0',
      'vllm:num_requests_waiting{engine="1",model_name="qwen"} 2.0',
      'vllm:num_requests_running{engine="0",model_name="qwen"} 8.0',
      'vllm:kv_cache_usage_perc{engine="0",model_name="qwen"} 0.42',
      'vllm:kv_cache_usage_perc{engine="1",model_name="qwen"} 0.61',
      'vllm:num_requests_waiting_by_reason{reason="capacity"} 99',
    ].join('\n');
    expect(parseSignals('vllm', text)).toEqual({ waiting: 5, running: 8, kvUsage: 0.61 });
  });
  test('vLLM before 0.10 (gpu_cache_usage_perc), a label value with a space', () => {
    const text =
      'vllm:num_requests_waiting{model_name="my model"} 0\nvllm:gpu_cache_usage_perc{model_name="my model"} 0.25\n';
    expect(parseSignals('vllm', text)).toEqual({ waiting: 0, running: null, kvUsage: 0.25 });
  });
  test('SGLang (--enable-metrics): num_queue_reqs, num_running_reqs, token_usage', () => {
    const text = [
      '# TYPE sglang:num_queue_reqs gauge',
      'sglang:num_queue_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0',
      'sglang:num_running_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0',
      'sglang:token_usage{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.28',
    ].join('\n');
    expect(parseSignals('sglang', text)).toEqual({ waiting: 7, running: 12, kvUsage: 0.28 });
  });
  test('llama.cpp (--metrics): requests_deferred, requests_processing; kv_cache_usage_ratio only where the build has it', () => {
    const current =
      'llamacpp:requests_processing 2\nllamacpp:requests_deferred 4\nllamacpp:tokens_predicted_total 42\n';
    expect(parseSignals('llamacpp', current)).toEqual({ waiting: 4, running: 2, kvUsage: null });
    expect(parseSignals('llamacpp', `${current}llamacpp:kv_cache_usage_ratio 0.63\n`)).toEqual({
      waiting: 4,
      running: 2,
      kvUsage: 0.63,
    });
  });
  test("another engine's text, or an engine without metrics, says nothing", () => {
    expect(parseSignals('sglang', 'vllm:num_requests_waiting 3\n')).toBeNull();
    expect(parseSignals('llamacpp', 'This server does not support metrics endpoint.')).toBeNull();
  });
});

describe("the agent's gatherer against a real sim engine", () => {
  let sim: SimEngine;
  afterAll(async () => sim?.close());

  test('reads its queue while prefill holds requests, and reports the age of each signal', async () => {
    // 1,000 uncached prompt tokens a second, one prompt at a time: a few requests queue behind the first.
    sim = await startSimEngine({
      model: 'm',
      host: '127.0.0.1',
      port: 0,
      rank: 0,
      world: 1,
      distHost: '127.0.0.1',
      distPort: 0,
      tokensPerSecond: 0,
      prefillTokensPerSecond: 1000,
      prefixCacheTokens: 0,
    });
    let now = 1_000_000;
    const g = new EngineSignals({ periodMs: 50, now: () => now });
    g.track('m-0', 'sim', `http://127.0.0.1:${sim.port}`);
    g.start();
    try {
      await waitFor(() => g.snapshot()['m-0'], { timeoutMs: 5000, what: 'a first signal' });
      expect(g.snapshot()['m-0']).toMatchObject({ waiting: 0, ageMs: 0 });
      const body = JSON.stringify({
        model: 'm',
        max_tokens: 1,
        messages: [{ role: 'user', content: 'word '.repeat(300) }],
      });
      const calls = Array.from({ length: 4 }, () =>
        fetch(`http://127.0.0.1:${sim.port}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body,
        }).then((r) => r.text()),
      );
      const seen = await waitFor(() => (g.snapshot()['m-0']?.waiting ?? 0) >= 2 && g.snapshot()['m-0'], {
        timeoutMs: 5000,
        intervalMs: 10,
        what: 'the sim reporting requests waiting for prefill',
      });
      expect(seen.kvUsage).not.toBeNull();
      g.stop();
      now += 1500;
      expect(g.snapshot()['m-0']?.ageMs).toBeGreaterThanOrEqual(1500);
      g.untrack('m-0', `http://127.0.0.1:${sim.port}`);
      expect(g.snapshot()).toEqual({});
      await Promise.all(calls);
    } finally {
      g.stop();
    }
  }, 30_000);
});

describe('the least-outstanding pick, weighed by engine signals', () => {
  const MODEL = 'm';
  const ids = ['m-0', 'm-1', 'm-2'];
  async function table(routing?: ModelRouting): Promise<RoutingTable> {
    const t = new RoutingTable(
      async () => ({
        models: [MODEL],
        replicas: ids.map((id, i) => ready(id, MODEL, `http://127.0.0.1:${20000 + i}`)),
        ...(routing ? { routing: { [MODEL]: routing } } : {}),
      }),
      { refreshMs: 60_000, defaultLimit: 4 },
    );
    await t.refresh();
    return t;
  }
  /** Picks `n` times, each request held (in flight) until the end; how many each replica got. */
  const spread = (
    t: RoutingTable,
    n: number,
    key: (i: number) => number | null = () => null,
  ): Record<string, number> => {
    const got: Record<string, number> = {};
    const held: string[] = [];
    for (let i = 0; i < n; i++) {
      const r = t.pick(MODEL, undefined, false, key(i));
      if (r.kind !== 'ok') throw new Error(r.kind);
      got[r.replica.id] = (got[r.replica.id] ?? 0) + 1;
      t.acquire(r.replica.id);
      held.push(r.replica.id);
    }
    for (const id of held) t.release(id);
    return got;
  };

  test('a replica whose engine reports a long queue gets fewer new requests; without signals the three share evenly', async () => {
    const t = await table();
    expect(spread(t, 30)).toEqual({ 'm-0': 10, 'm-1': 10, 'm-2': 10 });
    t.engineLoad.set('m-0', { waiting: 8, kvUsage: 0.5 }, Date.now());
    const got = spread(t, 30);
    // m-0 counts 8 outstanding before this gateway sends it anything: it gets a share only once the others hold 8.
    expect(got['m-0'] ?? 0).toBeLessThan(10);
    expect(got).toEqual({ 'm-0': 4, 'm-1': 13, 'm-2': 13 });
  });

  test('a stale signal is dropped and the pick is back to in-flight counts', async () => {
    const t = await table();
    t.engineLoad.set('m-0', { waiting: 50, kvUsage: null }, 1000);
    expect(spread(t, 6)['m-0'] ?? 0).toBe(0);
    expect(t.engineLoad.dropOlderThan(4000)).toBe(1);
    expect(spread(t, 6)).toEqual({ 'm-0': 2, 'm-1': 2, 'm-2': 2 });
  });

  test('between equally loaded replicas a KV cache that is nearly full loses to an emptier one', async () => {
    const t = await table();
    const now = Date.now();
    t.engineLoad.set('m-0', { waiting: 0, kvUsage: 0.97 }, now);
    t.engineLoad.set('m-1', { waiting: 0, kvUsage: 0.3 }, now);
    t.engineLoad.set('m-2', { waiting: 0, kvUsage: 0.35 }, now);
    // Idle, one request at a time: the cursor would hand every third to m-0; its full cache sends it on.
    const got: Record<string, number> = {};
    for (let i = 0; i < 9; i++) {
      const r = t.pick(MODEL);
      if (r.kind !== 'ok') throw new Error(r.kind);
      got[r.replica.id] = (got[r.replica.id] ?? 0) + 1;
    }
    expect(got['m-0'] ?? 0).toBe(0);
  });

  test("admission counts only this gateway's requests against the limit: a queued engine is not 'full'", async () => {
    const t = await table();
    t.engineLoad.set('m-0', { waiting: 100, kvUsage: 0.5 }, Date.now());
    t.engineLoad.set('m-1', { waiting: 100, kvUsage: 0.5 }, Date.now());
    t.engineLoad.set('m-2', { waiting: 100, kvUsage: 0.5 }, Date.now());
    const r = t.pick(MODEL, undefined, true);
    expect(r.kind).toBe('ok');
  });

  test("prefix affinity: a key's replica whose engine queues past the bounded load spills the key to the next", async () => {
    const t = await table({ policy: 'prefix' });
    const key = 12345;
    const home = t.pick(MODEL, undefined, false, key);
    if (home.kind !== 'ok') throw new Error(home.kind);
    expect(t.pick(MODEL, undefined, false, key)).toMatchObject({ replica: { id: home.replica.id } });
    t.engineLoad.set(home.replica.id, { waiting: 20, kvUsage: 0.5 }, Date.now());
    const moved = t.pick(MODEL, undefined, false, key);
    expect(moved).toMatchObject({ kind: 'ok' });
    expect(moved.kind === 'ok' && moved.replica.id).not.toBe(home.replica.id);
  });
});
