/**
 * A strict parser of Prometheus' text exposition format (0.0.4), for tests that read a /metrics page: every line is
 * a HELP, a TYPE or a sample of a family declared before it, label values are escaped as the format says, and a
 * histogram's buckets are cumulative and end in +Inf equal to its count. Anything else throws, naming the line.
 */

/** One sample: its full name (with _bucket, _sum, _count), labels and value. */
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}
/** A metric family: its TYPE, HELP and samples. */
export interface Family {
  type: 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';
  help: string;
  samples: Sample[];
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);

function parseValue(s: string, line: number | string): number {
  // As Prometheus reads them (Go's ParseFloat): Inf and NaN in any case — prom-client writes an empty mean as "Nan".
  if (/^\+?inf$/i.test(s)) return Infinity;
  if (/^-inf$/i.test(s)) return -Infinity;
  if (/^nan$/i.test(s)) return NaN;
  if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(s))
    throw new Error(`line ${line}: bad value ${JSON.stringify(s)}`);
  return Number(s);
}

/** Labels of `{a="x",b="y"}` (the braces' content), unescaping \\, \" and \n. */
function parseLabels(s: string, line: number): Record<string, string> {
  const out: Record<string, string> = {};
  let i = 0;
  while (i < s.length) {
    const m = /^([a-zA-Z_][a-zA-Z0-9_]*)="/.exec(s.slice(i));
    if (!m) throw new Error(`line ${line}: bad label at ${JSON.stringify(s.slice(i))}`);
    i += m[0].length;
    let v = '';
    for (;;) {
      if (i >= s.length) throw new Error(`line ${line}: unterminated label value`);
      const c = s[i++];
      if (c === '"') break;
      if (c === '\\') {
        const e = s[i++];
        if (e === 'n') v += '\n';
        else if (e === '\\' || e === '"') v += e;
        else throw new Error(`line ${line}: bad escape \\${e}`);
      } else v += c;
    }
    if (m[1] in out) throw new Error(`line ${line}: label ${m[1]} twice`);
    out[m[1]] = v;
    if (i < s.length) {
      if (s[i] !== ',') throw new Error(`line ${line}: expected "," after label ${m[1]}`);
      i++;
    }
  }
  return out;
}

/** Parses an exposition into its families by name; throws on anything the format does not allow. */
export function parsePromText(text: string): Map<string, Family> {
  const families = new Map<string, Family>();
  const familyOf = (sample: string): [string, Family] | null => {
    for (const suffix of ['', '_bucket', '_sum', '_count']) {
      if (suffix && !sample.endsWith(suffix)) continue;
      const base = sample.slice(0, sample.length - suffix.length);
      const f = families.get(base);
      if (f && (suffix === '' || f.type === 'histogram' || (f.type === 'summary' && suffix !== '_bucket')))
        return [base, f];
    }
    return null;
  };
  text.split('\n').forEach((raw, idx) => {
    const line = idx + 1;
    if (raw === '') return;
    if (raw.startsWith('#')) {
      const m = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(raw);
      if (!m) return; // a comment
      if (!NAME.test(m[2])) throw new Error(`line ${line}: bad metric name ${m[2]}`);
      const f = families.get(m[2]) ?? { type: 'untyped' as const, help: '', samples: [] };
      if (m[1] === 'TYPE') {
        if (!TYPES.has(m[3])) throw new Error(`line ${line}: bad type ${m[3]}`);
        if (f.samples.length) throw new Error(`line ${line}: TYPE of ${m[2]} after its samples`);
        f.type = m[3] as Family['type'];
      } else f.help = m[3];
      families.set(m[2], f);
      return;
    }
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: (-?\d+))?$/.exec(raw);
    if (!m) throw new Error(`line ${line}: not a sample: ${JSON.stringify(raw)}`);
    const fam = familyOf(m[1]);
    if (!fam) throw new Error(`line ${line}: sample ${m[1]} of no declared family`);
    fam[1].samples.push({
      name: m[1],
      labels: m[2] ? parseLabels(m[2], line) : {},
      value: parseValue(m[3], `${line} (${raw})`),
    });
  });
  for (const [name, f] of families) if (f.type === 'histogram') checkHistogram(name, f);
  return families;
}

/** Each label set's buckets rise, end in +Inf, and +Inf equals its _count. */
function checkHistogram(name: string, f: Family): void {
  const series = new Map<string, { last: number; inf?: number; count?: number }>();
  for (const s of f.samples) {
    const { le, ...rest } = s.labels;
    const id = JSON.stringify(Object.entries(rest).sort());
    const e = series.get(id) ?? { last: 0 };
    series.set(id, e);
    if (s.name === `${name}_bucket`) {
      if (le === undefined) throw new Error(`${name}: a bucket without le`);
      if (s.value < e.last) throw new Error(`${name}${id}: buckets not cumulative at le=${le}`);
      e.last = s.value;
      if (le === '+Inf') e.inf = s.value;
    } else if (s.name === `${name}_count`) e.count = s.value;
  }
  for (const [id, e] of series)
    if (e.inf === undefined || e.inf !== e.count)
      throw new Error(`${name}${id}: +Inf bucket ${e.inf} != count ${e.count}`);
}

/** The sum of the values of `name`'s samples whose labels include `labels` (0 when none). */
export function valueOf(families: Map<string, Family>, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const f of families.values())
    for (const s of f.samples)
      if (s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)) sum += s.value;
  return sum;
}

/** Fetches and parses a /metrics page (a non-200 throws). */
export async function scrape(url: string): Promise<Map<string, Family>> {
  const r = await fetch(url, { signal: AbortSignal.timeout(5000) });
  if (r.status !== 200) throw new Error(`${url}: ${r.status}`);
  return parsePromText(await r.text());
}

/** The llmgw_* families of `families` that docs/metrics.md does not name (it must list every series). */
export function undocumented(families: Map<string, Family>, docs: string): string[] {
  return [...families.keys()].filter((name) => name.startsWith('llmgw_') && !docs.includes(`\`${name}\``));
}
