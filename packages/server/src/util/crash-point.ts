/**
 * Fault injection for crash tests: when `AENV_FAULT_CRASH_AT` names this point, the server kills itself with
 * SIGKILL right here, exactly like a crash at that instant. Unset in production, this is a no-op.
 */
export function crashPoint(name: string): void {
  if (process.env.AENV_FAULT_CRASH_AT === name) process.kill(process.pid, 'SIGKILL');
}
