/** The error catalogue: every error llmgw returns or raises carries one of these codes. See docs/errors.md. */

export const ERRORS = {
  LLMGW_UNKNOWN_MODEL: { status: 404, type: 'invalid_request_error' },
  LLMGW_NO_READY_REPLICA: { status: 503, type: 'server_error' },
  LLMGW_BAD_REQUEST: { status: 400, type: 'invalid_request_error' },
  LLMGW_UPSTREAM_FAILED: { status: 502, type: 'server_error' },
  LLMGW_UPSTREAM_TIMEOUT: { status: 504, type: 'server_error' },
  LLMGW_UNKNOWN_NODE: { status: 404, type: 'invalid_request_error' },
  LLMGW_CONFIG_INVALID: { status: 500, type: 'server_error' },
  LLMGW_NVIDIA_SMI_FAILED: { status: 500, type: 'server_error' },
  LLMGW_ENGINE_EXITED: { status: 500, type: 'server_error' },
  LLMGW_ENGINE_MISSING: { status: 500, type: 'server_error' },
  LLMGW_AGENT_STOPPED: { status: 503, type: 'server_error' },
  LLMGW_RANK_NOT_LISTENING: { status: 504, type: 'server_error' },
  LLMGW_RANK_FENCE_FAILED: { status: 500, type: 'server_error' },
  LLMGW_CA_EXISTS: { status: 409, type: 'invalid_request_error' },
  LLMGW_CA_MISSING: { status: 500, type: 'server_error' },
  LLMGW_CA_INVALID: { status: 500, type: 'server_error' },
  LLMGW_BAD_PEM: { status: 400, type: 'invalid_request_error' },
  LLMGW_BAD_CSR: { status: 400, type: 'invalid_request_error' },
  LLMGW_BAD_NODE_ID: { status: 400, type: 'invalid_request_error' },
  LLMGW_CERT_REFUSED: { status: 403, type: 'invalid_request_error' },
  LLMGW_CA_UNAVAILABLE: { status: 503, type: 'server_error' },
  LLMGW_DRAIN_TIMEOUT: { status: 504, type: 'server_error' },
  LLMGW_NO_DEPLOYMENT: { status: 409, type: 'invalid_request_error' },
  LLMGW_LAST_REPLICA: { status: 409, type: 'invalid_request_error' },
  LLMGW_REMOVE_FAILED: { status: 500, type: 'server_error' },
  LLMGW_FABRIC_SPLIT: { status: 400, type: 'invalid_request_error' },
  LLMGW_TEMPORAL_CALL_REFUSED: { status: 403, type: 'invalid_request_error' },
  LLMGW_SSH_UNREACHABLE: { status: 504, type: 'server_error' },
  LLMGW_SSH_REFUSED: { status: 403, type: 'invalid_request_error' },
  LLMGW_HOST_KEY_CHANGED: { status: 409, type: 'invalid_request_error' },
  LLMGW_HOSTNAME_MISMATCH: { status: 409, type: 'invalid_request_error' },
  LLMGW_ARTEFACT_INVALID: { status: 400, type: 'invalid_request_error' },
  LLMGW_ENGINE_PROBE_FAILED: { status: 500, type: 'server_error' },
  LLMGW_NODE_NOT_REGISTERED: { status: 504, type: 'server_error' },
  LLMGW_ONBOARD_FAILED: { status: 500, type: 'server_error' },
  LLMGW_WEIGHTS_FETCH_FAILED: { status: 502, type: 'server_error' },
  LLMGW_WEIGHTS_SHA_MISMATCH: { status: 502, type: 'server_error' },
  LLMGW_WEIGHTS_DISK_FULL: { status: 507, type: 'server_error' },
  LLMGW_WEIGHTS_NOT_FOUND: { status: 404, type: 'invalid_request_error' },
  LLMGW_VMID_TAKEN: { status: 409, type: 'invalid_request_error' },
  LLMGW_PROXMOX_FAILED: { status: 502, type: 'server_error' },
  LLMGW_PROVISION_FAILED: { status: 500, type: 'server_error' },
  LLMGW_NOT_FOUND: { status: 404, type: 'invalid_request_error' },
  LLMGW_REPLICA_NOT_HERE: { status: 404, type: 'invalid_request_error' },
  LLMGW_DOOR_NOT_STARTED: { status: 500, type: 'server_error' },
  LLMGW_REQUEST_TIMEOUT: { status: 408, type: 'invalid_request_error' },
  LLMGW_BODY_TOO_LARGE: { status: 413, type: 'invalid_request_error' },
  LLMGW_UNSUPPORTED_MEDIA_TYPE: { status: 415, type: 'invalid_request_error' },
  LLMGW_HEADERS_TOO_LARGE: { status: 431, type: 'invalid_request_error' },
  LLMGW_INTERNAL: { status: 500, type: 'server_error' },
  LLMGW_ENDPOINT_UNSUPPORTED: { status: 400, type: 'invalid_request_error' },
  LLMGW_CORS_REFUSED: { status: 403, type: 'invalid_request_error' },
  LLMGW_TEMPORAL_UNREACHABLE: { status: 503, type: 'server_error' },
  LLMGW_TEMPORAL_CREDENTIALS_INVALID: { status: 500, type: 'server_error' },
  LLMGW_TEMPORAL_TLS_FAILED: { status: 503, type: 'server_error' },
  LLMGW_TEMPORAL_AUTH_FAILED: { status: 503, type: 'server_error' },
  LLMGW_PORT_TAKEN: { status: 409, type: 'invalid_request_error' },
  LLMGW_SCHEMA_BEHIND: { status: 500, type: 'server_error' },
  LLMGW_SCHEMA_AHEAD: { status: 500, type: 'server_error' },
  LLMGW_MYSQL_GRANT_MISSING: { status: 500, type: 'server_error' },
  LLMGW_MYSQL_LOGIN_REFUSED: { status: 500, type: 'server_error' },
  LLMGW_MYSQL_TLS_REQUIRED: { status: 500, type: 'server_error' },
  LLMGW_MYSQL_TLS_FAILED: { status: 500, type: 'server_error' },
  LLMGW_PAGE_KEY_EXISTS: { status: 409, type: 'invalid_request_error' },
  LLMGW_PAGE_SIGNIN_REQUIRED: { status: 401, type: 'invalid_request_error' },
  LLMGW_PAGE_CSRF_REFUSED: { status: 403, type: 'invalid_request_error' },
  LLMGW_INVALID_API_KEY: { status: 401, type: 'invalid_request_error', openai: 'invalid_api_key' },
  LLMGW_MODEL_NOT_ALLOWED: { status: 403, type: 'invalid_request_error', openai: 'model_not_allowed' },
  LLMGW_RATE_LIMITED_REQUESTS: { status: 429, type: 'requests', openai: 'rate_limit_exceeded' },
  LLMGW_RATE_LIMITED_TOKENS: { status: 429, type: 'tokens', openai: 'rate_limit_exceeded' },
  LLMGW_KEY_EXISTS: { status: 409, type: 'invalid_request_error' },
  LLMGW_UNKNOWN_KEY: { status: 404, type: 'invalid_request_error' },
  LLMGW_QUEUE_FULL: { status: 429, type: 'rate_limit_exceeded' },
  LLMGW_QUEUE_TIMEOUT: { status: 503, type: 'server_error' },
} as const;

