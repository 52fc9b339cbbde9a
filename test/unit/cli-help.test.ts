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
    [['db', '--help'], /migrate[\s\S]*status[\s\S]*grants ROLE[\s\S]*mysql.autoMigrate: false/],
    [
      ['db', 'grants', '--help'],
      /controlPlane[\s\S]*proxmoxWorker[\s\S]*migrate user first[\s\S]*--host HOST[\s\S]*--password-file/,
    ],
    [
      ['init', '--help'],
      /control-plane, gateway, ca-worker, proxmox-worker[\s\S]*REQUIRED[\s\S]*--force[\s\S]*--check FILE/,
    ],
    [['control-plane', '--help'], /--config FILE/],
    [['ca-worker', '--help'], /llmgw-ca[\s\S]*--ca-dir DIR[\s\S]*--crl-days N/],
    [['gateway', '--help'], /--config FILE/],
    [['agent', '--help'], /--fabric NAME[\s\S]*--sminfo PATH/],
    [['agent', '--help'], /--server URL \[--server URL …\][\s\S]*comma list[\s\S]*control plane failover/],
    [['doctor', '--help'], /--sminfo PATH[\s\S]*--json/],
    [['sim-engine', '--help'], /--dist-port DP[\s\S]*--help/],
    [['sim-fleet', '--help'], /127.1.x.y[\s\S]*--first I[\s\S]*--replicas-per-node R/],
    [['bench', '--help'], /--concurrency N[\s\S]*--prompt-tokens N[\s\S]*--ttft-budget MS[\s\S]*--json/],
    [['onboard-node', '--help'], /--node ID[\s\S]*--binary ARTEFACT[\s\S]*--ssh-timeout S/],
    [['ctl', '--help'], /follow WORKFLOW-ID[\s\S]*forget-host-key NODE/],
    [['engine-probe', '--help'], /engine-probe sim/],
    [['ctl', '--help'], /keys create\|list\|revoke\|usage/],
    [
      ['ctl', 'keys', '--help'],
      /--models a,b[\s\S]*--rpm N[\s\S]*0 is refused[\s\S]*--expires DATE[\s\S]*usage \[NAME\]/,
    ],
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

  test.each([
    [['ctl', 'keys'], /ctl keys needs a SUBCOMMAND: create, list, revoke or usage/],
    [['ctl', 'keys', 'create'], /ctl keys create needs a NAME/],
    [['ctl', 'keys', 'create', 'a', '--rpm', '0'], /--rpm 0 would make a key that can never be used/],
    [['ctl', 'keys', 'create', 'a', '--tpm', '1.5'], /--tpm "1.5" is not a whole number/],
    [['ctl', 'keys', 'create', 'Bad Name'], /key name "Bad Name" is not valid/],
    [['ctl', 'keys', 'create', 'a', '--expires', '2001-01-01'], /--expires 2001-01-01 is in the past/],
    [['ctl', 'keys', 'create', 'a', '--expires', 'tomorrow'], /--expires "tomorrow" is not a date/],
    [['ctl', 'keys', 'create', 'a', '--models', 'x,,y'], /--models "x,,y" has an empty name/],
    [['ctl', 'keys', 'list', '--rpm', '3'], /ctl keys list takes no --rpm/],
  ])('llmgw %j refuses before it sends anything (exit 2)', (args, message) => {
    const r = run(...args);
    expect(r.stderr).toMatch(message);
    expect(r.status).toBe(2);
  });

  test('ctl with no command exits 2 and shows an example', () => {
    const r = run('ctl');
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/ctl needs a COMMAND, e\.g\. llmgw ctl nodes/);
  });
});
