/** Activities on the llmgw-ca queue: the only code that holds the CA key. Every certificate issued is recorded in MySQL. */
import { renameSync, writeFileSync } from 'node:fs';
import { ApplicationFailure } from '@temporalio/common';
import { hasCode, type ErrorCode, LlmgwError } from '../../lib/errors';
import {
  buildCrl,
  caPaths,
  checkNodeId,
  crlRefreshAt,
  DEFAULT_VALIDITY_DAYS,
  issueNodeCertificate,
  issueClientCertificate,
  type ClientRole,
  issueServerCertificate,
  loadCa,
  renewAt,
  signNodeCsr,
  type Ca,
  type Issued,
} from '../../lib/pki';
import type { Store } from '../../lib/store/store';

export interface CaDeps {
  /** the CA directory (ca.crt, ca.key; crl.pem is written here) */
  caDir: string;
  store: Store;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
  /** validity of node and server certificates unless a call asks otherwise (default 90) */
  validityDays?: number;
  /** validity of a CRL (default 7) */
  crlDays?: number;
  now?: () => Date;
}

/** A certificate as activities return it (dates as ISO strings: results cross Temporal as JSON). */
export interface IssuedCertificate {
  cn: string;
  serial: string;
  certPem: string;
  /** the CA certificate, to trust the peer with */
  caPem: string;
  notBefore: string;
  notAfter: string;
  /** when its holder should renew it (two thirds of its lifetime) */
  renewAt: string;
}

export interface CurrentCrl {
  pem: string;
  number: string;
  thisUpdate: string;
  nextUpdate: string;
  /** publish a new one by then (half of its lifetime) */
  refreshAt: string;
  revoked: number;
}

/** What the llmgw-ca worker does. */
export interface CaOperations {
  /** A node certificate and a new key for it. The key travels in the result (and Temporal's history): prefer signNodeCsr. */
  issueNodeCertificate(input: { nodeId: string; days?: number }): Promise<IssuedCertificate & { keyPem: string }>;
  /**
   * Signs a node's CSR for `identity`, the node id the caller authenticated (the CN of the mTLS
   * connection, or the node onboarding is adding), never the CSR's subject. For a renewal, pass the
   * serial of the certificate the connection presented: it must be this CA's, of this CN, unrevoked.
   */
  signNodeCsr(input: {
    csrPem: string;
    identity: string;
    presentedSerial?: string;
    days?: number;
  }): Promise<IssuedCertificate>;
  /** An operator's client certificate (role operator: what llmgw ctl presents) and a new key. */
  issueOperatorCertificate(input: { name: string; days?: number }): Promise<IssuedCertificate & { keyPem: string }>;
  /** A client certificate of role operator or gateway (what a gateway presents to the control plane) and a new key. */
  issueClientCertificate(input: {
    role: ClientRole;
    name: string;
    days?: number;
  }): Promise<IssuedCertificate & { keyPem: string }>;
  /** A server certificate (serverAuth) with DNS/IP SANs for `hosts`, and a new key. */
  issueServerCertificate(input: {
    name: string;
    hosts: string[];
    days?: number;
  }): Promise<IssuedCertificate & { keyPem: string }>;
  /** Revokes every certificate of the node and republishes the CRL; returns how many were revoked (0 when already). */
  revokeNode(input: { nodeId: string; reason: string }): Promise<number>;
  /** A freshly signed CRL of the revoked certificates, also written to crl.pem in the CA directory. */
  currentCrl(): Promise<CurrentCrl>;
}

/** Errors no retry can fix: the activity fails at once with the catalogue code as its type. */
const PERMANENT: ErrorCode[] = [
  'LLMGW_CA_MISSING',
  'LLMGW_CA_INVALID',
  'LLMGW_BAD_PEM',
  'LLMGW_BAD_CSR',
  'LLMGW_BAD_NODE_ID',
  'LLMGW_CERT_REFUSED',
  'LLMGW_BAD_REQUEST',
];

