/** The node id check of the CA: the one alphabet of lib/types, with a catalogue code. */
import { LlmgwError, quoteInput } from '../errors';
import { parseNodeId, type NodeId } from '../types';

// A certificate's node id is also its DNS SAN, so it must at least be a hostname label (RFC 1123).
const HOSTNAME_LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;

/** Returns the node id, or throws LLMGW_BAD_NODE_ID naming the rule. */
export function checkNodeId(raw: unknown): NodeId {
  const text = String(raw);
  try {
    const id = parseNodeId(text);
    if (!HOSTNAME_LABEL.test(id)) throw new Error(`invalid node id ${quoteInput(text)}: it must be a hostname label`);
    return id;
  } catch (err) {
    throw new LlmgwError('LLMGW_BAD_NODE_ID', (err as Error).message, { nodeId: text });
  }
}
