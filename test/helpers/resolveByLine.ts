/**
 * A child process for tests: resolves each host name read on stdin with the tenants' resolver
 * (dnsOnlyResolver, resolv.conf's servers) and writes its IPv4 addresses, or its error, as one JSON
 * line. Run it where /etc/resolv.conf is a test's own file (a private mount namespace), with
 * RECHECK_MS for how often that file is looked at again.
 */
import readline from 'node:readline';

import { dnsOnlyResolver } from '../../src/service/callbackDns';

const resolve = dnsOnlyResolver([], { recheckMs: Number(process.env.RECHECK_MS ?? 5000) });
readline.createInterface({ input: process.stdin }).on('line', (hostname) => {
  resolve(hostname, { family: 4 }).then(
    (addresses) => process.stdout.write(`${JSON.stringify(addresses.map((a) => a.address))}\n`),
    (error: unknown) => process.stdout.write(`${JSON.stringify({ error: String(error) })}\n`),
  );
});
