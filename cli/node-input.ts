/**
 * What onboard-node and add-node read the same way from their flags: the release artefact, the CA host's ssh key,
 * the control plane's URL and the agent's hardware and engine flags. Every bad value names its flag.
 */
import { createHash } from 'node:crypto';
import { createReadStream, existsSync, readFileSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { LlmgwError } from '../lib/errors';
import { parseArtefactName } from '../lib/onboard/plan';
import type { ArtefactRef, OnboardInput } from '../workflows/contracts/onboard';
import { UsageError } from './args';
import { engineBins, type EngineBinValues } from './engine-flags';

function sha256File(file: string): Promise<string> {
  return new Promise((res, rej) => {
    const h = createHash('sha256');
    createReadStream(file)
      .on('data', (b) => h.update(b))
      .on('end', () => res(h.digest('hex')))
      .on('error', rej);
  });
}

/** The artefact `--binary` names, checked here so a wrong one fails before anything is started. */
export async function artefactRef(file: string | undefined): Promise<ArtefactRef> {
  if (!file) {
    throw new LlmgwError(
      'LLMGW_ARTEFACT_INVALID',
      '--binary ARTEFACT is required: build one with npm run release (dist/llmgw-<version>-linux-x64.tar.gz) or download a release. ' +
        'Onboarding never copies the program it runs from: that would make this machine the build server and the fleet run whatever is in its working tree',
    );
  }
  const path = resolve(file);
  const name = parseArtefactName(path);
  if (!name)
    throw new LlmgwError(
      'LLMGW_ARTEFACT_INVALID',
      `--binary ${file} is not a release artefact (llmgw-<version>-linux-x64.tar.gz or …-linux-arm64.tar.gz, made by npm run release)`,
    );
  if (!existsSync(path) || !statSync(path).isFile())
    throw new LlmgwError('LLMGW_ARTEFACT_INVALID', `--binary ${file}: no such file`);
  return { path, sha256: await sha256File(path), ...name };
}

/** The CA host's ssh key: --ssh-key, or the first of the usual ones. */
export function sshKeyPath(flag: string | undefined): string {
  if (flag) return resolve(flag);
  const found = ['id_ed25519', 'id_ecdsa', 'id_rsa'].map((k) => join(homedir(), '.ssh', k)).find((k) => existsSync(k));
  if (!found)
    throw new UsageError(
      `no ssh key in ${join(homedir(), '.ssh')} (id_ed25519, id_ecdsa, id_rsa): pass --ssh-key PATH (make one with ssh-keygen -t ed25519)`,
    );
  return found;
}

/** The CA host's ssh key pair: --ssh-key, or the first of the usual ones; its .pub must be beside it. */
export function sshKeyPair(flag: string | undefined): { key: string; pub: string[] } {
  const key = sshKeyPath(flag);
  const pubFile = `${key}.pub`;
  if (!existsSync(pubFile))
    throw new UsageError(
      `${pubFile} is missing: the VM is given the public half of --ssh-key ${key} (ssh-keygen -y -f ${key} > ${pubFile})`,
    );
  const pub = readFileSync(pubFile, 'utf8')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'));
  return { key, pub };
}

/** --server as the control plane's https://HOST:PORT (it speaks mutual TLS only). */
export function controlPlaneUrl(flag: string): string {
  const server = flag.replace(/\/$/, '');
  if (!/^https:\/\/[^/]+$/.test(server))
    throw new UsageError(`--server ${flag}: the control plane's https://HOST:PORT (it speaks mutual TLS only)`);
  return server;
}

/**
 * The agent's hardware flags (--fabric, --no-gpu, --nvidia-smi, --ib-root), its door (--no-door) and engine flags as
 * onboarding's input.
 */
export function agentFlags(
  values: AgentFlagValues,
): Pick<OnboardInput, 'fabrics' | 'noGpu' | 'nvidiaSmi' | 'ibRoot' | 'bins' | 'door'> {
  return {
    door: !(values['no-door'] ?? false),
    fabrics: values.fabric ?? [],
    noGpu: values['no-gpu'] ?? false,
    ...(values['nvidia-smi'] ? { nvidiaSmi: values['nvidia-smi'] } : {}),
    ...(values['ib-root'] ? { ibRoot: values['ib-root'] } : {}),
    bins: engineBins(values),
  };
}

/** The flags agentFlags reads (and the engine-binary flags, cli/engine-flags.ts). */
export interface AgentFlagValues extends EngineBinValues {
  fabric?: string[];
  'no-gpu'?: boolean;
  'nvidia-smi'?: string;
  'ib-root'?: string;
  'no-door'?: boolean;
}
