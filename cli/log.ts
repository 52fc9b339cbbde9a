/** One named, structured logger per component: a JSON line per message on stderr. */
export type Log = (msg: string, fields?: Record<string, unknown>) => void;

/** Values JSON has no form for: an Error by its name and message (JSON.stringify gives `{}`), a bigint as a string. */
function plain(_key: string, v: unknown): unknown {
  if (v instanceof Error) {
    const { code } = v as { code?: unknown };
    return { name: v.name, message: v.message, ...(code === undefined ? {} : { code }) };
  }
  return typeof v === 'bigint' ? v.toString() : v;
}

/**
 * A logger that writes `{"t","level","c","msg",...fields}` lines to stderr. `level` is `info` unless the fields
 * say `warn` (degraded: llmgw copes) or `error` (someone must act).
 */
export function makeLog(component: string): Log {
  return (msg, fields) => {
    process.stderr.write(
      `${JSON.stringify({ t: new Date().toISOString(), level: 'info', c: component, msg, ...fields }, plain)}\n`,
    );
  };
}
