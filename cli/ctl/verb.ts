/** What every `llmgw ctl` verb is given and what it exports: its help lines and its run function. */
import type { ServerConfig } from '../../config/types';
import { quoteInput } from '../../lib/errors';
import { UsageError } from '../args';
import { callControl, type ControlApi } from '../control-api';

/** The options `llmgw ctl` parses for every verb (parseArgs' shape). */
export const CTL_OPTIONS = {
  config: { type: 'string' },
  server: { type: 'string' },
  json: { type: 'boolean' },
  model: { type: 'string' },
  replicas: { type: 'string' },
  'no-wait': { type: 'boolean' },
  timeout: { type: 'string' },
  'route-timeout': { type: 'string' },
  reason: { type: 'string' },
  cancel: { type: 'boolean' },
  'allow-downtime': { type: 'boolean' },
} as const;

/** The parsed values of CTL_OPTIONS. */
export interface CtlValues {
  config?: string;
  server?: string;
  json?: boolean;
  model?: string;
  replicas?: string;
  'no-wait'?: boolean;
  timeout?: string;
  'route-timeout'?: string;
  reason?: string;
  cancel?: boolean;
  'allow-downtime'?: boolean;
}

/** One verb's inputs: the configuration, the control plane, its options and positionals, and where to print. */
export interface CtlContext {
  verb: string;
  config: ServerConfig;
  api: ControlApi;
  values: CtlValues;
  positionals: string[];
  out: (s: string) => void;
  /** the whole `llmgw ctl --help`, for errors that teach */
  usage: string;
}

/** A `llmgw ctl` verb. */
export interface CtlVerb {
  /** its lines of `llmgw ctl --help`, as printed (verb name, arguments, what it does) */
  help: string;
  run(ctx: CtlContext): Promise<void>;
  /** a verb with options of its own parses its own argv (and --help) instead */
  raw?: (argv: string[], out: (s: string) => void) => Promise<void>;
}

/** GETs a control plane read route (`${api.server}/v1/…`); refusals and an unreachable control plane as callControl says them. */
export function getJson<T>(api: ControlApi, url: string): Promise<T> {
  return callControl<T>(api, url.startsWith(api.server) ? url.slice(api.server.length) : url);
}

/** Refuses (a UsageError naming the known ones) a model the catalog does not have. */
export async function catalogModel(api: ControlApi, model: string): Promise<void> {
  const { models } = await getJson<{ models: { name: string }[] }>(api, `${api.server}/v1/models`);
  if (!models.some((m) => m.name === model)) {
    throw new UsageError(
      `model ${quoteInput(model)} is not in the catalog (known: ${models.map((m) => m.name).join(', ') || 'none'}): add it to server.yaml's catalog and restart the control plane`,
    );
  }
}

/** The node a verb names first; missing, the error shows how it is given. */
export function nodeArg(ctx: Pick<CtlContext, 'verb' | 'positionals'>, example = 'sim-a'): string {
  const nodeId = ctx.positionals[0];
  if (!nodeId) throw new UsageError(`ctl ${ctx.verb} needs a NODE, e.g. llmgw ctl ${ctx.verb} ${example}`);
  return nodeId;
}
