/**
 * Whether this process runs from a release artefact (the bundled program with its own Node runtime) or from a
 * checkout, and how it runs one of its own subcommands as a child process in either case.
 */

/** What a release artefact says about itself (set once by its entry, cli/release-main.ts). */
export interface ReleaseInfo {
  /** the bundled program (lib/llmgw.js inside the unpacked artefact) */
  program: string;
  version: string;
  /** the commit it was built from, `-dirty` when the working tree had changes */
  commit: string;
  /** linux-x64 or linux-arm64 */
  platform: string;
  /** the Node version shipped in it */
  node: string;
  builtAt: string;
}

let current: ReleaseInfo | null = null;

/** Marks this process as the release artefact's program (its entry calls this before anything else runs). */
export function setRelease(info: ReleaseInfo): void {
  current = Object.freeze({ ...info });
}

/** The release this process runs from, or null in a checkout. */
export function release(): ReleaseInfo | null {
  return current;
}

/**
 * The argv that runs `llmgw <command>` as a child of this process, from the artefact (its own Node and bundle),
 * or null in a checkout (callers then run their TypeScript entry through tsx, as before).
 */
export function releaseSelfArgv(command: string): string[] | null {
  return current ? [process.execPath, current.program, command] : null;
}

/** The platform name of this machine as release artefacts spell it (linux-x64, linux-arm64), or null. */
export function platformName(os: string = process.platform, arch: string = process.arch): string | null {
  if (os !== 'linux') return null;
  return arch === 'x64' || arch === 'arm64' ? `linux-${arch}` : null;
}

/** `uname -m` of a machine → the artefact platform that runs there, or null when none does. */
export function platformOfMachine(unameM: string): string | null {
  const m = unameM.trim();
  if (m === 'x86_64' || m === 'amd64') return 'linux-x64';
  if (m === 'aarch64' || m === 'arm64') return 'linux-arm64';
  return null;
}
