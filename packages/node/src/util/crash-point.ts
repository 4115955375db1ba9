/**
 * Fault injection for crash tests: when `AENV_FAULT_CRASH_AT` names this point, the server kills itself with
 * SIGKILL right here, exactly like a crash at that instant. Unset in production, this is a no-op.
 */
export function crashPoint(name: string): void {
  if (process.env.AENV_FAULT_CRASH_AT === name) process.kill(process.pid, 'SIGKILL');
}

/**
 * Fault injection for the process guard's tests: when `AENV_FAULT_REJECT_AT` names this point, a promise is
 * rejected here that nobody handles; when `AENV_FAULT_THROW_AT` does, an exception is thrown from a callback
 * nobody catches. Both belong to the request being served. Unset in production, this is a no-op.
 */
export function unhandledFaultPoint(name: string): void {
  if (process.env.AENV_FAULT_REJECT_AT === name) {
    void Promise.reject(new Error(`unhandled rejection injected at ${name}`));
  }
  if (process.env.AENV_FAULT_THROW_AT === name) {
    setImmediate(() => {
      throw new Error(`uncaught exception injected at ${name}`);
    });
  }
}

/**
 * Fault injection for rollback tests: when `AENV_FAULT_FAIL_AFTER` names this point, an error is thrown here, as
 * if the step just done had failed at its very end. Unset in production, this is a no-op.
 */
export function failurePoint(name: string): void {
  if (process.env.AENV_FAULT_FAIL_AFTER === name) throw new Error(`failure injected after ${name}`);
}
