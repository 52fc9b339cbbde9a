/** Who holds a port, as the local cluster's and the agent's refusals name it: a listener's process, or a connection's local end. */
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { describePortHolder, portFree, portHolder } from '../../lib/port-holder';

describe('describePortHolder', () => {
  let server: Server;
  let port: number;
  beforeAll(async () => {
    server = createServer();
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(() => new Promise((r) => server.close(r)));

  test('a listener: its pid and command line', async () => {
    expect(await portFree(port)).toBe(false);
    expect(portHolder(port)?.pid).toBe(process.pid);
    expect(describePortHolder(port, 'unseen')).toMatch(new RegExp(`^pid ${process.pid} \\(.*node.*\\)$`));
  });

  test("an outgoing connection's local port: refused for a listener too, and said so, with the kernel's range", async () => {
    const client: Socket = connect(port, '127.0.0.1');
    await new Promise((r) => client.once('connect', r));
    try {
      const local = client.localPort as number;
      expect(await portFree(local)).toBe(false);
      expect(portHolder(local)).toBeNull();
      expect(describePortHolder(local, 'unseen')).toMatch(
        /^the local end of a connection \(ESTABLISHED\): \d+-\d+ is the kernel's range for outgoing connections' ports, so listeners belong below \d+$/,
      );
    } finally {
      client.destroy();
    }
  });

  test("nothing on the port: the caller's words for what it cannot see", () => {
    // Port 1: nothing listens or connects from it on a test machine.
    expect(describePortHolder(1, 'a process this user cannot see')).toBe('a process this user cannot see');
  });
});
