/**
 * The control API's input schemas that more than one route shares, with bounds: a node's registration is stored
 * and sent to every `ctl nodes`, so it holds only the fields llmgw knows, each of a size no real node comes near
 * (a node with 900 KB of extra fields was stored verbatim before). Unknown fields are refused, not dropped: the
 * control server's ajv keeps them (`CONTROL_AJV`), so the schema's `additionalProperties: false` refuses them.
 */
import { DOCTOR_STATUSES, ENGINES } from '../../lib/types';

/** The control app's ajv options: unknown fields are refused (fastify's default removes them silently). */
export const CONTROL_AJV = { customOptions: { removeAdditional: false } } as const;

const str = (maxLength: number, minLength = 0): { type: 'string'; maxLength: number; minLength: number } => ({
  type: 'string',
  maxLength,
  minLength,
});
const closed = <P extends Record<string, unknown>>(
  properties: P,
  required: (keyof P & string)[] = [],
): { type: 'object'; additionalProperties: false; required: string[]; properties: P } => ({
  type: 'object',
  additionalProperties: false,
  required,
  properties,
});

/** A node id as a route receives it in a body or a querystring; its alphabet is checked by checkNodeId. */
export const nodeIdSchema = str(64, 1);

/** What an agent reports about its node (NodeInventory), bounded. */
export const inventorySchema = closed(
  {
    gpus: {
      type: 'array',
      maxItems: 64,
      items: closed(
        {
          index: { type: 'integer', minimum: 0, maximum: 1023 },
          name: str(256),
          memoryMiB: { type: 'integer', minimum: 0 },
          uuid: str(128),
          // CUDA compute capability, e.g. "8.0" (vLLM and SGLang need 7.5 or more)
          computeCap: { type: 'string', pattern: '^[0-9]{1,2}\\.[0-9]{1,2}$' },
        },
        ['index', 'name', 'memoryMiB', 'uuid'],
      ),
    },
    adapters: {
      type: 'array',
      maxItems: 64,
      items: closed(
        {
          device: str(64, 1),
          port: { type: 'integer', minimum: 0, maximum: 255 },
          state: str(64),
          rate: str(128),
          linkLayer: str(64),
          physState: str(64),
        },
        ['device', 'port', 'state', 'rate', 'linkLayer'],
      ),
    },
    // fabric name -> adapter devices on it
    fabrics: {
      type: 'object',
      maxProperties: 16,
      propertyNames: { maxLength: 64 },
      additionalProperties: { type: 'array', maxItems: 64, items: str(64, 1) },
    },
    cpuFlags: { type: 'array', maxItems: 64, items: str(32, 1) },
    engines: { type: 'array', maxItems: ENGINES.length, uniqueItems: true, items: { enum: ENGINES } },
    host: str(255, 1),
    // the node's door (its one inference listener): its port on host
    door: closed({ port: { type: 'integer', minimum: 1, maximum: 65535 } }, ['port']),
    // fabric name -> the subnet manager its ports see (placement splits one name over two SM GUIDs)
    fabricIdentity: {
      type: 'object',
      maxProperties: 16,
      propertyNames: { maxLength: 64 },
      additionalProperties: closed(
        {
          smGuid: { type: ['string', 'null'], pattern: '^0x[0-9a-f]{16}$' },
          strength: { enum: ['sm-guid', 'declared-only'] },
          smLid: { type: ['string', 'null'], maxLength: 16 },
          note: str(1024),
        },
        ['smGuid', 'strength'],
      ),
    },
    // how the GPUs are linked (nvidia-smi topo -m): links[i][j] for GPU i to GPU j, e.g. NV12, PIX, SYS, X
    gpuTopology: closed(
      { links: { type: 'array', maxItems: 64, items: { type: 'array', maxItems: 64, items: str(16, 1) } } },
      ['links'],
    ),
    // the agent's doctor results at start (the node list's CHECKS column)
    doctor: {
      type: 'array',
      maxItems: 64,
      items: closed({ id: str(128, 1), status: { enum: DOCTOR_STATUSES }, summary: str(4096), fix: str(4096) }, [
        'id',
        'status',
        'summary',
        'fix',
      ]),
    },
  },
  ['gpus', 'adapters', 'fabrics', 'cpuFlags', 'engines', 'host'],
);
