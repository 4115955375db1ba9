// The conformance suite (packages/protocol/src/conformance) against standalone envd processes: raw Connect and
// REST, envd's token rules, the real e2b SDK, and the node's envd clients. envd runs as root on this host, or
// as PID 1's child in a chrooted namespace for the SDK cases (see testing/conformance-target.ts).
import { afterAll } from 'vitest';
import { conformanceSuite } from '@aenv/protocol/conformance';
import { envdTarget } from './testing/conformance-target.js';

const target = envdTarget();
afterAll(() => target.close());

conformanceSuite(target);