export type ErrorCode = keyof typeof ERRORS;

/** An error with a catalogue code and context fields. Handlers test `.code`, never `instanceof`. */
export class LlmgwError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly context: Record<string, unknown>;
  constructor(code: ErrorCode, message: string, context: Record<string, unknown> = {}) {
    super(message);
    this.name = code;
    this.code = code;
    this.status = ERRORS[code].status;
    this.context = context;
  }
}

/** True when `err` carries catalogue code `code` (works across realms). */
export function hasCode(err: unknown, code: ErrorCode): boolean {
  return typeof err === 'object' && err !== null && (err as { code?: unknown }).code === code;
}

/**
 * Input echoed in an error message: at most `max` characters (then `…`), quoted and escaped as a JSON string, so
 * a 10,000-character or control-character-laden value can neither flood a message nor forge a log line.
 */
export function quoteInput(value: unknown, max = 64): string {
  const text = String(value);
  // Code points, not UTF-16 units, so a cut never splits a character; a code point is at most two units.
  const head = Array.from(text.slice(0, max * 2 + 2));
  return JSON.stringify(head.length > max || text.length > max * 2 + 2 ? `${head.slice(0, max).join('')}…` : text);
}

/** The OpenAI error body for a catalogue error. */
export function openAiError(
  code: ErrorCode,
  message: string,
): { error: { message: string; type: string; code: string } } {
  const e: { type: string; openai?: string } = ERRORS[code];
  // Where OpenAI has a code of its own for the case (invalid_api_key, rate_limit_exceeded), clients look for that one.
  return { error: { message, type: e.type, code: e.openai ?? code } };
}
