/**
 * Onboarding waits for the node's engines: server.yaml names llama.cpp as the operator's own binary, whose
 * llama-server answers onboarding's probe (`--version`) but whose ggml-rpc-server cannot load (no libgomp.so.1 on
 * the node, the reference's libgomp story). Only the agent's full probe, after registration, runs it: onboarding
 * waits for that probe and fails with the loader's own words. Real OpenSSH test host, agent from the artefact.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { QUEUES, workflowIds } from '../../lib/names';
import { fakeGpu, startOnboardCluster, type OnboardCluster } from '../helpers/onboard-cluster';

const NODE = 'node-rpc';
const HELP = join(__dirname, '../fixtures/engine-help/llamacpp-b11434.txt');

/** A real program that needs libgomp (OpenMP), as a ggml-rpc-server built with OpenMP does. */
function openmpBinary(): Buffer {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-omp-rpc-'));
  writeFileSync(
    join(dir, 'main.c'),
    '#include <omp.h>\n#include <stdio.h>\nint main(void) { printf("%d\\n", omp_get_max_threads()); return 0; }\n',
  );
  execFileSync('gcc', ['-fopenmp', '-o', join(dir, 'ggml-rpc-server'), join(dir, 'main.c')]);
  return readFileSync(join(dir, 'ggml-rpc-server'));
}

describe('onboarding waits for the engines server.yaml names', () => {
  let c: OnboardCluster;

  beforeAll(async () => {
    c = await startOnboardCluster({ catalog: [], engines: { sim: '1.0.0', llamacpp: '' } });
  }, 180_000);

  afterAll(async () => {
    await c?.close();
  }, 60_000);

  test("an engine only the agent's probe runs fails onboarding, after registration, in its own words", async () => {
    const host = await c.lan.startHost({
      nodeId: NODE,
      authorizedKeys: [c.sshPub],
      remove: ['/usr/lib/x86_64-linux-gnu/libgomp.so.1', '/usr/lib/aarch64-linux-gnu/libgomp.so.1'],
    });
    await fakeGpu(host);
    const help = readFileSync(HELP, 'utf8').replace(/^.*\n/, '');
    const server = `#!/bin/sh\ncase "$1" in\n  --version) echo "version: 11434 (abc1234)" ;;\n  --help) cat /opt/llama.cpp/help.txt ;;\n  *) echo "llama-server stand-in: $*" >&2; exit 1 ;;\nesac\n`;
    for (const [file, content, mode] of [
      ['llama-server', server, '755'],
      ['help.txt', help, '644'],
    ] as const) {
      expect(
        (
          await host.exec(
            `mkdir -p /opt/llama.cpp && cat > /opt/llama.cpp/${file} && chmod ${mode} /opt/llama.cpp/${file}`,
            { stdin: content },
          )
        ).code,
      ).toBe(0);
    }
    expect(
      (
        await host.exec('base64 -d > /opt/llama.cpp/ggml-rpc-server && chmod 755 /opt/llama.cpp/ggml-rpc-server', {
          stdin: openmpBinary().toString('base64'),
        })
      ).code,
    ).toBe(0);
    const handle = await c.cp.client.workflow.start('onboardNode', {
      taskQueue: QUEUES.control,
      workflowId: workflowIds.onboard(NODE),
      args: [c.input(NODE, host.address, { bins: { llamacpp: '/opt/llama.cpp/llama-server' } })],
    });
    const err = await handle.result().then(
      () => null,
      (e: Error & { cause?: Error & { type?: string } }) => e.cause,
    );
    console.log(`onboarding ${NODE} failed as it should:\n${err?.message}`);
    expect(err?.type).toBe('LLMGW_ENGINE_PROBE_FAILED');
    expect(err?.message).toContain(
      `failed at step "install and probe its engines": engine llamacpp b11434 cannot run on ${NODE}: /opt/llama.cpp/ggml-rpc-server --help: failed (exit 127)`,
    );
    expect(err?.message).toContain(
      'error while loading shared libraries: libgomp.so.1: cannot open shared object file',
    );
    // The earlier steps passed: onboarding's own probe of llama-server, the agent's start and its registration.
    const steps = ((await handle.query('onboardProgress')) as { steps: { id: string; state: string }[] }).steps;
    expect(steps.map((s) => `${s.id} ${s.state}`)).toEqual([
      'waitForSsh done',
      'learnHostKey done',
      'issueCertificate done',
      'install done',
      'probeEngines done',
      'startAgent done',
      'waitRegistered done',
      'waitEngines failed',
    ]);
    // ctl nodes says the same below its table.
    const nodes = await c.cli(['ctl', 'nodes', '--config', c.configFile]);
    expect(nodes.out).toMatch(
      new RegExp(`${NODE}: llamacpp b11434 not offered: /opt/llama.cpp/ggml-rpc-server --help: failed \\(exit 127\\)`),
    );
    await host.stop();
  }, 180_000);
});
