/** `llmgw ctl engine-check ENGINE`: every flag llmgw would give the engine, checked against the engine's own help. */
import { existsSync, readFileSync } from 'node:fs';
import { PINNED_ENGINES } from '../../config/defaults';
import { loadServerConfig } from '../../config/load';
import { checkFailed, checkFlags, formatCheck, widestFlags } from '../../lib/engines/check';
import { binPrograms, programHelp } from '../../lib/engines/help';
import { ENGINE_SPECS, INSTALLED_ENGINES, type EngineProgram, type InstalledEngine } from '../../lib/engines/registry';
import type { ModelSpec } from '../../lib/types';
import { parse, UsageError } from '../args';
import type { CtlVerb } from './verb';

/** The engines checked: every one llmgw installs (sim is llmgw's own). */
const CHECKED = INSTALLED_ENGINES;
type CheckedEngine = InstalledEngine;

export const ENGINE_CHECK_USAGE = `
llmgw ctl engine-check ENGINE [--help-output FILE | --bin PATH] [--config server.yaml]

Builds the widest command llmgw would ever give ENGINE (${CHECKED.slice(0, -1).join(', ')} or ${CHECKED.at(-1)}) — every rank of a
multi-node replica, llmgw's own flags and each catalog profile's args — and checks every flag against the
engine's own help, on a word boundary (--port is not satisfied by --port-range). Exits 1 listing each
missing flag and who uses it (llmgw, or model/profile); warns when the help does not document --help
itself, the sign it was cut short. No GPU needed. See docs/engines.md.

  --help-output FILE      the engine's whole help, saved from llama-server --help 2>&1, vllm serve --help=all
                          or python -m sglang.launch_server --help (a value that is not a file and spans lines
                          is taken as the text itself: --help-output "$(llama-server --help 2>&1)")
  --rpc-help-output FILE  llamacpp: ggml-rpc-server --help 2>&1, for the worker ranks' flags
  --bin PATH              run the help here instead: llama-server (ggml-rpc-server beside it), vllm (as
                          VLLM_TARGET_DEVICE=cpu vllm serve --help=all), or SGLang's python
  --config FILE           server.yaml whose catalog is checked (default: built-in local-cluster defaults)
`;

/** The help text from a file, or the value itself when it is no file but several lines of text. */
function helpText(value: string, flag: string): string {
  if (existsSync(value)) return readFileSync(value, 'utf8');
  if (value.includes('\n')) return value;
  throw new UsageError(`${flag}: no file ${value}`);
}

/** Runs a program's help the way each engine gives it whole (lib/engines/help.ts); a failed run is a usage error naming why. */
export async function runHelp(engine: CheckedEngine, program: EngineProgram, bin: string): Promise<string> {
  const prefix = binPrograms(engine, bin)[program];
  if (!prefix) throw new UsageError(`${engine} has no program ${program}`);
  const r = await programHelp(engine, program, prefix);
  if (r.kind === 'failed') throw new UsageError(`${r.command}: ${r.why}`);
  return r.text;
}

/** Checks `engine` against its help; returns the report and whether a flag was missing. */
export function engineCheck(o: {
  engine: CheckedEngine;
  version: string;
  catalog: readonly ModelSpec[];
  helpOf: (p: EngineProgram) => string | null;
}): { report: string; failed: boolean } {
  const checks = checkFlags(widestFlags(o.engine, o.catalog), o.helpOf);
  const uses = o.catalog.some((m) => m.profiles.some((p) => p.engine === o.engine));
  let note = uses ? '' : `no catalog profile uses ${o.engine}: checked llmgw's own flags\n`;
  const caveat = ENGINE_SPECS[o.engine].helpCaveat;
  const help = caveat ? o.helpOf(caveat.program) : null;
  if (caveat && help !== null && caveat.applies(help)) note += `warning: ${caveat.warning}\n`;
  return { report: note + formatCheck(o.engine, o.version, checks), failed: checkFailed(checks) };
}

/** Entry for `llmgw ctl engine-check`. */
export async function engineCheckCommand(
  argv: string[],
  out: (s: string) => void = (s) => process.stdout.write(s),
): Promise<void> {
  const { values, positionals } = parse(argv, {
    usage: ENGINE_CHECK_USAGE,
    allowPositionals: true,
    options: {
      'help-output': { type: 'string' },
      'rpc-help-output': { type: 'string' },
      bin: { type: 'string' },
      config: { type: 'string' },
    },
  });
  const engine = positionals[0];
  if (!engine || !(CHECKED as readonly string[]).includes(engine)) {
    throw new UsageError(
      `ctl engine-check needs an ENGINE: one of ${CHECKED.join(', ')}${engine ? ` (got "${engine}")` : ''}, e.g. llmgw ctl engine-check vllm --bin vllm`,
    );
  }
  const e = engine as CheckedEngine;
  if (values['help-output'] !== undefined && values.bin !== undefined)
    throw new UsageError('give --help-output or --bin, not both');
  if (values['help-output'] === undefined && values.bin === undefined)
    throw new UsageError(`ctl engine-check ${e} needs --help-output FILE or --bin PATH`);
  const config = loadServerConfig(values.config);
  const given = values['help-output'] === undefined ? null : helpText(values['help-output'], '--help-output');
  const rpcGiven =
    values['rpc-help-output'] === undefined ? null : helpText(values['rpc-help-output'], '--rpc-help-output');
  const bin = values.bin;
  const ran = new Map<EngineProgram, string>();
  if (bin !== undefined)
    for (const p of ENGINE_SPECS[e].programs)
      if (!(p === 'ggml-rpc-server' && rpcGiven !== null)) ran.set(p, await runHelp(e, p, bin));
  const helpOf = (p: EngineProgram): string | null => {
    if (p === 'ggml-rpc-server' && rpcGiven !== null) return rpcGiven;
    if (bin !== undefined) return ran.get(p) ?? null;
    return p === 'ggml-rpc-server' ? null : given;
  };
  const version = config.engines[e] || PINNED_ENGINES[e];
  const { report, failed } = engineCheck({ engine: e, version, catalog: config.catalog, helpOf });
  out(report);
  if (failed) process.exitCode = 1;
}

/** `ctl engine-check` (its own options and --help) */
export const engineCheckVerb: CtlVerb = {
  help: `  engine-check ENGINE [--help-output FILE | --bin PATH]
                              check every flag llmgw would give ENGINE (${CHECKED.join(', ')}) against its help`,
  run: (ctx) => engineCheckCommand([ctx.verb, ...ctx.positionals], ctx.out),
  raw: engineCheckCommand,
};
