/** `llmgw bench URL`: a load generator for any OpenAI-compatible URL, printing what its clients saw. */
import { completionsUrl, modelsUrl, startBench, type BenchOptions, type BenchProgress } from '../lib/bench/run';
import { intOption, parse, UsageError } from './args';
import { formatReport, progressLine } from './bench-view';

const USAGE = `
llmgw bench URL [options]

Sends chat completions to an OpenAI-compatible URL (llmgw's gateway, one engine, any proxy) from N clients at
once, each sending its next request as soon as its last answer is in, and prints what the clients saw: time to
the first token (TTFT), inter-token latency (ITL), whole-request latency, requests/s, tokens/s, and goodput:
the completed requests per second whose TTFT was within a budget you state.

  URL                 base URL: http://127.0.0.1:8080, …/v1 or …/v1/chat/completions
  --model NAME        the model to ask for (default: the one model /v1/models lists)
  --api-key KEY       sent as "Authorization: Bearer KEY" (default: $OPENAI_API_KEY when set)
  --concurrency N     clients sending at once (default 8)
  --requests N        stop after N requests (default 100 when --duration is not given)
  --duration S        or send for S seconds, then wait for the answers still out
  --stream            streamed answers: TTFT is the first token event and ITL the gaps between token events.
                      Not streamed (the default), TTFT is the whole answer and there is no ITL.
  --prompt-tokens N   a synthetic prompt of about N tokens: N common words (exactly N tokens on the sim engine),
                      the first one the request's number, so no engine prefix cache flatters TTFT (default 128)
  --max-tokens N      tokens to generate per request (default 32)
  --ignore-eos        ask the engine to generate all --max-tokens (vLLM, SGLang, llama.cpp honour it)
  --ttft-budget MS    the TTFT budget of goodput (default 1000)
  --warmup N          send N requests first and leave them out of the figures (default 0)
  --timeout S         a request that receives nothing for S seconds fails as a timeout (default 60)
  --json              the report as one JSON object on stdout
  --quiet             no progress on stderr

Progress goes to stderr: a bar on a terminal, a plain line every 5 s otherwise. Failures are counted by
kind (HTTP status, timeout, a connection error, a stream cut before [DONE], an error event) and the first
few of each are shown. "client CPU" is the load generator's own CPU time: near 100 % of one core, the
generator, not the server, set the pace: run a second copy beside it and add up their rates.
Exit status: 0 when every request succeeded, 1 when any failed, 2 for bad options.

Examples:
  llmgw bench http://127.0.0.1:8080/v1 --model sim-small --stream --concurrency 16 --duration 30
  llmgw bench http://127.0.0.1:8080 --model sim-small --concurrency 64 --requests 20000 --max-tokens 1 --json
`;

/** A positive number of seconds, naming the flag when it is not one. */
function seconds(value: string | undefined, flag: string): number | null {
  if (value === undefined) return null;
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n <= 0)
    throw new UsageError(`${flag} must be a number of seconds above 0, got "${value}"`);
  return n;
}

/** A whole number of at least 1. */
function atLeastOne(value: string | undefined, flag: string, fallback: number): number {
  const n = intOption(value, flag, fallback);
  if (n < 1) throw new UsageError(`${flag} must be at least 1`);
  return n;
}

/** The model to ask for when none is named: the one the server lists, or a usage error naming them. */
async function onlyModel(url: URL, apiKey: string | undefined): Promise<string> {
  const res = await fetch(modelsUrl(url), {
    headers: apiKey ? { authorization: `Bearer ${apiKey}` } : {},
    signal: AbortSignal.timeout(10_000),
  }).catch((err: Error) => {
    throw new UsageError(
      `--model not given, and ${modelsUrl(url).href} did not answer (${err.message}): name the model with --model`,
    );
  });
  const body = (await res.json().catch(() => null)) as { data?: { id?: string }[] } | null;
  const ids = (body?.data ?? []).map((m) => m.id).filter((id): id is string => typeof id === 'string');
  if (res.ok && ids.length === 1) return ids[0];
  throw new UsageError(
    `--model not given, and ${modelsUrl(url).href} ${res.ok ? `lists ${ids.length ? ids.join(', ') : 'no model'}` : `answered ${res.status}`}: name one with --model`,
  );
}

