/**
 * ssh from the CA host to a node it knows: the key read from the CA host, the node held to the host keys onboarding
 * learned (a changed one refused, naming both). Onboarding and node removal connect this way.
 */
import { readFileSync } from 'node:fs';
import { ApplicationFailure } from '@temporalio/common';
import type { ErrorCode } from '../../lib/errors';
import { openSsh, SshConnectError } from '../../lib/ssh/client';
import { decideHostKey, preferredHostKeyAlgorithms, type HostKey } from '../../lib/ssh/host-key';
import type { HostKeyStore } from '../../lib/store/host-keys';
import { remote, type Remote } from './remote';

/** Where and as whom the CA host reaches a node. */
export interface SshTarget {
  nodeId: string;
  addr: string;
  sshPort: number;
  sshUser: string;
  /** the private key on the CA host (absolute path) */
  sshKeyPath: string;
}

const fail = (type: ErrorCode, message: string): ApplicationFailure =>
  ApplicationFailure.create({ type, message, nonRetryable: true });

/** The private key, the changed-key refusal and a connection to a known node, over `hostKeys`. */
export function knownHostSsh(hostKeys: HostKeyStore) {
  const privateKey = (input: SshTarget): Buffer => {
    try {
      return readFileSync(input.sshKeyPath);
    } catch (err) {
      throw fail(
        'LLMGW_SSH_REFUSED',
        `cannot read the ssh key ${input.sshKeyPath} on the CA host (${(err as NodeJS.ErrnoException).code ?? String(err)}): pass --ssh-key PATH, the key whose public half is in the node's authorized_keys`,
      );
    }
  };

  const changedKey = (
    input: SshTarget,
    presented: HostKey,
    known: { type: string; fingerprint: string; address: string; learnedAt: Date }[],
  ): ApplicationFailure =>
    fail(
      'LLMGW_HOST_KEY_CHANGED',
      `${input.nodeId} at ${input.addr} presented the ssh host key ${presented.type} ${presented.fingerprint}, but it is known by ` +
        `${known.map((k) => `${k.type} ${k.fingerprint} (learned at ${k.address} on ${k.learnedAt.toISOString()})`).join(', ')}. ` +
        'Either another machine answers at this address — do not go on until you know which — or this one was rebuilt on purpose: ' +
        `then forget its old key with \`llmgw ctl forget-host-key ${input.nodeId}\` and onboard it again`,
    );

  /** A connection to a node whose host key is known: any other key is refused. */
  const connect = async (input: SshTarget): Promise<Remote> => {
    const known = await hostKeys.list(input.nodeId);
    if (known.length === 0)
      throw fail(
        'LLMGW_ONBOARD_FAILED',
        `no ssh host key is recorded for ${input.nodeId} (forgotten meanwhile?): onboard it again, which learns it first`,
      );
    try {
      const s = await openSsh({
        host: input.addr,
        port: input.sshPort,
        username: input.sshUser,
        privateKey: privateKey(input),
        verify: (k) => decideHostKey(known, k).kind === 'known',
        hostKeyAlgorithms: preferredHostKeyAlgorithms(known),
      });
      return remote(s, input.sshUser);
    } catch (err) {
      if (err instanceof SshConnectError && err.kind === 'host-key' && err.presented)
        throw changedKey(input, err.presented, known);
      throw err; // a dropped connection: worth the activity's retry
    }
  };

  return { privateKey, changedKey, connect };
}
