/**
 * `npm run bench:cli`: how long `llmgw ctl nodes` takes, whole, against a live control plane — process start, the
 * CLI's modules, server.yaml, the mTLS handshake, one GET, the table — from the compiled build (npm run build) and
 * through tsx (LLMGW_NO_BUILD=1), interleaved in one run so both see the same machine. Prints the median and p90
 * wall time and the CPU each run used (user + system, from the child's rusage), beside a bare `node -e 0`.
 *
 *   npm run bench:cli [-- --runs 15]
 *
 * Goal (issue 22): ≤ 0.3 s wall for `ctl nodes` from the build on this 2-core machine, idle.
 */
import '../helpers/bench-help'; // --help: the comment above
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { stringify } from 'yaml';
import { startControlPlane } from '../../workers/control/index';
import { workflowBundlePath } from '../helpers/bundle';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { closeCertClients, writeOperatorCert } from '../helpers/tls';

const ROOT = resolve(__dirname, '../..');

interface Sample {
  wallMs: number;
  cpuMs: number;
}

/** Runs one command as a child (asynchronously: this process serves the control plane it calls). */
function timed(argv: string[], env: NodeJS.ProcessEnv): Promise<Sample> {
  const t0 = process.hrtime.bigint();
  const child = spawn(process.execPath, ['-e', SHIM, ...argv], { env, cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  return new Promise((done, fail) => {
    child.on('error', fail);
    child.on('close', (status) => {
      const wallMs = Number(process.hrtime.bigint() - t0) / 1e6;
      const m = /cpu-us (\d+)/.exec(stderr);
      if (status !== 0 || !m) fail(new Error(`${argv.join(' ')} exited ${status}: ${stderr}`));
      else done({ wallMs, cpuMs: Number(m[1]) / 1000 });
    });
  });
}

/** Runs the script given as argv[1] (argv as if node had been given it) and prints its own CPU time on stderr at exit. */
const SHIM = `
const script = process.argv[1];
process.on('exit', () => { const u = process.resourceUsage(); process.stderr.write('cpu-us ' + (u.userCPUTime + u.systemCPUTime) + '\\n'); });
if (script !== '-') require(script);
`;

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { runs: { type: 'string', default: '15' } } });
  const runs = Number(values.runs);
  const built = spawnSync('npm', ['run', '--silent', 'build'], { cwd: ROOT, encoding: 'utf8' });
  if (built.status !== 0) throw new Error(`npm run build failed: ${built.stderr}`);
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-bench-cli-'));
  const temporal = await startTestTemporal();
  const config = await testConfig({ temporalAddress: temporal.address, mysqlUrl: testMysqlUrl(), catalog: [] });
  const cp = await startControlPlane({
    config,
    workflowBundle: { codePath: await workflowBundlePath() },
    log: () => {},
  });
  try {
    await writeOperatorCert(config, cp.store);
    const file = join(dir, 'server.yaml');
    writeFileSync(file, stringify(config));
    const bin = join(ROOT, 'bin/llmgw.js');
    const kinds: { name: string; argv: string[]; env: NodeJS.ProcessEnv }[] = [
      { name: 'node -e 0 (the floor)', argv: ['-'], env: process.env },
      { name: 'ctl nodes, build', argv: [bin, 'ctl', 'nodes', '--config', file], env: process.env },
      {
        name: 'ctl nodes, tsx',
        argv: [bin, 'ctl', 'nodes', '--config', file],
        env: { ...process.env, LLMGW_NO_BUILD: '1' },
      },
      { name: 'version, build', argv: [bin, 'version'], env: process.env },
    ];
    const samples = new Map<string, Sample[]>(kinds.map((k) => [k.name, []]));
    for (const k of kinds) await timed(k.argv, k.env); // warm the page cache and tsx's cache
    for (let i = 0; i < runs; i++) for (const k of kinds) samples.get(k.name)!.push(await timed(k.argv, k.env));
    const load = (await import('node:os')).loadavg()[0]!.toFixed(2);
    process.stdout.write(`llmgw CLI start, ${runs} runs each, interleaved (1-min load ${load})\n`);
    process.stdout.write(
      `${'command'.padEnd(24)} ${'wall p50'.padStart(9)} ${'wall p90'.padStart(9)} ${'CPU p50'.padStart(9)}\n`,
    );
    for (const k of kinds) {
      const s = samples.get(k.name)!;
      const f = (ms: number): string => `${ms.toFixed(0)} ms`.padStart(9);
      process.stdout.write(
        `${k.name.padEnd(24)} ${f(
          quantile(
            s.map((x) => x.wallMs),
            0.5,
          ),
        )} ${f(
          quantile(
            s.map((x) => x.wallMs),
            0.9,
          ),
        )} ${f(
          quantile(
            s.map((x) => x.cpuMs),
            0.5,
          ),
        )}\n`,
      );
    }
  } finally {
    await cp.close();
    await closeCertClients();
    await temporal.stop();
    await dropDatabase(config.mysql.url);
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