/** Shows progress on stderr until stopped: redrawn in place on a terminal, a line every 5 s otherwise. */
function showProgress(read: () => BenchProgress): () => void {
  const tty = Boolean(process.stderr.isTTY);
  const timer = setInterval(
    () => process.stderr.write(tty ? `\r${progressLine(read(), true)}\x1b[K` : `${progressLine(read(), false)}\n`),
    tty ? 200 : 5000,
  );
  timer.unref();
  return () => {
    clearInterval(timer);
    if (tty) process.stderr.write('\r\x1b[K');
  };
}

/** Runs a bench with parsed options, showing progress, and prints its report. */
async function runBenchCommand(o: BenchOptions, show: { json: boolean; quiet: boolean }): Promise<void> {
  const run = startBench(o);
  const stop = show.quiet ? () => undefined : showProgress(run.progress);
  const report = await run.report.finally(stop);
  process.stdout.write(show.json ? `${JSON.stringify(report)}\n` : formatReport(report));
  if (report.requests.failed > 0) process.exitCode = 1;
}

/** Entry for `llmgw bench`. */
export async function benchCommand(argv: string[]): Promise<void> {
  const { values, positionals } = parse(argv, {
    usage: USAGE,
    allowPositionals: true,
    options: {
      model: { type: 'string' },
      'api-key': { type: 'string' },
      concurrency: { type: 'string' },
      requests: { type: 'string' },
      duration: { type: 'string' },
      stream: { type: 'boolean' },
      'prompt-tokens': { type: 'string' },
      'max-tokens': { type: 'string' },
      'ignore-eos': { type: 'boolean' },
      'ttft-budget': { type: 'string' },
      warmup: { type: 'string' },
      timeout: { type: 'string' },
      json: { type: 'boolean' },
      quiet: { type: 'boolean' },
    },
  });
  if (positionals.length !== 1)
    throw new UsageError(
      `bench needs one URL, e.g. llmgw bench http://127.0.0.1:8080/v1 --model sim-small\n${USAGE.trimEnd()}`,
    );
  let url: URL;
  try {
    url = completionsUrl(positionals[0]);
  } catch {
    throw new UsageError(`"${positionals[0]}" is not a URL: give the server's base URL, e.g. http://127.0.0.1:8080/v1`);
  }
  if (values.requests !== undefined && values.duration !== undefined)
    throw new UsageError('give --requests or --duration, not both');
  const apiKey = values['api-key'] ?? (process.env.OPENAI_API_KEY || undefined);
  const durationS = seconds(values.duration, '--duration');
  await runBenchCommand(
    {
      url,
      model: values.model ?? (await onlyModel(url, apiKey)),
      apiKey,
      concurrency: atLeastOne(values.concurrency, '--concurrency', 8),
      requests: durationS === null ? atLeastOne(values.requests, '--requests', 100) : null,
      durationS,
      stream: values.stream ?? false,
      promptTokens: atLeastOne(values['prompt-tokens'], '--prompt-tokens', 128),
      maxTokens: intOption(values['max-tokens'], '--max-tokens', 32),
      ignoreEos: values['ignore-eos'] ?? false,
      timeoutMs: (seconds(values.timeout, '--timeout') ?? 60) * 1000,
      warmup: intOption(values.warmup, '--warmup', 0),
      ttftBudgetMs: intOption(values['ttft-budget'], '--ttft-budget', 1000),
    },
    { json: values.json ?? false, quiet: values.quiet ?? false },
  );
}
