/** `llmgw doctor`: run the node checks here and print them (or --json); exit 1 when any check fails. */
import { doctorFailed, formatDoctor, runDoctor } from '../lib/doctor';
import { ENGINES, type EngineName } from '../lib/types';
import { parse, UsageError } from './args';

const USAGE = `
llmgw doctor [options]

Checks what this node needs before it joins: nvidia-smi, CPU flags, libgomp, the declared fabrics
against the adapters, the subnet manager on each fabric, GPUDirect RDMA, Fabric Manager (NVSwitch
systems) and IMEX (NVLink multi-node systems). Each check passes, warns or fails with its fix in one
line; the exit status is 1 when any check fails. Run as root for the subnet-manager check (sminfo).
Take the same flags as the node's agent. See docs/fabrics.md.

  --fabric NAME[:dev,dev]  a fabric this node is on (repeatable), as given to llmgw agent
  --nvidia-smi PATH        nvidia-smi to run (default: nvidia-smi on PATH)
  --no-gpu                 this node has no GPU: do not run nvidia-smi
  --sminfo PATH            sminfo from infiniband-diags (default: sminfo on PATH)
  --ib-root PATH           sysfs root holding class/infiniband and module/ (default /sys)
  --cpuinfo PATH           (default /proc/cpuinfo)
  --root PATH              read /proc, /etc, /dev and library paths under PATH (default /); commands still run here
  --engines LIST           engines this node offers; libgomp is needed only with llamacpp (default: check it)
  --json                   the results as JSON: [{ id, status, summary, fix }]
`;

/** Entry for `llmgw doctor`. */
export async function doctorCommand(
  argv: string[],
  out: (s: string) => void = (s) => process.stdout.write(s),
): Promise<void> {
  const { values } = parse(argv, {
    usage: USAGE,
    options: {
      fabric: { type: 'string', multiple: true },
      'nvidia-smi': { type: 'string' },
      'no-gpu': { type: 'boolean' },
      sminfo: { type: 'string' },
      'ib-root': { type: 'string' },
      cpuinfo: { type: 'string' },
      root: { type: 'string' },
      engines: { type: 'string' },
      json: { type: 'boolean' },
    },
  });
  const engines = values.engines?.split(',').filter(Boolean);
  for (const e of engines ?? [])
    if (!(ENGINES as readonly string[]).includes(e))
      throw new UsageError(`--engines: unknown engine "${e}"; known: ${ENGINES.join(', ')}`);
  const root = values.root ?? '/';
  const results = await runDoctor({
    nvidiaSmi: values['no-gpu'] ? null : (values['nvidia-smi'] ?? 'nvidia-smi'),
    fabrics: values.fabric ?? [],
    root,
    sysRoot: values['ib-root'] ?? (root === '/' ? '/sys' : `${root.replace(/\/$/, '')}/sys`),
    ...(values.cpuinfo ? { cpuinfo: values.cpuinfo } : {}),
    sminfo: values.sminfo ?? 'sminfo',
    ...(engines ? { engines: engines as EngineName[] } : {}),
  });
  out(values.json ? `${JSON.stringify(results, null, 2)}\n` : formatDoctor(results));
  if (doctorFailed(results)) process.exitCode = 1;
}
