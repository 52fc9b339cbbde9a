/** Every command's --help teaches (usage on stdout, exit 0); a missing or unknown command exits 2 and says so. */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';

const BIN = join(__dirname, '../../bin/llmgw.js');
const run = (...args: string[]): { status: number | null; stdout: string; stderr: string } => {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', timeout: 30_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
};

describe('llmgw --help', () => {
  test.each([
    [['--help'], /llmgw cluster/],
    [['cluster', '--help'], /--state-dir DIR/],
    [['ctl', '--help'], /fabrics .*subnet manager[\s\S]*scale MODEL N/],
    [['ctl', 'fabrics', '--help'], /failing doctor checks/],
    [['ctl', 'nodes', '--help'], /scale MODEL N/],
    [['ctl', '--help'], /engine-check ENGINE/],
    [['ctl', 'engine-check', '--help'], /--help-output FILE[\s\S]*word boundary[\s\S]*--bin PATH/],
    [['ca', '--help'], /issue --node ID/],
    [['db', '--help'], /migrate[\s\S]*status[\s\S]*mysql.autoMigrate: false/],
    [['control-plane', '--help'], /--config FILE/],
    [['ca-worker', '--help'], /llmgw-ca[\s\S]*--ca-dir DIR[\s\S]*--crl-days N/],
    [['gateway', '--help'], /--config FILE/],
    [['agent', '--help'], /--fabric NAME[\s\S]*--sminfo PATH/],
    [['agent', '--help'], /--server URL \[--server URL …\][\s\S]*comma list[\s\S]*control plane failover/],
    [['doctor', '--help'], /--sminfo PATH[\s\S]*--json/],
    [['sim-engine', '--help'], /--dist-port DP[\s\S]*--help/],
    [['bench', '--help'], /--concurrency N[\s\S]*--prompt-tokens N[\s\S]*--ttft-budget MS[\s\S]*--json/],
    [['onboard-node', '--help'], /--node ID[\s\S]*--binary ARTEFACT[\s\S]*--ssh-timeout S/],
    [['ctl', '--help'], /follow WORKFLOW-ID[\s\S]*forget-host-key NODE/],
    [['engine-probe', '--help'], /engine-probe sim/],
  ])('llmgw %j prints its usage and exits 0', (args, usage) => {
    const r = run(...args);
    expect(r.stderr).toBe('');
    expect(r.stdout).toMatch(usage);
    expect(r.status).toBe(0);
  });

  test('an unknown command exits 2 and names it', () => {
    const r = run('frobnicate');
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/unknown command "frobnicate"/);
  });

  test('onboard-node without --binary refuses, rather than copy the working tree', () => {
    const r = run('onboard-node', '--node', 'gpu-01', '--addr', '10.0.0.5', '--server', 'https://10.0.0.1:7443');
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(
      /LLMGW_ARTEFACT_INVALID: --binary ARTEFACT is required: build one with npm run release[\s\S]*never copies/,
    );
  });

  test('ctl with no command exits 2 and shows an example', () => {
    const r = run('ctl');
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/ctl needs a COMMAND, e\.g\. llmgw ctl nodes/);
  });
});
