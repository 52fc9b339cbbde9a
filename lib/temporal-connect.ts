/** Connecting to Temporal at server.yaml's temporal.address, with an error that names the key and the fix. */
import { LlmgwError } from './errors';

/**
 * Runs `connect(address)` (Connection.connect, NativeConnection.connect); a Temporal that does not answer is
 * LLMGW_TEMPORAL_UNREACHABLE naming temporal.address, instead of the SDK's "Failed to connect before the deadline".
 */
export async function connectTemporal<C>(address: string, connect: (address: string) => Promise<C>): Promise<C> {
  try {
    return await connect(address);
  } catch (err) {
    throw new LlmgwError(
      'LLMGW_TEMPORAL_UNREACHABLE',
      `cannot reach Temporal at ${address} (${(err as Error).message}): temporal.address in server.yaml must name a running Temporal frontend; start it, or fix the address (--config FILE)`,
      { address },
    );
  }
}
