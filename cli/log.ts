/** One named, structured logger per component: a JSON line per message on stderr. */
export type Log = (msg: string, fields?: Record<string, unknown>) => void;

/** A logger that writes `{"t","c","msg",...fields}` lines to stderr. */
export function makeLog(component: string): Log {
  return (msg, fields) => {
    process.stderr.write(`${JSON.stringify({ t: new Date().toISOString(), c: component, msg, ...fields })}\n`);
  };
}
