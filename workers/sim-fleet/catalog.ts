/** The models a simulated fleet is loaded with: sim models of one GPU per replica, at most 50 replicas each. */
import type { ModelSpec } from '../../lib/types';

/** Replicas per fleet model: under `ctl scale`'s 64, so each stays an ordinary model. */
export const FLEET_MODEL_REPLICAS = 50;

/** Catalog entries totalling `replicas` replicas of sim models `fleet-m<k>` (one GPU each, tokens as fast as asked). */
export function fleetCatalog(replicas: number): ModelSpec[] {
  const models: ModelSpec[] = [];
  for (let left = replicas, k = 0; left > 0; left -= FLEET_MODEL_REPLICAS, k++)
    models.push({
      name: `fleet-m${k}`,
      source: `sim://fleet-m${k}`,
      replicas: Math.min(left, FLEET_MODEL_REPLICAS),
      profiles: [{ name: 'default', engine: 'sim', nodes: 1, gpusPerNode: 1, args: ['--tokens-per-second', '0'] }],
    });
  return models;
}