/** The CA operations as plain functions throwing catalogue errors (the CLI calls these; activities wrap them). */
export function createCaOperations(deps: CaDeps): CaOperations {
  const now = deps.now ?? ((): Date => new Date());
  const log = deps.log ?? ((): void => undefined);
  let ca: Ca | undefined;
  const theCa = (): Ca => (ca ??= loadCa(deps.caDir, now()));
  const opts = (days?: number): { days: number; now: Date } => ({
    days: days ?? deps.validityDays ?? DEFAULT_VALIDITY_DAYS,
    now: now(),
  });

  const record = async (issued: Issued): Promise<IssuedCertificate> => {
    await deps.store.recordCertificate({
      serial: issued.serial,
      cn: issued.cn,
      role: issued.role,
      notBefore: issued.notBefore,
      notAfter: issued.notAfter,
      pem: issued.certPem,
    });
    log('certificate issued', {
      cn: issued.cn,
      role: issued.role,
      serial: issued.serial,
      notAfter: issued.notAfter.toISOString(),
    });
    return {
      cn: issued.cn,
      serial: issued.serial,
      certPem: issued.certPem,
      caPem: theCa().certPem,
      notBefore: issued.notBefore.toISOString(),
      notAfter: issued.notAfter.toISOString(),
      renewAt: renewAt(issued.notBefore, issued.notAfter).toISOString(),
    };
  };

  const currentCrl = async (): Promise<CurrentCrl> => {
    const at = now();
    // An expired certificate fails validation by itself; the CRL lists the revoked ones still valid.
    const revoked = (await deps.store.revokedSerials()).filter((r) => r.notAfter > at);
    const crl = buildCrl(theCa(), revoked, { now: at, days: deps.crlDays });
    const file = caPaths(deps.caDir).crl;
    writeFileSync(`${file}.tmp`, crl.pem, { mode: 0o644 });
    renameSync(`${file}.tmp`, file); // readers never see half a CRL
    return {
      pem: crl.pem,
      number: crl.number,
      thisUpdate: crl.thisUpdate.toISOString(),
      nextUpdate: crl.nextUpdate.toISOString(),
      refreshAt: crlRefreshAt(crl).toISOString(),
      revoked: revoked.length,
    };
  };

  const issueClient = async (input: {
    role: ClientRole;
    name: string;
    days?: number;
  }): Promise<IssuedCertificate & { keyPem: string }> => {
    const issued = issueClientCertificate(theCa(), input.role, input.name, opts(input.days));
    return { ...(await record(issued)), keyPem: issued.keyPem };
  };
  return {
    async issueNodeCertificate(input: {
      nodeId: string;
      days?: number;
    }): Promise<IssuedCertificate & { keyPem: string }> {
      const issued = issueNodeCertificate(theCa(), input.nodeId, opts(input.days));
      return { ...(await record(issued)), keyPem: issued.keyPem };
    },

    async signNodeCsr(input: {
      csrPem: string;
      identity: string;
      presentedSerial?: string;
      days?: number;
    }): Promise<IssuedCertificate> {
      const id = checkNodeId(input.identity);
      if (input.presentedSerial !== undefined) {
        const serial = input.presentedSerial.toLowerCase();
        const cert = await deps.store.certificateBySerial(serial);
        const refuse = (why: string): LlmgwError =>
          new LlmgwError('LLMGW_CERT_REFUSED', `certificate ${serial} presented by ${id} ${why}: no renewal`, {
            serial,
            identity: id,
          });
        if (!cert) throw refuse('was never issued by this CA');
        if (cert.cn !== id) throw refuse(`belongs to ${cert.cn}`);
        if (cert.revokedAt)
          throw refuse(`was revoked at ${cert.revokedAt.toISOString()} (${cert.revokedReason ?? 'no reason given'})`);
      }
      return record(signNodeCsr(theCa(), input.csrPem, id, opts(input.days)));
    },

    async issueOperatorCertificate(input: {
      name: string;
      days?: number;
    }): Promise<IssuedCertificate & { keyPem: string }> {
      return issueClient({ role: 'operator', ...input });
    },

    issueClientCertificate: issueClient,

    async issueServerCertificate(input: {
      name: string;
      hosts: string[];
      days?: number;
    }): Promise<IssuedCertificate & { keyPem: string }> {
      const issued = issueServerCertificate(theCa(), input.name, input.hosts, opts(input.days));
      return { ...(await record(issued)), keyPem: issued.keyPem };
    },

    async revokeNode(input: { nodeId: string; reason: string }): Promise<number> {
      const id = checkNodeId(input.nodeId);
      const count = await deps.store.revokeCertificates(id, input.reason);
      log('node certificates revoked', { nodeId: id, count, reason: input.reason });
      await currentCrl();
      return count;
    },

    currentCrl,
  };
}

/** Runs `fn`; a catalogue error no retry can fix becomes a non-retryable failure typed with its code. */
async function permanent<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    const code = PERMANENT.find((c) => hasCode(err, c));
    if (!code) throw err; // e.g. MySQL unreachable: worth a retry
    const e = err as LlmgwError;
    throw ApplicationFailure.create({ message: e.message, type: code, nonRetryable: true, details: [e.context] });
  }
}

/** The activities of the llmgw-ca worker. */
export function createCaActivities(deps: CaDeps): CaOperations {
  const ops = createCaOperations(deps);
  return {
    issueNodeCertificate: (input) => permanent(() => ops.issueNodeCertificate(input)),
    signNodeCsr: (input) => permanent(() => ops.signNodeCsr(input)),
    issueOperatorCertificate: (input) => permanent(() => ops.issueOperatorCertificate(input)),
    issueClientCertificate: (input) => permanent(() => ops.issueClientCertificate(input)),
    issueServerCertificate: (input) => permanent(() => ops.issueServerCertificate(input)),
    revokeNode: (input) => permanent(() => ops.revokeNode(input)),
    currentCrl: () => permanent(() => ops.currentCrl()),
  };
}
