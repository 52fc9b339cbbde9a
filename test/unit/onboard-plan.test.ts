/** Onboarding's pure parts: host keys the accept-new way, what goes on a node, artefact names and platforms. */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  agentArgv,
  agentScript,
  engineProbes,
  fallbackServiceScript,
  NODE_PATHS,
  parseArtefactName,
  shQuote,
  systemdUnit,
  type AgentConfig,
} from '../../lib/onboard/plan';
import { STOP_AGENT } from '../../activities/ca/offboard';
import { doorPaths } from '../../workers/node-door/files';
import { platformOfMachine } from '../../lib/release';
import {
  decideHostKey,
  DEFAULT_HOST_KEY_ALGORITHMS,
  hostKeyOf,
  preferredHostKeyAlgorithms,
} from '../../lib/ssh/host-key';

/** A real key from ssh-keygen, its blob and what ssh-keygen -l says its fingerprint is. */
function keygen(type: 'ed25519' | 'ecdsa' | 'rsa'): { blob: Buffer; fingerprint: string } {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-hk-'));
  execFileSync('ssh-keygen', ['-q', '-t', type, '-N', '', '-f', join(dir, 'k')]);
  const blob = Buffer.from(readFileSync(join(dir, 'k.pub'), 'utf8').split(' ')[1]!, 'base64');
  const fingerprint = execFileSync('ssh-keygen', ['-l', '-E', 'sha256', '-f', join(dir, 'k.pub')], {
    encoding: 'utf8',
  }).split(' ')[1]!;
  return { blob, fingerprint };
}

describe('host keys, accept-new', () => {
  const ed = keygen('ed25519');
  const ec = keygen('ecdsa');

  test('fingerprints and types are what ssh-keygen says', () => {
    expect(hostKeyOf(ed.blob)).toMatchObject({ type: 'ssh-ed25519', fingerprint: ed.fingerprint });
    expect(hostKeyOf(ec.blob)).toMatchObject({ type: 'ecdsa-sha2-nistp256', fingerprint: ec.fingerprint });
  });

  test('unknown host: new; the key it is known by: known; any other key, of any type: changed', () => {
    const a = hostKeyOf(ed.blob);
    const b = hostKeyOf(ec.blob);
    expect(decideHostKey([], a)).toEqual({ kind: 'new' });
    expect(decideHostKey([a], a)).toEqual({ kind: 'known', key: a });
    expect(decideHostKey([a, b], b).kind).toBe('known');
    expect(decideHostKey([b], a)).toEqual({ kind: 'changed', known: [b] });
    expect(decideHostKey([hostKeyOf(keygen('ed25519').blob)], a).kind).toBe('changed');
  });

  test('the key types a host is known by are asked for first, so a second type is not taken for a change', () => {
    expect(preferredHostKeyAlgorithms([])).toEqual([...DEFAULT_HOST_KEY_ALGORITHMS]);
    const ecdsaFirst = preferredHostKeyAlgorithms([hostKeyOf(ec.blob)]);
    expect(ecdsaFirst[0]).toBe('ecdsa-sha2-nistp256');
    expect(ecdsaFirst.slice().sort()).toEqual([...DEFAULT_HOST_KEY_ALGORITHMS].sort());
    expect(preferredHostKeyAlgorithms([{ type: 'ssh-rsa', fingerprint: '', key: '' }]).slice(0, 3)).toEqual([
      'rsa-sha2-512',
      'rsa-sha2-256',
      'ssh-rsa',
    ]);
  });
});

