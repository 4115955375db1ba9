// The node's process launcher (launcher.ts): a small process that starts host commands for the server, so
// that the server's own large process is never forked (docs/runtime.md#host-commands).
import { spawnCollect, type SpawnRequest } from './spawn-collect.js';

interface Message {
  id: number;
  req: SpawnRequest;
}

// It ends with the server (its channel closes), not with a signal sent to the process group: a Ctrl-C stops
// the server gracefully, which still runs host commands through here until it is done.
for (const s of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(s, () => {});
process.on('disconnect', () => process.exit(0));
process.on('message', (m: Message) => {
  const reply = (answer: object) => {
    if (process.connected) process.send!({ id: m.id, ...answer }, undefined, undefined, () => {});
  };
  spawnCollect(m.req).then(
    (outcome) => reply({ outcome }),
    (e: NodeJS.ErrnoException) => reply({ error: { message: e.message, code: e.code } }),
  );
});
