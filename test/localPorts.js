// Ports on 127.0.0.1 for the servers globalSetup starts (citusCluster.js, pgbouncer.js): plain
// JavaScript, as globalSetup loads them before any TypeScript is compiled (test/helpers/ports.ts is
// the tests' own).
const net = require('node:net');

/** A port nothing listens on now. */
async function freePort() {
  const server = net.createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Whether something accepts connections on the port. */
async function accepting(port) {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.once('error', () => resolve(false));
  });
}

module.exports = { freePort, accepting };