describe('what onboarding puts on a node', () => {
  const config: AgentConfig = {
    nodeId: 'gpu-01',
    server: 'https://10.0.0.140:7443',
    advertiseHost: '10.0.0.5',
    door: true,
    fabrics: ['ib-b:mlx5_2,mlx5_3'],
    noGpu: false,
    nvidiaSmi: '/opt/nvidia/bin/nvidia-smi',
    bins: { llamacpp: '/opt/llama.cpp/llama-server' },
    caPath: '/usr/local/share/ca-certificates/llmgw-ca.crt',
  };

  test('the agent gets its node, server, certificate, door, fabric, driver and the engines on offer', () => {
    expect(agentArgv(config)).toEqual([
      '/opt/llmgw/current/bin/llmgw',
      'agent',
      '--node',
      'gpu-01',
      '--server',
      'https://10.0.0.140:7443',
      '--cert',
      '/etc/llmgw/node.crt',
      '--key',
      '/etc/llmgw/node.key',
      '--ca',
      '/usr/local/share/ca-certificates/llmgw-ca.crt',
      '--advertise-host',
      '10.0.0.5',
      '--door',
      '10.0.0.5:7460',
      '--state-dir',
      '/var/lib/llmgw/engines',
      '--llamacpp-bin',
      '/opt/llama.cpp/llama-server',
      '--fabric',
      'ib-b:mlx5_2,mlx5_3',
      '--nvidia-smi',
      '/opt/nvidia/bin/nvidia-smi',
    ]);
    expect(agentArgv({ ...config, noGpu: true })).toContain('--no-gpu');
    expect(agentArgv({ ...config, noGpu: true })).not.toContain('--nvidia-smi');
  });

  test("the node's door is on by default at <advertise-host>:7460, and off with door: false (--no-door)", () => {
    const argv = agentArgv({ ...config, advertiseHost: 'fd00::5' });
    expect(argv.slice(argv.indexOf('--door'), argv.indexOf('--door') + 2)).toEqual(['--door', '[fd00::5]:7460']);
    expect(agentArgv({ ...config, door: false })).not.toContain('--door');
    expect(agentScript({ ...config, door: false }, {})).not.toContain('--door');
    expect(agentScript(config, {})).toContain(' --door 10.0.0.5:7460 ');
  });

  test("the agent script sets PATH and Node's CA list, and quotes what needs it", () => {
    const s = agentScript(config, { NODE_EXTRA_CA_CERTS: '/usr/local/share/ca-certificates/llmgw-ca.crt' });
    expect(s).toMatch(/^#!\/bin\/sh\n/);
    expect(s).toContain('export PATH=/usr/local/sbin:');
    expect(s).toContain('export NODE_EXTRA_CA_CERTS=/usr/local/share/ca-certificates/llmgw-ca.crt');
    expect(s).toMatch(/\nexec \/opt\/llmgw\/current\/bin\/llmgw agent --node gpu-01 /);
    expect(shQuote("it's here")).toBe("'it'\\''s here'");
    expect(execFileSync('sh', ['-c', `printf %s ${shQuote("a b'c $HOME")}`], { encoding: 'utf8' })).toBe("a b'c $HOME");
  });

  test('the systemd unit runs the agent script, trusts the CA for Node, and leaves engines running when it stops', () => {
    const u = systemdUnit('gpu-01', ['Environment=NODE_EXTRA_CA_CERTS=/usr/local/share/ca-certificates/llmgw-ca.crt']);
    expect(u).toContain('ExecStart=/etc/llmgw/agent.sh');
    expect(u).toContain('Environment=NODE_EXTRA_CA_CERTS=');
    expect(u).toContain('KillMode=process');
    expect(u).toContain('WantedBy=multi-user.target');
  });

  test("removal stops the node's door by the record the door writes in the agent's state dir; its script is valid sh", () => {
    expect(NODE_PATHS.doorRecord).toBe(doorPaths(NODE_PATHS.stateDir).record);
    expect(STOP_AGENT).toContain(NODE_PATHS.doorRecord);
    execFileSync('sh', ['-n', '-c', STOP_AGENT]);
  });

  test('the start script for machines without systemd is valid sh with start, stop, restart and status', () => {
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-svc-'));
    const file = join(dir, 'agent-service');
    writeFileSync(file, fallbackServiceScript());
    execFileSync('sh', ['-n', file]);
    expect(fallbackServiceScript()).toMatch(
      /start\) start ;;[\s\S]*stop\) stop ;;[\s\S]*restart\) stop; start ;;[\s\S]*status\)/,
    );
  });

  test("each configured engine has a probe: the sim engine started for real, the others' own programs", () => {
    expect(engineProbes({ bins: {} }).map((p) => p.command)).toEqual([
      '/opt/llmgw/current/bin/llmgw engine-probe sim --timeout 60',
    ]);
    expect(
      engineProbes({ bins: { llamacpp: '/opt/l/llama-server', vllm: '/v/bin/vllm', sglang: '/s/bin/python' } }).map(
        (p) => [p.engine, p.command, p.flag],
      ),
    ).toEqual([
      ['sim', '/opt/llmgw/current/bin/llmgw engine-probe sim --timeout 60', '--binary'],
      ['llamacpp', '/opt/l/llama-server --version', '--llamacpp-bin'],
      ['vllm', '/v/bin/vllm --version', '--vllm-bin'],
      ['sglang', "/s/bin/python -c 'import sglang; print(sglang.__version__)'", '--sglang-python'],
    ]);
  });
});

describe('release artefacts', () => {
  test('names: llmgw-<version>-<platform>.tar.gz, nothing else', () => {
    expect(parseArtefactName('/x/dist/llmgw-0.1.0-linux-x64.tar.gz')).toEqual({
      name: 'llmgw-0.1.0-linux-x64',
      version: '0.1.0',
      platform: 'linux-x64',
    });
    expect(parseArtefactName('llmgw-1.2.3-rc.1-linux-arm64.tar.gz')).toEqual({
      name: 'llmgw-1.2.3-rc.1-linux-arm64',
      version: '1.2.3-rc.1',
      platform: 'linux-arm64',
    });
    expect(parseArtefactName('/x/llmgw.tar.gz')).toBeNull();
    expect(parseArtefactName('/x/llmgw-0.1.0-darwin-arm64.tar.gz')).toBeNull();
    expect(parseArtefactName('/work/main')).toBeNull();
  });

  test("a machine's uname -m names the artefact that runs there", () => {
    expect(platformOfMachine('x86_64\n')).toBe('linux-x64');
    expect(platformOfMachine('aarch64')).toBe('linux-arm64');
    expect(platformOfMachine('riscv64')).toBeNull();
  });
});
