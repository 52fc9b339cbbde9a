/** A small collecting validator for parsed YAML: every problem is recorded with its key path and fix, none thrown. */

export type Seg = string | number;
export type Obj = Record<string, unknown>;
/** A problem before it is located in the file. */
export interface RawIssue {
  path: Seg[];
  problem: string;
  fix: string;
}
/** Checks a string; returns [problem, fix] when it is wrong. */
export type Rule = (s: string) => [string, string] | undefined;

/** True for a plain mapping (not null, not a list). */
export function isObj(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A value quoted for a message. */
export function quote(s: string): string {
  return JSON.stringify(s);
}

function distance(a: string, b: string): number {
  const d = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let prev = d[0] ?? 0;
    d[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const tmp = d[j] ?? 0;
      d[j] = Math.min(
        (d[j] ?? 0) + 1,
        (d[j - 1] ?? 0) + 1,
        prev + (a[i - 1]?.toLowerCase() === b[j - 1]?.toLowerCase() ? 0 : 1),
      );
      prev = tmp;
    }
  }
  return d[b.length] ?? 0;
}

/** The closest candidate to `s` when it is close enough to be a typo. */
export function suggest(s: string, candidates: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestD = Infinity;
  for (const c of candidates) {
    const dd = distance(s, c);
    if (dd < bestD) [best, bestD] = [c, dd];
  }
  return best !== undefined && bestD <= Math.max(2, Math.floor(best.length / 3)) ? best : undefined;
}

const last = (path: Seg[]): Seg => path[path.length - 1] ?? '';

/** Collects issues while reading values; readers return placeholders so checking goes on. */
export class Checker {
  readonly issues: RawIssue[] = [];

  /** Records one issue. */
  add(path: Seg[], problem: string, fix: string): void {
    this.issues.push({ path, problem, fix });
  }

  /** Describes a value's kind for "expected X, got Y". */
  describe(v: unknown): string {
    if (v === null || v === undefined) return 'nothing';
    if (Array.isArray(v)) return 'a list';
    if (typeof v === 'object') return 'a mapping';
    return `${typeof v} ${JSON.stringify(v)}`;
  }

  /** A mapping at `path` with only `keys`; unknown keys are reported with a did-you-mean. */
  obj(raw: unknown, path: Seg[], keys: readonly string[]): Obj | undefined {
    if (!isObj(raw)) {
      this.add(
        path,
        `expected a mapping, got ${this.describe(raw)}`,
        `write it as key: value pairs (keys: ${keys.join(', ')})`,
      );
      return undefined;
    }
    for (const k of Object.keys(raw)) {
      if (keys.includes(k)) continue;
      const near = suggest(k, keys);
      this.add(
        [...path, k],
        `unknown key ${quote(k)}`,
        `${near ? `did you mean "${near}"? ` : ''}known keys here: ${keys.join(', ')}`,
      );
    }
    return raw;
  }

  /** The mapping under the last segment of `path` in `parent`. */
  sub(parent: Obj | undefined, path: Seg[], keys: readonly string[]): Obj | undefined {
    if (!parent) return undefined;
    return this.obj(parent[String(last(path))], path, keys);
  }

  /** A required string; `example` shows in the fix. */
  str(o: Obj | undefined, path: Seg[], example: string, rule?: Rule): string {
    if (!o) return '';
    const v = o[String(last(path))];
    if (typeof v !== 'string' || v === '') {
      this.add(
        path,
        v === undefined ? 'is missing' : `expected a string, got ${this.describe(v)}`,
        `set it, e.g. ${example}`,
      );
      return '';
    }
    const bad = rule?.(v);
    if (bad) this.add(path, bad[0], bad[1]);
    return v;
  }

  /** A required whole number in [min, max]. */
  int(o: Obj | undefined, path: Seg[], min: number, max: number, example: string): number {
    if (!o) return 0;
    const v = o[String(last(path))];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
      const range = max === Infinity ? `≥ ${min}` : `from ${min} to ${max}`;
      this.add(
        path,
        v === undefined ? 'is missing' : `expected a whole number ${range}, got ${this.describe(v)}`,
        `set it to a whole number ${range}, e.g. ${example}`,
      );
      return 0;
    }
    return v;
  }

  /** A required true or false. */
  bool(o: Obj | undefined, path: Seg[]): boolean {
    if (!o) return false;
    const v = o[String(last(path))];
    if (typeof v !== 'boolean') {
      this.add(
        path,
        v === undefined ? 'is missing' : `expected true or false, got ${this.describe(v)}`,
        'set it to true or false (unquoted)',
      );
      return false;
    }
    return v;
  }

  /** A list of strings (missing = empty). */
  strList(o: Obj | undefined, path: Seg[], example: string, rule?: Rule): string[] {
    if (!o) return [];
    const v = o[String(last(path))];
    if (v === undefined || v === null) return [];
    if (!Array.isArray(v)) {
      this.add(path, `expected a list of strings, got ${this.describe(v)}`, `write it as a list, e.g. [${example}]`);
      return [];
    }
    return v.flatMap((item, i) => {
      if (typeof item !== 'string') {
        this.add([...path, i], `expected a string, got ${this.describe(item)}`, `quote it, e.g. ${example}`);
        return [];
      }
      const bad = rule?.(item);
      if (bad) this.add([...path, i], bad[0], bad[1]);
      return [item];
    });
  }

  /** A list (missing = empty). */
  list(raw: unknown, path: Seg[]): unknown[] {
    if (raw === undefined || raw === null) return [];
    if (!Array.isArray(raw)) {
      this.add(
        path,
        `expected a list, got ${this.describe(raw)}`,
        'write it as a YAML list (lines starting with "- ")',
      );
      return [];
    }
    return raw;
  }
}
