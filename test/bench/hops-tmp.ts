// temporary measurement tool (not committed): where a proxy's added time goes, from loopback packet timestamps
import { spawn } from 'node:child_process';
import { startEngine, startBareNode, startLlmgw, type BenchPath } from './peers-paths';
import { makeTarget, sendOne } from '../../lib/bench/request';
import { requestBodies } from '../../lib/bench/prompt';
import { newApiKey } from '../../lib/api-keys';

const MODEL = 'sim-peers';
const N = Number(process.argv[2] ?? 2000);
(async () => {
  const key = newApiKey();
  const e1 = await startEngine(MODEL, 200, key);
  const e2 = await startEngine(MODEL, 200, key);
  const bare = await startBareNode(e1.url, MODEL, key);
  const gw = await startLlmgw(e2.url, MODEL, [key], key);
  const port = (u: string) => Number(new URL(u).port);
  const ports = { e1: port(e1.url), e2: port(e2.url), bare: port(bare.url), gw: port(gw.url) };
  const paths: [string, BenchPath, number][] = [['bare', bare, ports.e1], ['llmgw', gw, ports.e2]];
  const targets = paths.map(([n, p]) => [n, makeTarget(new URL(`${p.url}/v1/chat/completions`), key, 1)] as const);
  const body = requestBodies({ model: MODEL, promptTokens: 1, maxTokens: 1, stream: false });
  for (let i = 0; i < 200; i++) for (const [, t] of targets) await sendOne(t, body(i), false, 30000);
  const filter = `tcp and (port ${ports.e1} or port ${ports.e2} or port ${ports.bare} or port ${ports.gw}) and (tcp[tcpflags] & tcp-push != 0)`;
  const td = spawn('tcpdump', ['-i', 'lo', '-n', '-tt', '-l', '-q', '--time-stamp-precision=micro', filter], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  td.stdout.on('data', (b) => (out += b));
  await new Promise((r) => setTimeout(r, 1500));
  for (let i = 0; i < N; i++) for (const [, t] of (i % 2 ? targets : [...targets].reverse())) await sendOne(t, body(i), false, 30000);
  await new Promise((r) => setTimeout(r, 1000));
  td.kill('SIGINT');
  await new Promise((r) => td.once('exit', r));
  // lines: 1700000000.123456 IP 127.0.0.1.A > 127.0.0.1.B: tcp LEN
  const pk = out.trim().split('\n').map((l) => {
    const m = /^(\d+\.\d+) IP [\d.]+\.(\d+) > [\d.]+\.(\d+): tcp (\d+)/.exec(l);
    return m ? { t: Number(m[1]) * 1e6, s: Number(m[2]), d: Number(m[3]), len: Number(m[4]) } : null;
  }).filter((x): x is NonNullable<typeof x> => x !== null && x.len > 0);
  const med = (a: number[]) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor(s.length / 2)] ?? NaN; };
  const p90 = (a: number[]) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor(s.length * 0.9)] ?? NaN; };
  for (const [name, p, e] of paths) {
    const P = port(p.url);
    const mine = pk.filter((x) => x.s === P || x.d === P || x.s === e || x.d === e);
    const inn: number[] = [], eng: number[] = [], outt: number[] = [], tot: number[] = [], nOut: number[] = [], nUp: number[] = [];
    let cur: { t1: number; up: number[]; ans: number[]; out: number[] } | null = null;
    const flush = () => {
      if (cur && cur.up.length && cur.ans.length && cur.out.length) {
        inn.push(cur.up[0]! - cur.t1); eng.push(cur.ans[cur.ans.length - 1]! - cur.up[cur.up.length - 1]!);
        outt.push(cur.out[cur.out.length - 1]! - cur.ans[cur.ans.length - 1]!); tot.push(cur.out[cur.out.length - 1]! - cur.t1);
        nOut.push(cur.out.length); nUp.push(cur.up.length);
      }
    };
    for (const x of mine) {
      if (x.d === P) { if (!cur || cur.out.length) { flush(); cur = { t1: x.t, up: [], ans: [], out: [] }; } }
      else if (!cur) continue;
      else if (x.d === e) cur.up.push(x.t);
      else if (x.s === e) cur.ans.push(x.t);
      else if (x.s === P) cur.out.push(x.t);
    }
    flush();
    console.log(`${name}: n=${inn.length} in p50 ${med(inn).toFixed(0)}us p90 ${p90(inn).toFixed(0)} | engine ${med(eng).toFixed(0)} | out p50 ${med(outt).toFixed(0)}us p90 ${p90(outt).toFixed(0)} | in+out ${med(inn.map((v, i) => v + outt[i]!)).toFixed(0)} | total ${med(tot).toFixed(0)} | pkts up ${med(nUp)} out ${med(nOut)}`);
  }
  for (const p of [gw, bare, e1, e2]) await p.stop();
  for (const [, t] of targets) t.agent.destroy();
})();
