/**
 * The sim engine's hold on its GPUs: one lock file per index in a directory the node's agent names, so a second
 * sim engine started on a GPU another one holds fails at once and says which — as two engines on one real GPU
 * fail (out of memory, or computing on the wrong device), only loudly. A holder that died is no holder.
 */
import { readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { procStartTime, sameProcess } from '../engine-state';

/** Who holds a GPU: the process (pid and start time, so a recycled pid is no holder) and what it serves. */
interface Holder {
  pid: number;
  startTime: string;
  what: string;
}

/** Held GPUs, released together. */
export interface GpuLocks {
  devices: number[];
  release(): void;
}

/** The GPU indices CUDA_VISIBLE_DEVICES names (`"2,3"`), [] for `""`, or null when it is unset (every GPU). */
export function visibleDevices(env: string | undefined): number[] | null {
  if (env === undefined) return null;
  const parts = env
    .split(',')
    .map((p) => p.trim())
    .filter(Boolean);
  if (parts.some((p) => !/^\d+$/.test(p)))
    throw new Error(
      `CUDA_VISIBLE_DEVICES="${env}": expected GPU indices like 0,1 (the sim engine models indices, not UUIDs)`,
    );
  return parts.map(Number);
}

const lockFile = (dir: string, gpu: number): string => join(dir, `gpu${gpu}.lock`);

function holderOf(file: string): Holder | null {
  try {
    const h = JSON.parse(readFileSync(file, 'utf8')) as Holder;
    return sameProcess(h.pid, h.startTime) ? h : null;
  } catch {
    return null;
  }
}

/**
 * Takes a lock file for each of `devices` in `dir` (`what` says what holds them); throws naming the GPU and its
 * holder when a live process holds one, releasing what it took. A lock left by a dead process is taken over.
 */
export function lockGpus(dir: string, devices: number[], what: string): GpuLocks {
  mkdirSync(dir, { recursive: true });
  const me: Holder = { pid: process.pid, startTime: procStartTime(process.pid) ?? '', what };
  const taken: number[] = [];
  const release = (): void => {
    for (const gpu of taken.splice(0))
      if (holderOf(lockFile(dir, gpu))?.pid === me.pid) rmSync(lockFile(dir, gpu), { force: true });
  };
  try {
    for (const gpu of devices) {
      const file = lockFile(dir, gpu);
      for (let attempt = 0; ; attempt++) {
        try {
          writeFileSync(file, JSON.stringify(me), { flag: 'wx' });
          taken.push(gpu);
          break;
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
          const h = holderOf(file);
          if (h)
            throw new Error(
              `GPU ${gpu} is held by ${h.what} (pid ${h.pid}): two engines on one GPU run out of memory or compute on the wrong device, so this one does not start`,
            );
          if (attempt > 0) throw new Error(`GPU ${gpu}: could not take its lock ${file}`);
          rmSync(file, { force: true }); // its holder died without releasing it
        }
      }
    }
  } catch (err) {
    release();
    throw err;
  }
  return { devices, release };
}
