/**
 * engine-check: the widest command llmgw would give an engine, flag by flag, against the engine's own help.
 * Engines rename and remove flags between versions, and the failure otherwise arrives minutes into a model load.
 */
import type { EngineName, ModelSpec, Profile } from '../types';
import type { ShardLaunch } from './launch';
import { ENGINE_SPECS, type EngineProgram } from './registry';

/** Who puts a flag on the command line: llmgw itself, or a catalog profile's own args (`model/profile`). */
export const LLMGW = 'llmgw';

/** Each program the engine runs -> each flag it is given -> who gives it. */
export type WidestFlags = Map<EngineProgram, Map<string, Set<string>>>;

/** The flags (`--name` or `-n`) among a command's arguments; `--name=value` counts as `--name`, negative numbers are values. */
export function flagsOf(args: readonly string[]): string[] {
  return args.filter((a) => /^--?[A-Za-z]/.test(a)).map((a) => a.split('=')[0] ?? a);
}

/** A launch for rank `rank` of a `world`-node replica with every optional part filled, so every flag appears. */
function widestLaunch(profile: Profile, rank: number, world: number): ShardLaunch {
  const peers = Array.from({ length: world }, (_, r) => ({ host: `10.0.0.${r + 1}`, port: 20000 + r }));
  return {
    model: 'engine-check',
    source: '/models/engine-check',
    modelPath: '/models/engine-check',
    profile,
    rank,
    world,
    host: peers[rank]?.host ?? '10.0.0.1',
    port: peers[rank]?.port ?? 20000,
    distHost: '10.0.0.1',
    distPort: 29500,
    fabric: 'ib-a',
    gpus: Array.from({ length: Math.max(profile.gpusPerNode, 1) }, (_, i) => i),
    gpuLockDir: '/var/lib/llmgw/engines/gpu-locks',
    peers,
  };
}

/** The arguments after the interpreter's own: `python -m sglang.launch_server` is python's `-m`, not SGLang's. */
function engineArgs(program: EngineProgram, args: string[]): string[] {
  return program === 'python' && args[0] === '-m' ? args.slice(2) : args;
}

/**
 * The widest command llmgw would ever produce for `engine`: every rank of a multi-node replica (a flag only
 * there is the one nobody notices has gone), for llmgw's own flags and for each catalog profile of the engine.
 */
export function widestFlags(engine: EngineName, catalog: readonly ModelSpec[]): WidestFlags {
  const out: WidestFlags = new Map();
  const add = (program: EngineProgram, flag: string, who: string): void => {
    const flags = out.get(program) ?? new Map<string, Set<string>>();
    out.set(program, flags.set(flag, (flags.get(flag) ?? new Set()).add(who)));
  };
  const build = ENGINE_SPECS[engine].command;
  const own: Profile = { name: LLMGW, engine, nodes: 2, gpusPerNode: 8, args: [] };
  const profiles = catalog.flatMap((m) =>
    m.profiles.filter((p) => p.engine === engine).map((p) => ({ who: `${m.name}/${p.name}`, p })),
  );
  for (const { who, p } of [{ who: LLMGW, p: own }, ...profiles]) {
    const world = Math.max(p.nodes, 2);
    for (let rank = 0; rank < world; rank++) {
      const { program, args } = build(widestLaunch(p, rank, world));
      // A builder appends the profile's args last to the programs that take them (llama.cpp's ggml-rpc-server does not).
      const n = p.args.length;
      const takesProfile = n > 0 && args.slice(-n).every((a, i) => a === p.args[i]);
      const llmgwPart = engineArgs(program, takesProfile ? args.slice(0, -n) : args);
      for (const f of flagsOf(llmgwPart)) add(program, f, LLMGW);
      if (takesProfile) for (const f of flagsOf(p.args)) add(program, f, who);
    }
  }
  return out;
}

/**
 * Whether the help text documents `flag` on a word boundary: `--port` is not satisfied by `--port-range`,
 * nor `-m` by `--model`. Without that, a renamed flag would pass the check that exists to catch it.
 */
export function helpDocuments(help: string, flag: string): boolean {
  const esc = flag.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`(?<![A-Za-z0-9_-])${esc}(?![A-Za-z0-9_-])`).test(help);
}

export interface MissingFlag {
  flag: string;
  /** `llmgw`, or the catalog profiles (`model/profile`) that use it */
  usedBy: string[];
}

export interface ProgramCheck {
  program: EngineProgram;
  /** Flags given to the program and checked */
  checked: number;
  missing: MissingFlag[];
  /** e.g. the help does not document --help itself (a sign it was cut short), or no help to check against */
  warnings: string[];
}

/** Checks each program's flags against its help text; a program with no help (null) is reported, not passed. */
export function checkFlags(widest: WidestFlags, helpOf: (program: EngineProgram) => string | null): ProgramCheck[] {
  return [...widest].map(([program, flags]) => {
    const help = helpOf(program);
    if (help === null) {
      return {
        program,
        checked: 0,
        missing: [],
        warnings: [`${program}: not checked, no help text for it (flags: ${[...flags.keys()].join(' ')})`],
      };
    }
    const warnings = helpDocuments(help, '--help')
      ? []
      : [`${program}: the help text does not document --help itself; it may be cut short (give the whole output)`];
    const missing = [...flags]
      .filter(([f]) => !helpDocuments(help, f))
      .map(([flag, who]) => ({ flag, usedBy: [...who].sort() }));
    return { program, checked: flags.size, missing, warnings };
  });
}

/** The report a person reads: each program, its missing flags with who uses them, warnings. */
export function formatCheck(engine: EngineName, version: string, checks: ProgramCheck[]): string {
  const lines: string[] = [];
  for (const c of checks) {
    for (const w of c.warnings) lines.push(`warning: ${w}`);
    if (c.checked === 0) continue;
    if (c.missing.length === 0) lines.push(`${engine} ${version} ${c.program}: all ${c.checked} flags documented`);
    for (const m of c.missing)
      lines.push(`${engine} ${version} ${c.program}: ${m.flag} is not in its help (used by ${m.usedBy.join(', ')})`);
  }
  return `${lines.join('\n')}\n`;
}

/** True when a flag is missing (the command then exits non-zero). */
export function checkFailed(checks: ProgramCheck[]): boolean {
  return checks.some((c) => c.missing.length > 0);
}
